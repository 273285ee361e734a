package nspawn

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
)

// A step of apply brings the cluster files of up's tree to its state:
// a changed kubeconfig replaced with its mode, a file only the step
// before had removed; a node's files (its machine's lower layer) and a
// file kcompile did not write stay as they are, and a work directory of
// no tree gets none.
func TestWriteClusterFiles(t *testing.T) {
	tree := func(files map[string]string) *targets.Tree {
		tr := targets.NewTree()
		for p, data := range files {
			mode := os.FileMode(0o644)
			if filepath.Ext(p) == ".conf" {
				mode = 0o600
			}
			if err := tr.Add(p, []byte(data), mode); err != nil {
				t.Fatal(err)
			}
		}
		return tr
	}
	admin, gone, addon := layout.ClusterTree("admin.conf"), layout.ClusterTree("old.conf"), layout.ClusterTree("addons/dns.yaml")
	node := layout.NodeTree("cp1", "etc/kubernetes/admin.conf")
	prev := tree(map[string]string{admin: "stage 1", gone: "only before", addon: "dns", node: "node 1"})
	next := tree(map[string]string{admin: "stage 2", addon: "dns", node: "node 2"})

	work := t.TempDir()
	root := filepath.Join(work, "tree")
	for p, data := range map[string]string{admin: "stage 1", gone: "only before", addon: "dns", node: "node 1", layout.ClusterTree("mine.txt"): "a user's"} {
		f := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeClusterFiles(work, prev, next); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{admin: "stage 2", addon: "dns", node: "node 1", layout.ClusterTree("mine.txt"): "a user's"} {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil || string(data) != want {
			t.Errorf("%s: %q (%v), want %q", p, data, err, want)
		}
	}
	if st, err := os.Stat(filepath.Join(root, filepath.FromSlash(admin))); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, want mode 0600", admin, err)
	}
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(gone))); !os.IsNotExist(err) {
		t.Errorf("%s, which only the step before had, stays: %v", gone, err)
	}

	bare := t.TempDir()
	if err := writeClusterFiles(bare, prev, next); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(bare); err != nil || len(entries) != 0 {
		t.Errorf("a work directory of no tree got %v (%v)", entries, err)
	}
}

// apply reloads a unit rather than restarts it only where the step
// leaves the unit's own files as they were and the unit reloads.
func TestReloads(t *testing.T) {
	unit := layout.NodeTree("cp1", layout.UnitDir+"haproxy.service")
	dropIn := layout.NodeTree("cp1", layout.UnitDropIn("haproxy.service", "up.conf"))
	cfg := layout.NodeTree("cp1", layout.HAProxyConfig)
	withReload := "[Service]\nExecStart=/usr/sbin/haproxy -Ws -f /etc/haproxy/haproxy.cfg\nExecReload=/bin/kill -USR2 $MAINPID\n"
	tree := func(files map[string]string) *targets.Tree {
		tr := targets.NewTree()
		for p, data := range files {
			if err := tr.Add(p, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return tr
	}
	for _, tc := range []struct {
		name       string
		prev, next map[string]string
		want       bool
	}{
		{"the configuration changed", map[string]string{unit: withReload, cfg: "a"}, map[string]string{unit: withReload, cfg: "b"}, true},
		{"the unit changed", map[string]string{unit: withReload}, map[string]string{unit: withReload + "Nice=1\n"}, false},
		{"a drop-in changed", map[string]string{unit: withReload, dropIn: "a"}, map[string]string{unit: withReload, dropIn: "b"}, false},
		{"a unit that does not reload", map[string]string{unit: "[Service]\nExecStart=/bin/true\n"}, map[string]string{unit: "[Service]\nExecStart=/bin/true\n"}, false},
		{"a new unit", map[string]string{}, map[string]string{unit: withReload}, false},
	} {
		if got := reloading(tree(tc.prev), tree(tc.next), "cp1", []string{"haproxy.service"})["haproxy.service"]; got != tc.want {
			t.Errorf("%s: reloads %v, want %v", tc.name, got, tc.want)
		}
	}
}
