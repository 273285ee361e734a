package sim

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets/systemd"
)

// TestPreparationIsTheBuild: what the simulation prepares is the
// compiled design. Every file it lays out (the control-plane and etcd
// nodes' whole trees, the cluster tree, each simulated kubelet's
// kubeconfig) is byte for byte the file the systemd target builds from
// the whole catalogue, and a worker gets nothing else.
func TestPreparationIsTheBuild(t *testing.T) {
	c, b := compile(t, "ha-stacked")
	p, err := prepare(c, b, Options{WorkDir: t.TempDir(), Block: testBlock})
	if err != nil {
		t.Fatal(err)
	}
	m, err := pki.Issue(p.cluster, b)
	if err != nil {
		t.Fatal(err)
	}
	full, err := systemd.Build(m, p.placement)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range p.tree.Files() {
		want, ok := full.Get(f.Path)
		if !ok || !bytes.Equal(want.Data, f.Data) || want.Mode != f.Mode {
			t.Errorf("%s differs from the full build's", f.Path)
		}
	}
	workers := 0
	for _, n := range p.cluster.Nodes {
		prefix := layout.NodeTree(n.Name, "")
		var got []string
		for _, f := range p.tree.Files() {
			if strings.HasPrefix(f.Path, prefix) {
				got = append(got, strings.TrimPrefix(f.Path, prefix))
			}
		}
		if runsProcesses(n) {
			for _, f := range full.Files() {
				if _, ok := p.tree.Get(f.Path); strings.HasPrefix(f.Path, prefix) && !ok {
					t.Errorf("%s: %s is missing", n.Name, f.Path)
				}
			}
			continue
		}
		workers++
		if strings.Join(got, " ") != layout.KubeletKubeconfig+" "+layout.ClusterCACert {
			t.Errorf("worker %s gets %v, want its CA certificate and kubelet kubeconfig", n.Name, got)
		}
	}
	if workers != 6 {
		t.Errorf("%d workers, want 6", workers)
	}
}
