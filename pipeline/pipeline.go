// Package pipeline strings kcompile's stages together: compile the spec,
// check it against the secrets bundle, issue the PKI, build the requested
// targets (each tree once, each target wrapping the tree it is given) and
// return the trees with every diagnostic. It prints nothing and reads no
// clock: the CLI and the runtimes call it and print what it returns, as
// Butane's Translate does.
package pipeline

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/pipeline/issue"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/cloudinit"
	"github.com/kcompile/kcompile/targets/ignition"
	"github.com/kcompile/kcompile/targets/systemd"
	"github.com/kcompile/kcompile/targets/terraform"
)

// Target names a tree the pipeline can build.
type Target string

// The targets, in the order one wraps the other.
const (
	// Systemd is every node's root tree and the cluster tree.
	Systemd Target = "systemd"
	// CloudInit packs the systemd trees into each node's cloud-init.
	CloudInit Target = "cloudinit"
	// Ignition packs the systemd trees of the nodes that run an Ignition
	// system into their Ignition configs.
	Ignition Target = "ignition"
	// Terraform is a module serving the cloud-init and Ignition configs
	// through Matchbox.
	Terraform Target = "terraform"
	// PKI is the issued certificates, keys and kubeconfigs alone.
	PKI Target = "pki"
)

// Targets lists every target, for the command line.
func Targets() []Target { return []Target{Systemd, CloudInit, Ignition, Terraform, PKI} }

// Reviewed are the targets `kcompile diff` compares: the trees nodes are
// configured from (the Terraform module and the PKI tree carry them).
func Reviewed() []Target { return []Target{Systemd, CloudInit, Ignition} }

// needs is what a target is built from.
func (t Target) needs() []Target {
	switch t {
	case CloudInit, Ignition:
		return []Target{Systemd}
	case Terraform:
		return []Target{Systemd, CloudInit, Ignition}
	}
	return nil
}

// Source is a spec's directory with the policies and profile it is
// checked against.
type Source = compiler.Source

// Input is one run of the pipeline.
type Input struct {
	Source Source
	// Bundle is the secrets bundle; without it the spec is only checked.
	Bundle *pki.Bundle
	// Now is the caller's clock, which the bundle's checks compare the
	// CAs' validity with.
	Now time.Time
	// Issue issues the PKI even when no target is asked for (kcompile
	// pki).
	Issue bool
	// Targets are the trees to build.
	Targets []Target
	// Systemd says where the systemd tree will live.
	Systemd systemd.Options
	// Stage, when set, is told each stage as it starts, for a progress
	// display; it must not block.
	Stage func(what string)
	// Findings keeps what the organisation policies (Source.Policies) and
	// the benchmark profile (Source.Profile) find out of Diagnostics, in
	// Output.Findings, and builds the targets whatever they say: review
	// compares them as findings of either side of a change. A policy that
	// does not load stays an error.
	Findings bool
	// Scenario is a scenario file for the simulator, checked against the
	// compiled cluster (a misspelt node costs no boot): Output.Scenario,
	// or errors among the diagnostics.
	Scenario string
}

func (in Input) stage(format string, args ...any) {
	if in.Stage != nil {
		in.Stage(fmt.Sprintf(format, args...))
	}
}

// Output is what a run produced. With an error among the diagnostics
// there are no trees.
type Output struct {
	Cluster     *ir.Cluster
	Material    *pki.Material
	Trees       map[Target]*targets.Tree
	Diagnostics diag.List
	// Sizes are every node's user-data size, when cloud-init was built,
	// and IgnitionSizes every Ignition config's.
	Sizes, IgnitionSizes []targets.NodeSize
	// Findings are the policies' violations and the profile's breakages,
	// with Input.Findings (an empty list when policies were checked and
	// found nothing, nil when none were); Waivers are the spec's policy
	// waivers with the violations each hides.
	Findings diag.List
	Waivers  []compiler.Waiver
	// Scenario is Input.Scenario's steps, when it loaded.
	Scenario *ir.Scenario
}

