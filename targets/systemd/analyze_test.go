package systemd

import (
	"github.com/kcompile/kcompile/layout"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/internal/unitfile"
)

// TestSystemdAnalyzeVerify runs systemd's own verifier on every unit of
// every node of the examples, with kcompile up's drop-ins, offline, in a
// scratch root holding a copy of the system's units, the node's units and
// an executable at every command path. systemd-analyze exits 0 on unknown
// keys and bad values and only prints, so any output fails the test.
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is required (Debian package systemd; scripts/tools installs it)")
	}
	for _, name := range fixture.Examples() {
		c := compileExample(t, name)
		for _, n := range c.Nodes {
			units := NodeUnits(c, n, Options{})
			if len(units) == 0 {
				t.Fatalf("%s/%s has no units", name, n.Name)
			}
			root := scratchRoot(t)
			var paths []string
			for _, u := range units {
				p := filepath.Join(root, layout.UnitDir, u.Name)
				writeFile(t, p, render(t, u.Unit), 0o644)
				paths = append(paths, p)
				parsed, err := unitfile.Parse(render(t, u.Unit))
				if err != nil {
					t.Fatalf("%s/%s/%s: %v", name, n.Name, u.Name, err)
				}
				for _, key := range []string{"ExecStart", "ExecStartPre"} {
					for _, cmd := range parsed.Commands("Service", key) {
						writeFile(t, filepath.Join(root, cmd.Argv[0]), []byte("#!/bin/sh\n"), 0o755)
					}
				}
			}
			// multi-user.target reads the drop-in that wants the units.
			writeFile(t, filepath.Join(root, layout.BootDropIn), render(t, bootUnit(units)), 0o644)
			// kcompile up's drop-ins are read with the units they change.
			up, err := UpFiles(c, n, Options{}, everyOverride())
			if err != nil {
				t.Fatal(err)
			}
			for p, data := range up {
				if strings.HasPrefix(p, layout.UnitDir) {
					writeFile(t, filepath.Join(root, p), data, 0o644)
				}
			}
			args := append([]string{"verify", "--root=" + root, "--man=no", "--generators=no", "multi-user.target"}, paths...)
			out, err := exec.Command(analyze, args...).CombinedOutput()
			if err != nil || len(out) > 0 {
				t.Errorf("%s/%s: systemd-analyze verify: %v\n%s", name, n.Name, err, out)
			}
		}
	}
}

// scratchRoot makes a root file system with the system's units, laid out
// as on merged-/usr Debian so their absolute links resolve inside it.
func scratchRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr/lib/systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", "/usr/lib/systemd/system", filepath.Join(root, "usr/lib/systemd/")).CombinedOutput(); err != nil {
		t.Fatalf("copying the system's units: %v\n%s", err, out)
	}
	if err := os.Symlink("usr/lib", filepath.Join(root, "lib")); err != nil {
		t.Fatal(err)
	}
	return root
}

func writeFile(t *testing.T, p string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
}

// TestSystemdAnalyzeCatchesMistakes keeps the test above honest: a unit
// with an unknown key or a missing program must produce output.
func TestSystemdAnalyzeCatchesMistakes(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is required")
	}
	root := scratchRoot(t)
	u := service("bad", "https://example.com/", nil, nil, nil, "/usr/local/bin/missing", nil)
	u.Sections[1].Directives = append(u.Sections[1].Directives, unitfile.Directive{Key: "Bogus", Value: "1"})
	p := filepath.Join(root, layout.UnitDir, "bad.service")
	writeFile(t, p, render(t, u), 0o644)
	dropIn := bootUnit([]UnitFile{{Name: "bad.service", Unit: u}})
	dropIn.Sections[0].Directives = append(dropIn.Sections[0].Directives, unitfile.Directive{Key: "Wrong", Value: "1"})
	writeFile(t, filepath.Join(root, layout.BootDropIn), render(t, dropIn), 0o644)
	out, _ := exec.Command(analyze, "verify", "--root="+root, "--man=no", "--generators=no", "multi-user.target", p).CombinedOutput()
	for _, want := range []string{"Bogus", "/usr/local/bin/missing", "kcompile.conf:", "Wrong"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("systemd-analyze did not report %s:\n%s", want, out)
		}
	}
}
