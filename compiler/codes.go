package compiler

// Codes of diagnostics raised while loading, before the semantic checks.
const (
	CodeLoad       = "KC0001"
	CodeAPIVersion = "KC0002"
	CodeSchema     = "KC0003"
	CodeMissing    = "KC0004"
	CodeInternal   = "KC0005"
	CodeAmbiguous  = "KC0006"
	CodeEvalBound  = "KC0007"
	CodePolicyEval = "KC2006"
)
