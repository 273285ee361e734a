package main

import (
	"fmt"
	"path"
	"path/filepath"

	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/targets"
)

type buildCmd struct {
	specAndSecrets
	Target string `short:"t" enum:"pki" default:"pki" help:"What to build: pki (certificates, keys and kubeconfigs per node)."`
	Out    string `short:"o" default:"out" help:"Output directory; the target is written to OUT/<target>, replacing it atomically."`
}

func (c *buildCmd) Run(e *env) error {
	m, err := c.issue(e)
	if err != nil {
		return err
	}
	files, err := pki.Files(m)
	if err != nil {
		return err
	}
	tree := targets.NewTree()
	for _, f := range files {
		p := path.Join("cluster", f.Path)
		if f.Node != "" {
			p = path.Join("nodes", f.Node, f.Path)
		}
		if err := tree.Add(p, f.Data, f.Mode); err != nil {
			return fmt.Errorf("kcompile bug: %w", err)
		}
	}
	dir := filepath.Join(c.Out, c.Target)
	if err := targets.Write(dir, tree, true); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d files for %d nodes\n", dir, tree.Len(), len(m.Cluster.Nodes))
	return nil
}
