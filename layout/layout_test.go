package layout

import "testing"

// TestSplitTree reads back what NodeTree and ClusterTree write, and
// refuses what is not a node's file.
func TestSplitTree(t *testing.T) {
	node, rel, ok := SplitTree(NodeTree("cp1", KubeletConfig))
	if !ok || node != "cp1" || rel != KubeletConfig {
		t.Errorf("SplitTree(NodeTree) = %q, %q, %v", node, rel, ok)
	}
	for _, p := range []string{ClusterTree("admin.conf"), "nodes/", "nodes//etc/hosts", "README"} {
		if node, rel, ok := SplitTree(p); ok {
			t.Errorf("SplitTree(%q) = %q, %q: not a node's file", p, node, rel)
		}
	}
	if Abs(UnitDir) != "/etc/systemd/system/" || UnitDropIn("kubelet.service", UpDropIn) != "etc/systemd/system/kubelet.service.d/50-kcompile-up.conf" {
		t.Errorf("Abs or UnitDropIn write %q, %q", Abs(UnitDir), UnitDropIn("kubelet.service", UpDropIn))
	}
}
