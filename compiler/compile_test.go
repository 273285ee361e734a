package compiler

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/compiler/diag"
)

// compileFiles writes files into a fresh spec directory and compiles it.
// Positions in the returned diagnostics are relative to that directory.
func compileFiles(t testing.TB, files map[string]string) diag.List {
	t.Helper()
	return compileProfile(t, files, "")
}

// compileProfile is compileFiles with a Source.Profile.
func compileProfile(t testing.TB, files map[string]string, profile string) diag.List {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, diags := Compile(Source{Dir: dir, Profile: profile})
	return diags.Relative(dir)
}

// line renders a diagnostic as the corpus and table tests compare it.
func line(d diag.Diagnostic) string {
	return fmt.Sprintf("%s %s %s %s", d.Code, d.Severity, d.Path, d.Primary())
}

func lines(l diag.List) string {
	var b strings.Builder
	for _, d := range l {
		b.WriteString(line(d))
		b.WriteByte('\n')
	}
	return b.String()
}

func TestExamplesAreClean(t *testing.T) {
	dirs, err := filepath.Glob("../examples/*")
	if err != nil || len(dirs) < 5 {
		t.Fatalf("expected at least 5 examples, found %v (%v)", dirs, err)
	}
	// The single-node example has one etcd member by nature; xlarge,
	// the simulator's benchmark, has one to compare with KWOK.
	allowed := map[string][]string{"single-node": {CodeEtcdSingle}, "flatcar": {CodeEtcdSingle}, "xlarge": {CodeEtcdSingle}}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		if name == "policies" {
			continue // a library of policies, not a cluster (TestPolicyRules)
		}
		t.Run(name, func(t *testing.T) {
			c, diags := Compile(Source{Dir: dir})
			if c == nil {
				t.Fatalf("example does not compile:\n%s", lines(diags))
			}
			var unexpected diag.List
			for _, d := range diags {
				ok := false
				for _, code := range allowed[name] {
					ok = ok || d.Code == code
				}
				if !ok {
					unexpected = append(unexpected, d)
				}
			}
			if len(unexpected) > 0 {
				t.Errorf("unexpected diagnostics:\n%s", lines(unexpected))
			}
		})
	}
}

func TestThreeProblemsInTwoFiles(t *testing.T) {
	diags := compileFiles(t, map[string]string{
		"a.cue": `package cluster

apiVersion: "kcompile.dev/v1alpha1"
name:       "Bad_Name"
kubernetes: version: "1.37.2"
controlPlane: nodes: cp1: address: "10.0.0.11"
controlPlane: schedulable: true
`,
		"b.cue": `package cluster

network: {
	nodes: ["10.0.0.0/16"]
	podCIDR: "10.0.128.0/17"
}
pki: keyAlgorithm: "RSA-1024"
`,
	})
	want := "KC0101 error name a.cue:4:13\n" +
		"KC0402 warning controlPlane.nodes a.cue:6:22\n" +
		"KC0302 error network.podCIDR b.cue:5:11\n" +
		"KC1001 error pki.keyAlgorithm b.cue:7:20\n"
	if got := lines(diags); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}
