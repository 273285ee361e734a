package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/internal/writer"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/targets"
)

type buildCmd struct {
	specAndSecrets
	Target  string `short:"t" enum:"${build_targets}" default:"systemd" help:"What to build: systemd (per-node root trees and cluster addons), cloudinit (per-node user-data, meta-data and network-config carrying those trees, for Debian-like nodes), ignition (a per-node Ignition config carrying the tree, for Flatcar and Fedora CoreOS nodes), terraform (an OpenTofu/Terraform root module that serves every node's cloud-init or Ignition through Matchbox) or pki (certificates, keys and kubeconfigs per node)."`
	OutDir  string `short:"d" name:"out-dir" default:"out" placeholder:"DIR" help:"Output directory; the target is written to DIR/<target> atomically, replacing only a tree kcompile wrote there that is unchanged since."`
	Output  string `short:"o" default:"text" placeholder:"FORMAT" help:"Format of the summary on stdout: text or json. (-o DIR, the spelling of earlier releases for --out-dir, still works this release, with a notice.)"`
	Replace bool   `help:"Write even when DIR/<target> holds something kcompile did not write or that changed since; it is moved aside to DIR/<target>.replaced-N, never deleted."`
}

func (buildCmd) Help() string {
	return `Examples:
  kcompile secrets init                        # once: secrets.json, mode 0600
  kcompile build examples/ha-stacked           # out/systemd: every node's root tree
  kcompile build examples/ha-stacked -t cloudinit -d /srv/nodes
  kcompile build examples/flatcar -t ignition -o json

Warnings are printed on stderr; a target that leaves nodes out names them,
and a target that would configure no node at all writes nothing.
` + exitCodes(
		"0", "written (warnings, if any, on stderr)",
		"1", "the spec or the bundle has errors, or DIR/<target> is not kcompile's; nothing written",
		"2", "usage error")
}

// built is build's summary, the JSON form of its last line.
type built struct {
	Dir    string `json:"dir"`
	Target string `json:"target"`
	Files  int    `json:"files"`
	Nodes  int    `json:"nodes"`
	// Configs are the node configurations of the cloudinit and ignition
	// targets, with their sizes.
	Configs  []nodeConfig `json:"configs,omitempty"`
	Warnings int          `json:"warnings"`
}

type nodeConfig struct {
	Node  string `json:"node"`
	Bytes int    `json:"bytes"`
}

func (c *buildCmd) Run(e *env) error {
	format, err := formatOrLegacyDir(e, &c.Output, &c.OutDir, "out", "text", "json")
	if err != nil {
		return err
	}
	target := pipeline.Target(c.Target)
	out, err := c.run(e, target)
	if err != nil {
		return err
	}
	var sizes []targets.NodeSize
	kind := ""
	switch target {
	case pipeline.CloudInit:
		sizes, kind = out.Sizes, layout.UserData
	case pipeline.Ignition:
		sizes, kind = out.IgnitionSizes, "ignition"
	}
	tree := out.Trees[target]
	dir := filepath.Join(c.OutDir, c.Target)
	e.progress.stage(fmt.Sprintf("writing %d files to %s", tree.Len(), dir))
	if err := writeTree(e, dir, tree, out.Material.Bundle.ManifestKey(), c.Replace); err != nil {
		return err
	}
	if err := warnIfTracked(e, dir, "the tree holds the nodes' private keys"); err != nil {
		return err
	}
	e.progress.pause()
	sum := built{Dir: dir, Target: c.Target, Files: tree.Len(), Nodes: len(out.Cluster.Nodes), Warnings: out.Diagnostics.Warnings()}
	for _, s := range sizes {
		sum.Configs = append(sum.Configs, nodeConfig{s.Node, s.Bytes})
	}
	if format == "json" {
		return diag.EncodeJSON(e.stdout, sum)
	}
	for _, s := range sizes {
		fmt.Fprintf(e.stdout, "%s %s: %d bytes\n", kind, s.Node, s.Bytes)
	}
	configs := ""
	if kind != "" {
		configs = fmt.Sprintf(" (%s)", plural(len(sizes), kind+" config"))
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d files for %s%s, %s, in %s\n", dir, tree.Len(), plural(len(out.Cluster.Nodes), "node"), configs, plural(sum.Warnings, "warning"), e.progress.took())
	return nil
}

// writeTree writes a tree to dir, which kcompile owns only when its
// manifest says so and verifies with key, the bundle's manifest key;
// replace is the --replace flag.
func writeTree(e *env, dir string, tree *targets.Tree, key []byte, replace bool) error {
	res, err := writer.Write(dir, tree, writer.Options{Version: version(), Replace: replace, Key: key})
	var foreign *writer.ForeignError
	if errors.As(err, &foreign) {
		return statusError{code: exitProblems, msg: err.Error() + "; nothing was written: move it away, or pass --replace to move it aside and write anyway"}
	}
	if err != nil {
		return err
	}
	if res.MovedAside != "" {
		e.progress.pause()
		fmt.Fprintf(e.stderr, "kcompile: moved the previous %s aside to %s\n", dir, res.MovedAside)
	}
	return nil
}
