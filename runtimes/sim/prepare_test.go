package sim

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/writer"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets/systemd"
)

// TestPreparationIsTheBuild: what the simulation prepares is the
// compiled design. Every file it lays out (the control-plane and etcd
// nodes' whole trees, the cluster tree, each simulated kubelet's
// kubeconfig) is byte for byte the file the systemd target builds from
// the whole catalogue, and a worker gets nothing else. Every file the
// real processes read is on disk, byte for byte and mode for mode, where
// their command lines name it, and nothing else is there.
func TestPreparationIsTheBuild(t *testing.T) {
	c, b := compile(t, "ha-stacked")
	work := t.TempDir()
	p, err := prepare(c, b, Options{WorkDir: work, Block: testBlock})
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]bool{}
	treeDir := filepath.Join(work, "tree")
	err = filepath.WalkDir(treeDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(treeDir, path)
		if rel == writer.ManifestName {
			return nil
		}
		onDisk[filepath.ToSlash(rel)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := processTree(p.cluster, p.tree).Files()
	for _, f := range want {
		path := filepath.Join(treeDir, filepath.FromSlash(f.Path))
		data, err := os.ReadFile(path)
		fi, serr := os.Stat(path)
		if err != nil || serr != nil || !bytes.Equal(data, f.Data) || fi.Mode().Perm() != f.Mode.Perm() {
			t.Errorf("%s is not on disk as compiled (%v, %v)", f.Path, err, serr)
		}
		delete(onDisk, f.Path)
	}
	if len(want) == 0 || len(onDisk) > 0 {
		t.Errorf("%d files compiled for the processes; on disk besides them: %v", len(want), onDisk)
	}
	// The processes read their files where the placement roots them.
	for _, n := range p.cluster.Nodes {
		if runsProcesses(n) && p.placement.Root(n.Name) != filepath.Join(treeDir, layout.NodeTree(n.Name, "")) {
			t.Errorf("%s's files are placed at %s, not where they were written", n.Name, p.placement.Root(n.Name))
		}
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
