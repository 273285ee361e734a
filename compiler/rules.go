package compiler

import "github.com/kcompile/kcompile/compiler/diag"

// family is one group of semantic checks and the rules it reports.
type family struct {
	name  string
	rules []diag.Rule
	check func(*model)
}

// families lists the semantic checks in the order they run.
func families() []family {
	return []family{
		namesFamily(), addressesFamily(), networksFamily(), etcdFamily(), controlPlaneFamily(),
		versionsFamily(), runtimeFamily(), cniFamily(), storageFamily(), pkiFamily(), installFamily(), cisFamily(), osFamily(), valuesFamily(), rolloutFamily(),
	}
}

// Rules lists every diagnostic kcompile can report, in code order. The
// table of checks in docs/checks.md is generated from it.
func Rules() []diag.Rule {
	rules := []diag.Rule{
		{Code: CodeLoad, Severity: diag.Error, Family: "load", Summary: "the spec directory does not load: CUE syntax error, missing or mixed package clause"},
		{Code: CodeAPIVersion, Severity: diag.Error, Family: "load", Summary: "apiVersion is missing or names a schema version this kcompile does not know"},
		{Code: CodeSchema, Severity: diag.Error, Family: "schema", Summary: "a value does not match the schema: wrong type, value not allowed, unknown field"},
		{Code: CodeMissing, Severity: diag.Error, Family: "schema", Summary: "a required value is not set"},
		{Code: CodeInternal, Severity: diag.Error, Family: "internal", Summary: "kcompile failed internally; please report it"},
		{Code: CodeAmbiguous, Severity: diag.Error, Family: "schema", Summary: "a value is a disjunction with more than one allowed value and no default"},
		{Code: CodeEvalBound, Severity: diag.Error, Family: "load", Summary: "evaluating the spec took longer or grew larger than --eval-timeout or --eval-memory allow"},
	}
	for _, f := range families() {
		for _, r := range f.rules {
			r.Family = f.name
			rules = append(rules, r)
		}
	}
	rules = append(rules, policyRules()...)
	return append(rules, scenarioRules()...)
}

// rule is shorthand for the rule tables of the check families; each
// family of semantic checks lives in its own check_<family>.go.
func rule(code string, sev diag.Severity, summary string) diag.Rule {
	return diag.Rule{Code: code, Severity: sev, Summary: summary}
}
