package systemd

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
)

func testMaterial(t testing.TB, c *ir.Cluster) *pki.Material {
	t.Helper()
	m, err := pki.Issue(c, fixture.Bundle(t))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNodeFilesVerify(t *testing.T) {
	for _, name := range fixture.Examples() {
		c := compileExample(t, name)
		tree, err := Build(testMaterial(t, c), Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, n := range c.Nodes {
			for _, want := range []string{"etc/systemd/system/"} {
				found := false
				for _, f := range tree.Files() {
					found = found || strings.HasPrefix(f.Path, layout.NodeTree(n.Name, want))
				}
				if !found {
					t.Errorf("%s/%s has no %s", name, n.Name, want)
				}
			}
		}
		enc, ok := tree.Get(layout.NodeTree(c.Nodes[0].Name, "etc/kubernetes/encryption-config.yaml"))
		if !ok || enc.Mode != 0o600 {
			t.Errorf("%s: encryption config missing or not 0600: %v", name, enc.Mode)
		}
	}
}

func TestVerifyCatchesInconsistency(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	tree, err := Build(testMaterial(t, c), Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Rebuild the tree with one kubelet config pointing at another DNS IP
	// and one controller manager with another service range.
	bad := targets.NewTree()
	for _, f := range tree.Files() {
		data := f.Data
		switch f.Path {
		case layout.NodeTree("w01", "var/lib/kubelet/config.yaml"):
			data = bytes.Replace(data, []byte("10.96.0.10"), []byte("10.96.0.11"), 1)
		case layout.NodeTree("cp2", "etc/systemd/system/kube-controller-manager.service"):
			data = bytes.Replace(data, []byte("--service-cluster-ip-range=10.96.0.0/12"), []byte("--service-cluster-ip-range=10.97.0.0/16"), 1)
		case layout.NodeTree("w02", "var/lib/kubelet/config.yaml"):
			data = append(data, []byte("unknownField: 1\n")...)
		case layout.NodeTree("w03", "etc/kubernetes/kubelet.conf"):
			data = []byte("apiVersion: v1\nkind: Config\nclusters: [ {\n")
		}
		if err := bad.Add(f.Path, data, f.Mode); err != nil {
			t.Fatal(err)
		}
	}
	err = verify(bad, c, newRenderCache(), nil)
	if err == nil {
		t.Fatal("an inconsistent tree verified")
	}
	for _, want := range []string{"clusterDNS [10.96.0.11]", "10.97.0.0/16", "unknownField", "nodes/w03/etc/kubernetes/kubelet.conf"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("verify did not report %q: %v", want, err)
		}
	}
}
