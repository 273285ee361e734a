package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/cloudinit"
	"github.com/kcompile/kcompile/targets/systemd"
	"github.com/kcompile/kcompile/targets/terraform"
)

type buildCmd struct {
	specAndSecrets
	Target  string `short:"t" enum:"systemd,cloudinit,terraform,pki" default:"systemd" help:"What to build: systemd (per-node root trees and cluster addons), cloudinit (per-node user-data, meta-data and network-config carrying those trees), terraform (an OpenTofu/Terraform root module that serves the cloud-init of every node through Matchbox) or pki (certificates, keys and kubeconfigs per node)."`
	Out     string `short:"o" default:"out" help:"Output directory; the target is written to OUT/<target> atomically, replacing only a tree kcompile wrote there that is unchanged since."`
	Replace bool   `help:"Write even when OUT/<target> holds something kcompile did not write or that changed since; it is moved aside to OUT/<target>.replaced-N, never deleted."`
}

func (c *buildCmd) Run(e *env) error {
	m, err := c.issue(e)
	if err != nil {
		return err
	}
	tree, err := buildTarget(e, m, c.Target)
	if err != nil {
		return err
	}
	if c.Target == "cloudinit" {
		for _, s := range cloudinit.Sizes(m.Cluster, tree) {
			fmt.Fprintf(e.stdout, "user-data %s: %d bytes\n", s.Node, s.Bytes)
		}
	}
	dir := filepath.Join(c.Out, c.Target)
	if err := writeTree(e, dir, tree, c.Replace); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d files for %d nodes\n", dir, tree.Len(), len(m.Cluster.Nodes))
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

// buildTarget renders one target, printing the target's own diagnostics
// (and the cloud-init size report) when the spec does not suit it.
func buildTarget(e *env, m *pki.Material, target string) (*targets.Tree, error) {
	switch target {
	case "systemd":
		return systemd.Target{}.Build(m)
	case "cloudinit", "terraform":
		if target == "terraform" {
			if err := printProblems(e, terraform.Check(m.Cluster)); err != nil {
				return nil, err
			}
		}
		ci, err := cloudinit.Target{}.Build(m)
		if err != nil {
			return nil, err
		}
		sizes := cloudinit.Sizes(m.Cluster, ci)
		if err := printProblems(e, cloudinit.CheckSizes(m.Cluster, sizes)); err != nil {
			return nil, err
		}
		if target == "terraform" {
			return terraform.Target{}.Build(m)
		}
		return ci, nil
	}
	return pkiTree(m)
}

// printProblems prints diagnostics that stop a build, if any is an error.
func printProblems(e *env, diags diag.List) error {
	if !diags.HasErrors() {
		return nil
	}
	if err := diags.Sorted().Relative(e.cwd).WriteText(e.stderr); err != nil {
		return err
	}
	return statusError{code: exitProblems, msg: "nothing written"}
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
