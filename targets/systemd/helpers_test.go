package systemd

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/internal/unitfile"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/internal/writer"
	"github.com/kcompile/kcompile/targets"
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

// inNodeNamespace runs the test named test again, with env set and
// KCOMPILE_BIN naming .bin, inside a network namespace of its own whose
// loopback holds the addresses of c's first node: the components it
// starts from their units listen and dial there as on the node. The
// programs must be in .bin. It returns the run's output.
func inNodeNamespace(t *testing.T, c *ir.Cluster, test, env string, programs ...string) string {
	t.Helper()
	bin, err := filepath.Abs("../../.bin")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range programs {
		if _, err := os.Stat(filepath.Join(bin, p)); err != nil {
			t.Fatalf("%s is missing from .bin: run scripts/tools first", p)
		}
	}
	ipCmd, err := exec.LookPath("ip")
	if err != nil {
		t.Fatal("ip (Debian package iproute2) is required")
	}
	ns := fmt.Sprintf("kcompile-%s-%d", test, os.Getpid())
	run := func(args ...string) {
		if out, err := exec.Command(ipCmd, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() { exec.Command(ipCmd, "netns", "del", ns).Run() })
	run("netns", "exec", ns, "ip", "link", "set", "lo", "up")
	for _, a := range c.Nodes[0].Addresses {
		run("netns", "exec", ns, "ip", "addr", "add", a.String()+"/32", "dev", "lo")
	}
	cmd := exec.Command(ipCmd, "netns", "exec", ns, os.Args[0], "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), env+"=1", "KCOMPILE_BIN="+bin)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+test) {
		t.Fatalf("%s in a network namespace: %v\n%s", test, err, out)
	}
	return string(out)
}

// layRerooted writes the trees of m under a temporary directory top
// (top/out), the first node's files naming their paths under its root
// there, as the simulator lays them: its components read their files
// there.
func layRerooted(t *testing.T, m *pki.Material) (top, root string) {
	t.Helper()
	top = t.TempDir()
	root = filepath.Join(top, "out", "nodes", m.Cluster.Nodes[0].Name)
	tree := targets.NewTree()
	if err := nodeFiles(m, tree, newRenderCache(), Options{Root: func(string) string { return root }}); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Write(filepath.Join(top, "out"), tree, writer.Options{}); err != nil {
		t.Fatal(err)
	}
	return top, root
}
