package compiler

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

// A spec's concrete data, compiled as a state, is the same cluster: the
// states of a plan differ from their specs only where the plan edits
// them.
func TestConcreteCompilesToTheSameCluster(t *testing.T) {
	dirs, _ := filepath.Glob("../examples/*")
	for _, dir := range dirs {
		if fi, err := os.Stat(filepath.Join(dir, "cluster.cue")); err != nil || fi.IsDir() {
			continue
		}
		t.Run(filepath.Base(dir), func(t *testing.T) {
			src := Source{Dir: dir}
			want, diags := Compile(src)
			if diags.HasErrors() {
				t.Fatalf("%s: %v", dir, diags)
			}
			data, diags := Concrete(src)
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			state, err := StateSource(src, data)
			if err != nil {
				t.Fatal(err)
			}
			got, diags := Compile(state)
			if diags.HasErrors() {
				t.Fatalf("the state does not compile: %v", diags)
			}
			strip := func(c *ir.Cluster) *ir.Cluster { c.Settings = nil; return c }
			if !reflect.DeepEqual(strip(want), strip(got)) {
				t.Errorf("the state compiles to another cluster than its spec")
			}
		})
	}
}

// A state reads none of its directory's own files.
func TestStateSourceHidesTheDirectory(t *testing.T) {
	src := Source{Dir: "../examples/single-node"}
	data, diags := Concrete(src)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	data["name"] = "renamed"
	state, err := StateSource(src, data)
	if err != nil {
		t.Fatal(err)
	}
	c, diags := Compile(state)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if c.Name != "renamed" {
		t.Errorf("the state's name is %q: the directory's files were read beside it", c.Name)
	}
}

// A tolerated code is a warning of the compile, and the cluster is
// lowered; without it, the same spec is refused.
func TestTolerate(t *testing.T) {
	spec := []byte(header + ha + `controlPlane: nodes: cp4: {address: "10.0.0.14", zone: "d"}
network: nodes: ["10.0.0.0/16"]
`)
	src := Source{Dir: t.TempDir(), Overlay: map[string][]byte{"spec.cue": spec}}
	even := func(l diag.List) diag.Severity {
		for _, d := range l {
			if d.Code == CodeEtcdEven {
				return d.Severity
			}
		}
		return -1
	}
	if c, diags := Compile(src); c != nil || even(diags) != diag.Error {
		t.Fatalf("four members: %v", diags)
	}
	src.Tolerate = []string{CodeEtcdEven}
	c, diags := Compile(src)
	if c == nil || diags.HasErrors() || even(diags) != diag.Warning {
		t.Errorf("tolerated: %v", diags)
	}
}
