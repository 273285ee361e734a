package main

import (
	"fmt"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/pipeline"
)

type checkCmd struct {
	Dir     string   `arg:"" optional:"" default:"." help:"Spec directory (a CUE package)."`
	Output  string   `short:"o" enum:"text,json" default:"text" help:"Output format: text or json."`
	Strict  bool     `help:"Treat warnings as errors."`
	Secrets string   `short:"s" placeholder:"FILE" help:"Secrets bundle: also check it against the spec (CA separation, expiry)."`
	Profile string   `enum:",cis" default:"" help:"Also require a benchmark: cis reports every setting that breaks an item of the CIS Kubernetes Benchmark without a waiver."`
	Policy  []string `placeholder:"PDIR" help:"Also hold the spec to the organisation policies of PDIR, a directory or an import path of the CUE module here holding a CUE package with a policies field (repeatable); each violation is reported under the policy's id, at the spec value and at the policy's line."`
}

func (checkCmd) Help() string {
	return `Examples:
  kcompile check examples/ha-stacked
  kcompile check . --strict -o json                      # in CI: warnings fail too
  kcompile check . --profile cis --policy examples/policies/production-ha

Every problem is reported at once, at the spec's file:line:column, with a
hint; the codes are listed in docs/checks.md.
` + exitCodes("0", "valid (warnings, if any, are printed)", "1", "errors (or warnings, with --strict)", "2", "usage error")
}

func (c *checkCmd) Run(e *env) error {
	var diags diag.List
	var b *pki.Bundle
	if c.Secrets != "" {
		var err error
		if b, diags, err = loadBundle(c.Secrets); err != nil {
			return err
		}
	}
	out, err := pipeline.Run(pipeline.Input{Source: compiler.Source{Dir: c.Dir, Profile: c.Profile, Policies: c.Policy, Bound: e.bound}, Bundle: b, Now: e.now})
	if err != nil {
		return err
	}
	diags = append(diags, out.Diagnostics...).Sorted()
	cluster := out.Cluster
	if diags.HasErrors() {
		cluster = nil
	}
	if c.Strict {
		diags = diags.Strict()
	}
	diags = diags.Relative(e.cwd)
	switch c.Output {
	case "json":
		if err := diags.WriteJSON(e.stdout); err != nil {
			return err
		}
	default:
		if len(diags) > 0 {
			if err := diags.WriteText(e.stdout); err != nil {
				return err
			}
		}
		if !diags.HasErrors() && cluster != nil {
			fmt.Fprintf(e.stdout, "%s: cluster %q is valid: %s\n", c.Dir, cluster.Name, describe(cluster))
		}
	}
	if diags.HasErrors() {
		return statusError{code: exitProblems}
	}
	return nil
}

// describe summarises a cluster's nodes by role.
func describe(c *ir.Cluster) string {
	count := map[ir.Role]int{}
	for _, n := range c.Nodes {
		count[n.Role]++
	}
	s := fmt.Sprintf("%s (%d control-plane", plural(len(c.Nodes), "node"), count[ir.RoleControlPlane])
	if count[ir.RoleEtcd] > 0 {
		s += fmt.Sprintf(", %d etcd", count[ir.RoleEtcd])
	}
	s += fmt.Sprintf(", %s), etcd %s with %s", plural(count[ir.RoleWorker], "worker"), c.Etcd.Topology, plural(len(c.Etcd.Members), "member"))
	return s
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
