package pipeline

import (
	"os"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/review"
	"github.com/kcompile/kcompile/targets"
)

// TestGolden builds every example through Run, as kcompile build does,
// and compares each target's tree with golden/<example>/<target>, for
// the targets whose golden directory the example has (the Terraform
// module without its node files, which are the cloud-init and Ignition
// goldens). KCOMPILE_UPDATE=1 rewrites them and deletes stale files.
func TestGolden(t *testing.T) {
	update := os.Getenv("KCOMPILE_UPDATE") != ""
	for _, name := range fixture.Examples() {
		var ts []Target
		for _, tg := range Targets() {
			if _, err := os.Stat(fixture.Path("golden/" + name + "/" + string(tg))); err == nil {
				ts = append(ts, tg)
			}
		}
		if len(ts) == 0 {
			t.Errorf("golden/%s holds no target's tree", name)
			continue
		}
		out, err := Run(Input{Source: example(name), Bundle: fixture.Bundle(t), Now: now, Targets: ts})
		if err != nil {
			t.Fatal(err)
		}
		if out.Diagnostics.HasErrors() {
			t.Fatalf("%s: %v", name, out.Diagnostics)
		}
		for _, tg := range ts {
			tree := out.Trees[tg]
			if tg == Terraform {
				module := targets.NewTree()
				for _, f := range tree.Files() {
					if !strings.HasPrefix(f.Path, "nodes/") {
						if err := module.Add(f.Path, f.Data, f.Mode); err != nil {
							t.Fatal(err)
						}
					}
				}
				tree = module
			}
			d, err := review.Golden(fixture.Path("golden/"+name+"/"+string(tg)), tree, update)
			if err != nil {
				t.Fatal(err)
			}
			if d != "" {
				t.Errorf("%s: the %s tree differs from golden/%s/%s (KCOMPILE_UPDATE=1 go test ./pipeline -run TestGolden rewrites it):\n%s", name, tg, name, tg, d)
			}
		}
	}
}