// Run compiles, checks, issues and builds. Diagnostics are about the
// spec and the bundle; an error is a compiler bug (an issued or built
// artifact that does not verify).
func Run(in Input) (*Output, error) {
	out := &Output{Trees: map[Target]*targets.Tree{}}
	front := issue.Input{
		Source:   in.Source,
		Bundle:   in.Bundle,
		Now:      in.Now,
		Issue:    in.Issue || len(in.Targets) > 0,
		Scenario: in.Scenario,
		Stage:    in.stage,
	}
	if in.Findings {
		front.Split = func(diags diag.List) diag.List {
			own, found := findings(diags, len(in.Source.Policies) > 0)
			out.Findings = found
			return own
		}
	}
	r, err := issue.Run(front)
	if err != nil {
		return nil, err
	}
	out.Cluster, out.Material, out.Waivers, out.Scenario = r.Cluster, r.Material, r.Waivers, r.Scenario
	diags := r.Diagnostics
	if r.Material == nil {
		out.Diagnostics = diags
		return out, nil
	}
	c, m := r.Cluster, r.Material
	want := map[Target]bool{}
	for _, t := range in.Targets {
		want[t] = true
		// A request for both kinds of node config leaves no node out.
		if !slices.Contains(in.Targets, CloudInit) || !slices.Contains(in.Targets, Ignition) {
			diags = append(diags, coverage(t, c)...)
		}
		for _, n := range t.needs() {
			want[n] = true
		}
	}
	for _, t := range Targets() {
		if !want[t] {
			continue
		}
		in.stage("building the %s target of %d nodes", t, len(c.Nodes))
		tree, d, err := build(t, m, out.Trees, in.Systemd)
		if err != nil {
			return nil, fmt.Errorf("kcompile bug: the %s target: %w", t, err)
		}
		diags = append(diags, d...)
		if t == CloudInit && tree != nil {
			out.Sizes = cloudinit.Sizes(c, tree)
		}
		if t == Ignition && tree != nil {
			out.IgnitionSizes = ignition.Sizes(c, tree)
		}
		if tree == nil || d.HasErrors() {
			break
		}
		out.Trees[t] = tree
	}
	out.Diagnostics = diags.Sorted()
	if out.Diagnostics.HasErrors() {
		out.Trees = map[Target]*targets.Tree{}
		return out, nil
	}
	// Only what was asked for: the trees it was built from served it.
	for t := range out.Trees {
		if !slices.Contains(in.Targets, t) {
			delete(out.Trees, t)
		}
	}
	return out, nil
}

// Placement is how a runtime places a compiled, checked cluster where
// it runs it: the cluster it runs (the simulator's, on addresses of its
// own), which certificates of the catalogue it needs, and where the
// systemd tree lives.
type Placement struct {
	// Certs keeps a certificate of the catalogue; nil keeps them all.
	Certs func(pki.Cert) bool
	// Systemd places the tree: root, loopback, extra arguments, whose
	// trees are rendered.
	Systemd systemd.Options
}

// Place issues the PKI of c, a cluster Run compiled and checked or a
// runtime's placement of one, and builds its systemd tree as p says:
// the same stages as Run's, so that what a runtime runs is what the
// systemd target builds.
func Place(c *ir.Cluster, b *pki.Bundle, p Placement) (*pki.Material, *targets.Tree, error) {
	m, err := issue.Material(c, b, p.Certs)
	if err != nil {
		return nil, nil, fmt.Errorf("kcompile bug: %w", err)
	}
	tree, _, err := build(Systemd, m, nil, p.Systemd)
	if err != nil {
		return nil, nil, fmt.Errorf("kcompile bug: the %s target: %w", Systemd, err)
	}
	return m, tree, nil
}

