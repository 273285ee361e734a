package targets

import (
	"strings"
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
