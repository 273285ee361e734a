package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/kcompile/kcompile/internal/fixture"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"kcompile-sim": func() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs kcompile-sim as users do: through `kcompile sim`, with
// kcompile built from the root module, and on its own. Each script starts
// with the repository's examples and the test bundle (mode 0600) in $WORK.
func TestScripts(t *testing.T) {
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "kcompile"), "github.com/kcompile/kcompile/cmd/kcompile")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building kcompile: %v\n%s", err, out)
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata",
		RequireExplicitExec: true,
		Cmds:                map[string]func(*testscript.TestScript, bool, []string){"status": fixture.Status},
		Setup: func(env *testscript.Env) error {
			env.Setenv("PATH", bin+string(os.PathListSeparator)+env.Getenv("PATH"))
			bundle, err := os.ReadFile(fixture.Path("testdata/test-secrets.json"))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(env.WorkDir, "secrets.json"), bundle, 0o600); err != nil {
				return err
			}
			return os.CopyFS(filepath.Join(env.WorkDir, "examples"), os.DirFS(fixture.Path("examples")))
		},
	})
}
