package compiler

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/literal"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/schema"
)

// schemaStrings lists the path patterns of every string the schema
// declares, in the notation of stringField: "*" for any field name, "[]"
// for any list index, ":key" for the field names of a pattern.
func schemaStrings(t *testing.T) []string {
	t.Helper()
	def, err := buildSchema(cuecontext.New(), schema.Versions()[0], "#Cluster")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	join := func(path, sel string) string {
		if path == "" {
			return sel
		}
		return path + "." + sel
	}
	var walk func(v cue.Value, path string)
	walk = func(v cue.Value, path string) {
		// A disjunction of shapes (a list default and its type) declares
		// the strings of each.
		if op, args := v.Expr(); op == cue.OrOp {
			for _, a := range args {
				walk(a, path)
			}
			return
		}
		k := v.IncompleteKind()
		if k&cue.StructKind != 0 {
			if it, err := v.Fields(cue.Optional(true), cue.Patterns(true)); err == nil {
				for it.Next() {
					if it.Selector().ConstraintType()&cue.PatternConstraint != 0 {
						out = append(out, join(path, "*")+":key")
						walk(it.Value(), join(path, "*"))
						continue
					}
					walk(it.Value(), join(path, it.Selector().Unquoted()))
				}
			}
		}
		if k&cue.ListKind != 0 {
			e := v.LookupPath(cue.MakePath(cue.AnyIndex))
			if !e.Exists() {
				// A list with a default: its type is in the expression.
				_, args := v.Expr()
				for _, a := range args {
					if e = a.LookupPath(cue.MakePath(cue.AnyIndex)); e.Exists() {
						break
					}
				}
			}
			if e.Exists() {
				walk(e, path+"[]")
			}
		}
		if k&cue.StringKind != 0 {
			out = append(out, path)
		}
	}
	walk(def, "")
	slices.Sort(out)
	return slices.Compact(out)
}

// TestEveryStringIsHeld proves that every string of the schema is either
// validated by a named check or reaches no artifact, as stringFields
// says: a new string field fails this test until it is listed.
func TestEveryStringIsHeld(t *testing.T) {
	fields := map[string]stringField{}
	for _, f := range stringFields() {
		if _, dup := fields[f.pattern]; dup {
			t.Errorf("stringFields lists %s twice", f.pattern)
		}
		fields[f.pattern] = f
		if (f.checkedBy == "") == (f.unused == "") {
			t.Errorf("%s must name its check or why it reaches no artifact, not both", f.pattern)
		}
		if f.checkedBy != "" && f.sample == "" {
			t.Errorf("%s has no sample to prove its check with", f.pattern)
		}
	}
	found := schemaStrings(t)
	for _, p := range found {
		if _, ok := fields[p]; !ok {
			t.Errorf("schema string %s is in neither stringFields' checks nor its list of strings that reach no artifact", p)
		}
	}
	for p := range fields {
		if !slices.Contains(found, p) {
			t.Errorf("stringFields lists %s, which the schema no longer has", p)
		}
	}
	codes := map[string]bool{"schema": true}
	for _, r := range Rules() {
		codes[r.Code] = true
	}
	for _, f := range stringFields() {
		if f.checkedBy != "" && !codes[f.checkedBy] {
			t.Errorf("%s is checked by %s, which is no rule", f.pattern, f.checkedBy)
		}
	}
}

// hostileStrings are values no free-form field may take as they are:
// each would add a line, a directive, a flag or a terminal escape to
// what kcompile writes or prints if it went through unchecked.
func hostileStrings() []string {
	return []string{
		"a\nExecStartPre=/bin/sh -c id",
		"a --anonymous-auth=true --authorization-mode=AlwaysAllow",
		`a"b'c%n${PATH};|d`,
		"\x1b[31mred\x1b[0m\x00",
		"\u202eevil",
		strings.Repeat("a", 70000),
	}
}

// hostileBase is a minimal clean spec, one line per path it sets; a
// sample that sets one of these paths replaces its line.
func hostileBase() [][2]string {
	return [][2]string{
		{"apiVersion", `apiVersion: "kcompile.dev/v1alpha1"`},
		{"name", `name: "t"`},
		{"kubernetes.version", `kubernetes: version: "1.37.2"`},
		{"controlPlane.nodes.*.address", `controlPlane: nodes: cp1: address: "10.0.0.11"`},
		{"network.nodes[]", `network: nodes: ["10.0.0.0/16"]`},
	}
}

// TestHostileStrings puts every hostile string in every string field of
// the schema that a check holds: each spec must fail with an error at the
// place the value was written, and the check stringFields names must be
// the one that reports at least one of them. A field whose consumer takes
// any string (anyString) may accept them; the property test of the
// targets proves the encoder keeps them in place.
func TestHostileStrings(t *testing.T) {
	for _, f := range stringFields() {
		if f.checkedBy == "" {
			continue
		}
		t.Run(f.pattern, func(t *testing.T) {
			t.Parallel()
			var base []string
			for _, l := range hostileBase() {
				if l[0] != f.pattern {
					base = append(base, l[1])
				}
			}
			named := false
			for _, v := range hostileStrings() {
				spec := map[string][]byte{
					"base.cue":   []byte("package cluster\n\n" + strings.Join(base, "\n") + "\n"),
					"sample.cue": []byte("package cluster\n\n" + fmt.Sprintf(f.sample, literal.String.Quote(v)) + "\n"),
				}
				c, diags := Compile(Source{Dir: t.TempDir(), Overlay: spec})
				if f.anyString {
					continue
				}
				if c != nil {
					t.Errorf("accepted %s", diag.Quote(v))
					continue
				}
				at := false
				for _, d := range diags {
					if d.Severity != diag.Error {
						continue
					}
					if strings.HasSuffix(d.Primary().File, "sample.cue") && d.Primary().Line == 3 {
						at = true
					}
					if d.Code == f.checkedBy || f.checkedBy == "schema" && (d.Code == CodeSchema || d.Code == CodeMissing) {
						named = true
					}
					if d.Code == CodeInternal {
						t.Errorf("internal error for %s: %s", diag.Quote(v), d.Message)
					}
				}
				if !at {
					t.Errorf("%s is refused, but at no position of the value:\n%s", diag.Quote(v), lines(diags))
				}
			}
			if !named && !f.anyString {
				t.Errorf("no hostile value was reported by %s, the check stringFields names", f.checkedBy)
			}
		})
	}
}
