package main

import (
	"fmt"
	"path/filepath"

	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/cloudinit"
	"github.com/kcompile/kcompile/targets/systemd"
)

type buildCmd struct {
	specAndSecrets
	Target string `short:"t" enum:"systemd,cloudinit,pki" default:"systemd" help:"What to build: systemd (per-node root trees and cluster addons), cloudinit (per-node user-data, meta-data and network-config carrying those trees) or pki (certificates, keys and kubeconfigs per node)."`
	Out    string `short:"o" default:"out" help:"Output directory; the target is written to OUT/<target>, replacing it atomically."`
}

func (c *buildCmd) Run(e *env) error {
	m, err := c.issue(e)
	if err != nil {
		return err
	}
	var tree *targets.Tree
	switch c.Target {
	case "systemd":
		if tree, err = (systemd.Target{}).Build(m); err != nil {
			return err
		}
	case "cloudinit":
		if tree, err = (cloudinit.Target{}).Build(m); err != nil {
			return err
		}
		sizes := cloudinit.Sizes(m.Cluster, tree)
		if diags := cloudinit.CheckSizes(m.Cluster, sizes); diags.HasErrors() {
			if err := diags.Relative(e.cwd).WriteText(e.stderr); err != nil {
				return err
			}
			return statusError{code: exitProblems, msg: "nothing written"}
		}
		for _, s := range sizes {
			fmt.Fprintf(e.stdout, "user-data %s: %d bytes\n", s.Node, s.Bytes)
		}
	default:
		if tree, err = pkiTree(m); err != nil {
			return err
		}
	}
	dir := filepath.Join(c.Out, c.Target)
	if err := targets.Write(dir, tree, true); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d files for %d nodes\n", dir, tree.Len(), len(m.Cluster.Nodes))
	return nil
}

// pkiTree lays the issued PKI out as a tree of its own.
func pkiTree(m *pki.Material) (*targets.Tree, error) {
	files, err := pki.Files(m)
	if err != nil {
		return nil, err
	}
	tree := targets.NewTree()
	for _, f := range files {
		p := targets.ClusterPath(f.Path)
		if f.Node != "" {
			p = targets.NodePath(f.Node, f.Path)
		}
		if err := tree.Add(p, f.Data, f.Mode); err != nil {
			return nil, fmt.Errorf("kcompile bug: %w", err)
		}
	}
	return tree, nil
}
