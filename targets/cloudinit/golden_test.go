package cloudinit_test

import (
	"os"
	"testing"

	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/review"
	"github.com/kcompile/kcompile/targets/cloudinit"
	"github.com/kcompile/kcompile/targets/systemd"
)

// TestGolden compares every example's cloud-init tree with
// golden/<example>/cloudinit; KCOMPILE_UPDATE=1 rewrites them. It is an
// external test because review imports this package, to read user-data.
func TestGolden(t *testing.T) {
	update := os.Getenv("KCOMPILE_UPDATE") != ""
	for _, name := range fixture.Examples() {
		m := fixture.Material(t, name, nil)
		sd, err := systemd.Build(m, systemd.Options{})
		if err != nil {
			t.Fatal(err)
		}
		tree, _, err := cloudinit.Build(m, sd)
		if err != nil {
			t.Fatal(err)
		}
		d, err := review.Golden(fixture.Path("golden/"+name+"/cloudinit"), tree, update)
		if err != nil {
			t.Fatal(err)
		}
		if d != "" {
			t.Errorf("%s: the cloud-init tree differs from golden/%s/cloudinit (KCOMPILE_UPDATE=1 go test ./targets/cloudinit rewrites it):\n%s", name, name, d)
		}
	}
}
