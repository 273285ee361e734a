package compiler

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/txtar"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/pki"
)

// FuzzCompile feeds arbitrary spec files to the whole pipeline. Whatever
// the input, Compile must not panic, must return a cluster exactly when
// there is no error, and every diagnostic must be complete.
func FuzzCompile(f *testing.F) {
	seeds, _ := filepath.Glob("../examples/*/*.cue")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	bad, _ := filepath.Glob("testdata/bad/*.txtar")
	for _, s := range bad {
		if ar, err := txtar.ParseFile(s); err == nil {
			for _, file := range ar.Files {
				if file.Name != "expect" {
					f.Add(file.Data)
				}
			}
		}
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, spec []byte) {
		c, diags := Compile(Source{Dir: dir, Overlay: map[string][]byte{"spec.cue": spec}})
		if (c == nil) != diags.HasErrors() {
			t.Fatalf("cluster %v returned with errors=%v", c != nil, diags.HasErrors())
		}
		for _, d := range diags {
			if d.Code == "" || d.Message == "" {
				t.Fatalf("incomplete diagnostic %+v", d)
			}
			if d.Code == CodeInternal {
				t.Fatalf("internal error: %+v", d)
			}
		}
		if c != nil && (len(c.Nodes) == 0 || c.Endpoint.URL() == "") {
			t.Fatalf("clean spec lowered to an incomplete cluster: %d nodes, endpoint %q", len(c.Nodes), c.Endpoint.URL())
		}
		if c != nil {
			// What `kcompile check` runs after the compiler.
			for _, d := range pki.Check(c, nil, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
				if d.Severity == diag.Error {
					t.Fatalf("clean spec fails the PKI catalogue checks: %+v", d)
				}
			}
		}
	})
}

// BenchmarkCheckLarge measures `kcompile check examples/large`: loading,
// checking and lowering 5,005 nodes. The target is under one second.
func BenchmarkCheckLarge(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		c, diags := Compile(Source{Dir: "../examples/large"})
		if c == nil || diags.HasErrors() {
			b.Fatalf("examples/large does not compile: %v", diags)
		}
	}
}

// BenchmarkCheckLargePolicies checks examples/large, labelled a
// production cluster so that every shipped policy applies, against the
// whole library of examples/policies (issue target: under 1.5 s/op, at
// most 0.5 s more than without policies).
func BenchmarkCheckLargePolicies(b *testing.B) {
	dirs, err := filepath.Glob("../examples/policies/*")
	if err != nil || len(dirs) < 4 {
		b.Fatalf("the policy library: %v %v", dirs, err)
	}
	src := Source{Dir: "../examples/large", Policies: dirs, Profile: ProfileCIS,
		Overlay: map[string][]byte{"zz_labels.cue": []byte("package cluster\nlabels: environment: \"production\"\n")}}
	b.ReportAllocs()
	for b.Loop() {
		c, diags := Compile(src)
		if c == nil {
			b.Fatalf("examples/large does not compile: %v", diags)
		}
		// What the policies find is the benchmark's business only as
		// work done; a shipped policy that does not load is a failure.
		for _, d := range diags {
			if d.Code == CodePolicyLoad || d.Code == CodePolicyShape || d.Code == CodePolicyNothing {
				b.Fatalf("a shipped policy does not load: %v", d)
			}
		}
	}
}
