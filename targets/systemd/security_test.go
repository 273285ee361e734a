package systemd

import (
	"github.com/kcompile/kcompile/layout"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/internal/fixture"
)

// TestUnitSecurity has systemd-analyze rate the exposure of every unit,
// offline, on the first node of each shape of every example. The scores
// are kept in testdata/security/<example>.txt (KCOMPILE_UPDATE=1 rewrites
// them); a unit rated UNSAFE must say why in unsafeBecause.
func TestUnitSecurity(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is required (Debian package systemd; scripts/tools installs it)")
	}
	overall := regexp.MustCompile(`(?m)^→ Overall exposure level for (\S+): ([0-9.]+) (\S+)`)
	update := os.Getenv("KCOMPILE_UPDATE") != ""
	for _, name := range fixture.Examples() {
		c := compileExample(t, name)
		var b strings.Builder
		b.WriteString("# systemd-analyze security --offline=true: node/unit exposure rating\n")
		for _, cn := range cisNodes(c) {
			if cn.file != cn.node.Name {
				continue // the same node again, for other checks
			}
			root := t.TempDir()
			dir := filepath.Join(root, layout.UnitDir)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			args := []string{"security", "--offline=true", "--root=" + root, "--no-pager"}
			for _, u := range NodeUnits(c, cn.node, Options{}) {
				if err := os.WriteFile(filepath.Join(dir, u.Name), render(t, u.Unit), 0o600); err != nil {
					t.Fatal(err)
				}
				// A timer runs nothing itself: its service is rated.
				if strings.HasSuffix(u.Name, ".service") {
					args = append(args, u.Name)
				}
			}
			out, err := exec.Command(analyze, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s/%s: systemd-analyze security: %v\n%s", name, cn.node.Name, err, out)
			}
			found := overall.FindAllStringSubmatch(string(out), -1)
			if len(found) != len(args)-4 {
				t.Fatalf("%s/%s: %d ratings for %d units:\n%s", name, cn.node.Name, len(found), len(args)-4, out)
			}
			for _, m := range found {
				unit, score, rating := m[1], m[2], m[3]
				if rating == "UNSAFE" && unsafeBecause(unit) == "" {
					t.Errorf("%s/%s: %s is rated UNSAFE (%s) and unsafeBecause gives no reason", name, cn.node.Name, unit, score)
				}
				b.WriteString(cn.node.Name + "/" + unit + " " + score + " " + rating + "\n")
			}
		}
		golden := filepath.Join("testdata", "security", name+".txt")
		if update {
			if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if string(want) != b.String() {
			t.Errorf("%s: unit exposure differs from %s (KCOMPILE_UPDATE=1 rewrites it):\n--- want\n%s--- got\n%s", name, golden, want, b.String())
		}
	}
}