// findings parts the diagnostics of a compile with policies into the
// spec's own and what the policies and the profile find: a policy's
// violation carries the policy's id, which no rule of kcompile has.
func findings(diags diag.List, policies bool) (own, found diag.List) {
	rules := map[string]bool{}
	for _, r := range Rules() {
		rules[r.Code] = true
	}
	if policies {
		found = diag.List{}
	}
	for _, d := range diags {
		switch {
		case !rules[d.Code] || d.Code == compiler.CodeCISBroken:
			found = append(found, d)
		case d.Code == compiler.CodePolicyWaived || d.Code == compiler.CodePolicyWaiver:
			// What a waiver hides, or that it hides nothing, comes with
			// the waivers (Output.Waivers), not as the spec's own.
		default:
			own = append(own, d)
		}
	}
	return own, found
}

// Stopped says, in the words the commands print, why a run with an
// error among its diagnostics produced nothing: the spec's errors, the
// scenario's, the bundle not fitting the spec, or else otherwise (a
// target's own error, such as a node config over its size limit).
func (o *Output) Stopped(in Input, otherwise string) string {
	switch {
	case o.Cluster == nil:
		return "the spec has errors; `kcompile check` explains them"
	case in.Scenario != "" && o.Scenario == nil:
		return "the scenario has errors"
	case o.Material == nil:
		return "the spec and the secrets bundle do not fit together"
	}
	return otherwise
}

// PolicyLoadError says which policies did not load or evaluate, or nil.
// Policies are evaluated only on a spec that compiled: before that, an
// evaluation bound or an internal error is the spec's own.
func (o *Output) PolicyLoadError() error {
	if o.Cluster == nil {
		return nil
	}
	var broken []string
	for _, d := range o.Diagnostics {
		switch d.Code {
		case compiler.CodePolicyLoad, compiler.CodePolicyShape, compiler.CodePolicyNothing, compiler.CodeInternal, compiler.CodePolicyEval, compiler.CodeEvalBound:
			broken = append(broken, fmt.Sprintf("  %s: %s %s: %s", d.Primary(), d.Severity, d.Code, d.Message))
		}
	}
	if len(broken) == 0 {
		return nil
	}
	return fmt.Errorf("a policy does not load:\n%s", strings.Join(broken, "\n"))
}

// build builds one target from the trees built before it.
func build(t Target, m *pki.Material, built map[Target]*targets.Tree, opts systemd.Options) (*targets.Tree, diag.List, error) {
	switch t {
	case Systemd:
		tree, err := systemd.Build(m, opts)
		return tree, nil, err
	case CloudInit:
		return cloudinit.Build(m, built[Systemd])
	case Ignition:
		return ignition.Build(m, built[Systemd])
	case Terraform:
		return terraform.Build(m, built[CloudInit], built[Ignition])
	}
	tree, err := pkiTree(m)
	return tree, nil, err
}

// pkiTree lays the issued PKI out as a tree of its own.
func pkiTree(m *pki.Material) (*targets.Tree, error) {
	files, err := pki.Files(m)
	if err != nil {
		return nil, err
	}
	tree := targets.NewTree()
	for _, f := range files {
		p := layout.ClusterTree(f.Path)
		if f.Node != "" {
			p = layout.NodeTree(f.Node, f.Path)
		}
		if err := tree.Add(p, f.Data, f.Mode); err != nil {
			return nil, err
		}
	}
	return tree, nil
}

// Rules lists every diagnostic kcompile can report: the compiler's, the
// PKI's and the targets', in code order within each.
func Rules() []diag.Rule {
	var out []diag.Rule
	out = append(out, compiler.Rules()...)
	out = append(out, pki.Rules()...)
	out = append(out, cloudinit.Rules()...)
	out = append(out, ignition.Rules()...)
	out = append(out, terraform.Rules()...)
	return out
}

// coverage reports the nodes a requested node-config target leaves out:
// cloud-init configures Debian-like systems, Ignition the others.
func coverage(t Target, c *ir.Cluster) diag.List {
	switch t {
	case CloudInit:
		return cloudinit.CheckCoverage(c)
	case Ignition:
		return ignition.CheckCoverage(c)
	}
	return nil
}
