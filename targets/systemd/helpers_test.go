package systemd

import (
	"github.com/kcompile/kcompile/targets/unitfile"
	"testing"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
)

func compileExample(t testing.TB, name string) *ir.Cluster {
	t.Helper()
	c, diags := compiler.Compile(compiler.Source{Dir: "../../examples/" + name})
	if c == nil {
		t.Fatalf("%s does not compile: %v", name, diags)
	}
	return c
}

// examples are those whose whole trees the tests check; large is covered
// by benchmarks.
var examples = []string{"single-node", "ha-stacked", "external-etcd", "dual-stack"}

// render is File.Render for units a test builds, which must render.
func render(t testing.TB, u unitfile.File) []byte {
	t.Helper()
	b, err := u.Render()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
