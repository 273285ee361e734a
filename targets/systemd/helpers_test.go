package systemd

import (
	"testing"

	"github.com/kcompile/kcompile/internal/unitfile"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/fixture"
)

func compileExample(t testing.TB, name string) *ir.Cluster {
	t.Helper()
	return fixture.Cluster(t, name, nil)
}

// render is File.Render for units a test builds, which must render.
func render(t testing.TB, u unitfile.File) []byte {
	t.Helper()
	b, err := u.Render()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
