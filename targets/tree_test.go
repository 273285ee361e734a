package targets

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestTreeAdd(t *testing.T) {
	tr := NewTree()
	for _, p := range []string{"nodes/b/x", "nodes/a/y", "cluster/admin.conf"} {
		if err := tr.Add(p, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, f := range tr.Files() {
		got = append(got, f.Path)
	}
	if strings.Join(got, " ") != "cluster/admin.conf nodes/a/y nodes/b/x" {
		t.Errorf("files not sorted: %v", got)
	}
	for _, bad := range []string{"", "/etc/x", "../x", "a/../b", "a//b", "nodes/b/x", "nodes/b/x/z", "nodes"} {
		if err := tr.Add(bad, nil, 0o644); err == nil {
			t.Errorf("Add(%q) accepted", bad)
		}
	}
}

func TestWriteAtomicAndModes(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := t.TempDir()
	dir := filepath.Join(base, "out", "pki")
	tr := NewTree()
	must(t, tr.Add("nodes/cp1/etc/kubernetes/pki/ca.crt", []byte("cert"), 0o644))
	must(t, tr.Add("nodes/cp1/etc/kubernetes/pki/ca.key", []byte("key"), 0o600))
	must(t, write(dir, tr, WriteOptions{}))
	for p, want := range map[string]os.FileMode{"nodes/cp1/etc/kubernetes/pki/ca.crt": 0o644, "nodes/cp1/etc/kubernetes/pki/ca.key": 0o600, ManifestName: 0o600} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %04o under umask 077, want %04o", p, fi.Mode().Perm(), want)
		}
	}
	// Our own unchanged tree is replaced entirely, not merged.
	tr2 := NewTree()
	must(t, tr2.Add("other", []byte("x"), 0o644))
	must(t, write(dir, tr2, WriteOptions{}))
	if _, err := os.Stat(filepath.Join(dir, "nodes")); !os.IsNotExist(err) {
		t.Errorf("old files survive a replace: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "other")); err != nil || string(b) != "x" {
		t.Errorf("new tree not written: %q %v", b, err)
	}
	entries, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "pki" {
		t.Errorf("temporary directories left next to the tree: %v", entries)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
