package compiler

import "github.com/kcompile/kcompile/compiler/diag"

// Rule describes one diagnostic kcompile can report.
type Rule struct {
	Code     string
	Severity diag.Severity
	// Family groups rules by topic; each family of semantic checks lives in
	// its own check_<family>.go.
	Family  string
	Summary string
}

// family is one group of semantic checks and the rules it reports.
type family struct {
	name  string
	rules []Rule
	check func(*model)
}

// families lists the semantic checks in the order they run.
func families() []family {
	return []family{
		namesFamily(), addressesFamily(), networksFamily(), etcdFamily(), controlPlaneFamily(),
		versionsFamily(), runtimeFamily(), cniFamily(), storageFamily(), pkiFamily(), installFamily(), cisFamily(), valuesFamily(),
	}
}

// Rules lists every diagnostic kcompile can report, in code order. The
// README's table of checks is generated from it.
func Rules() []Rule {
	rules := []Rule{
		{CodeLoad, diag.Error, "load", "the spec directory does not load: CUE syntax error, missing or mixed package clause"},
		{CodeAPIVersion, diag.Error, "load", "apiVersion is missing or names a schema version this kcompile does not know"},
		{CodeSchema, diag.Error, "schema", "a value does not match the schema: wrong type, value not allowed, unknown field"},
		{CodeMissing, diag.Error, "schema", "a required value is not set"},
		{CodeInternal, diag.Error, "internal", "kcompile failed internally; please report it"},
		{CodeAmbiguous, diag.Error, "schema", "a value is a disjunction with more than one allowed value and no default"},
	}
	for _, f := range families() {
		for _, r := range f.rules {
			r.Family = f.name
			rules = append(rules, r)
		}
	}
	return rules
}

// rule is shorthand for the rule tables of the check families.
func rule(code string, sev diag.Severity, summary string) Rule {
	return Rule{Code: code, Severity: sev, Summary: summary}
}
