package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/internal/fixture"

	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"kcompile": func() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs the CLI scripts in testdata/script. Each script starts
// with a copy of the repository's examples in $WORK/examples and of the
// test-only secrets bundle in $WORK/secrets.json, so paths in expected
// output are short and stable, and with SOURCE_DATE_EPOCH set.
func TestScripts(t *testing.T) {
	testscript.Run(t, scriptParams(t, "testdata/script"))
}

// TestHostile runs the hostile corpus in testdata/hostile: mistaken and
// malicious specs, bundles and output directories, each a script that
// asserts the exit status and the code and position of what is reported.
// No case may take longer than maxHostile.
func TestHostile(t *testing.T) {
	const minCases = 60
	cases, err := filepath.Glob("testdata/hostile/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < minCases {
		t.Errorf("the hostile corpus has %d cases; it must keep at least %d", len(cases), minCases)
	}
	p := scriptParams(t, "testdata/hostile")
	setup := p.Setup
	p.Setup = func(env *testscript.Env) error {
		start := time.Now()
		env.Defer(func() {
			if d := time.Since(start); d > maxHostile {
				env.T().Fatal(fmt.Sprintf("took %s; a hostile case must finish within %s", d.Round(time.Millisecond), maxHostile))
			}
		})
		return setup(env)
	}
	testscript.Run(t, p)
}

// maxHostile bounds each hostile case: bad input is refused quickly.
const maxHostile = 10 * time.Second

// scriptParams are the testscript parameters shared by the script
// directories.
func scriptParams(t *testing.T, dir string) testscript.Params {
	examples := fixture.Path("examples")
	return testscript.Params{
		Dir:                 dir,
		RequireExplicitExec: true,
		UpdateScripts:       os.Getenv("KCOMPILE_UPDATE") != "",
		Cmds:                map[string]func(*testscript.TestScript, bool, []string){"status": fixture.Status},
		Setup: func(env *testscript.Env) error {
			// Outputs that depend on the clock use 2026-06-01.
			env.Setenv("SOURCE_DATE_EPOCH", "1780272000")
			// The directory testscript puts kcompile in, for scripts that
			// need a PATH with nothing else on it.
			env.Setenv("KCOMPILE_BIN", strings.SplitN(env.Getenv("PATH"), string(os.PathListSeparator), 2)[0])
			// The examples' pictures, which picture's tests render.
			env.Setenv("PICTURES", fixture.Path("golden/pictures"))
			bundle, err := os.ReadFile(fixture.Path("testdata/test-secrets.json"))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(env.WorkDir, "secrets.json"), bundle, 0o600); err != nil {
				return err
			}
			return os.CopyFS(filepath.Join(env.WorkDir, "examples"), os.DirFS(examples))
		},
	}
}
