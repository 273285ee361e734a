package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/targets"
)

type buildCmd struct {
	specAndSecrets
	Target  string `short:"t" enum:"systemd,cloudinit,ignition,terraform,pki" default:"systemd" help:"What to build: systemd (per-node root trees and cluster addons), cloudinit (per-node user-data, meta-data and network-config carrying those trees, for Debian-like nodes), ignition (a per-node Ignition config carrying the tree, for Flatcar and Fedora CoreOS nodes), terraform (an OpenTofu/Terraform root module that serves every node's cloud-init or Ignition through Matchbox) or pki (certificates, keys and kubeconfigs per node)."`
	Out     string `short:"o" default:"out" help:"Output directory; the target is written to OUT/<target> atomically, replacing only a tree kcompile wrote there that is unchanged since."`
	Replace bool   `help:"Write even when OUT/<target> holds something kcompile did not write or that changed since; it is moved aside to OUT/<target>.replaced-N, never deleted."`
}

func (c *buildCmd) Run(e *env) error {
	target := pipeline.Target(c.Target)
	out, err := c.run(e, target)
	if out != nil && target == pipeline.CloudInit {
		for _, s := range out.Sizes {
			fmt.Fprintf(e.stdout, "user-data %s: %d bytes\n", s.Node, s.Bytes)
		}
	}
	if out != nil && target == pipeline.Ignition {
		for _, s := range out.IgnitionSizes {
			fmt.Fprintf(e.stdout, "ignition %s: %d bytes\n", s.Node, s.Bytes)
		}
	}
	if err != nil {
		return err
	}
	tree := out.Trees[target]
	dir := filepath.Join(c.Out, c.Target)
	if err := writeTree(e, dir, tree, c.Replace); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d files for %d nodes\n", dir, tree.Len(), len(out.Cluster.Nodes))
	return nil
}

// writeTree writes a tree to dir, which kcompile owns only when its
// manifest says so; replace is the --replace flag.
func writeTree(e *env, dir string, tree *targets.Tree, replace bool) error {
	res, err := targets.Write(dir, tree, targets.WriteOptions{Version: version(), Replace: replace})
	var foreign *targets.ForeignError
	if errors.As(err, &foreign) {
		return statusError{code: exitProblems, msg: err.Error() + "; nothing was written: move it away, or pass --replace to move it aside and write anyway"}
	}
	if err != nil {
		return err
	}
	if res.MovedAside != "" {
		fmt.Fprintf(e.stderr, "kcompile: moved the previous %s aside to %s\n", dir, res.MovedAside)
	}
	return nil
}
