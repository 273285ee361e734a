package ignition_test

import (
	"os"
	"slices"
	"testing"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/review"
	"github.com/kcompile/kcompile/targets/ignition"
	"github.com/kcompile/kcompile/targets/systemd"
)

// TestGolden compares the Ignition tree of every example with Ignition
// nodes with golden/<example>/ignition; KCOMPILE_UPDATE=1 rewrites them.
// It is an external test because review imports this package.
func TestGolden(t *testing.T) {
	update := os.Getenv("KCOMPILE_UPDATE") != ""
	for _, name := range fixture.Examples() {
		m := fixture.Material(t, name, nil)
		if !slices.ContainsFunc(m.Cluster.Nodes, func(n ir.Node) bool { return n.OS.Ignition() }) {
			continue
		}
		sd, err := systemd.Build(m, systemd.Options{})
		if err != nil {
			t.Fatal(err)
		}
		tree, _, err := ignition.Build(m, sd)
		if err != nil {
			t.Fatal(err)
		}
		d, err := review.Golden(fixture.Path("golden/"+name+"/ignition"), tree, update)
		if err != nil {
			t.Fatal(err)
		}
		if d != "" {
			t.Errorf("%s: the Ignition tree differs from golden/%s/ignition (KCOMPILE_UPDATE=1 go test ./targets/ignition rewrites it):\n%s", name, name, d)
		}
	}
}
