package main

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/picture"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/review"
	"github.com/kcompile/kcompile/targets"
)

type diffCmd struct {
	Args    []string `arg:"" optional:"" help:"BASE HEAD: two spec directories. With --git: the spec directory (default .). With --golden: GOLDEN OUT, a golden directory and a built tree."`
	Git     string   `placeholder:"REV1..REV2" help:"Compare the spec at two git revisions instead of two directories."`
	Golden  bool     `help:"Compare a built tree (OUT) with a golden directory (GOLDEN), as the golden tests do; file modes are not compared (git keeps none)."`
	Secrets string   `short:"s" default:"secrets.json" help:"Secrets bundle both sides are compiled with."`
	Target  string   `short:"t" enum:"systemd,cloudinit,ignition,all" default:"systemd" help:"Which target to compare: systemd, cloudinit, ignition or all (the three)."`
	Output  string   `short:"o" enum:"text,markdown,json" default:"text" help:"Output format: text, markdown (a pull-request comment) or json."`
	Policy  []string `placeholder:"PDIR" help:"Hold both sides to the organisation policies of PDIR (repeatable) and report the violations the change introduces and fixes."`
	Profile string   `enum:",cis" default:"" help:"With --policy: the benchmark both sides are checked with, as check --profile (policies read it as facts.profile)."`
	Color   string   `enum:"auto,always,never" default:"auto" help:"Colour text output: auto (on a terminal), always or never."`
}

// diffSide is one compiled side.
type diffSide struct {
	label    string
	tree     *targets.Tree
	etcd     []review.EtcdMember
	endpoint string
	facts    *review.Facts
	topology *picture.Topology
	// violations are the policies the side breaks, when --policy is
	// given.
	violations []review.Violation
}

// Run compares; exit 0 when equal, 1 when different, 2 on any error.
func (c *diffCmd) Run(e *env) error {
	r, err := c.compare(e)
	if err != nil {
		var s statusError
		if errors.As(err, &s) {
			return statusError{code: exitUsage, msg: s.msg}
		}
		return statusError{code: exitUsage, msg: err.Error()}
	}
	switch c.Output {
	case "json":
		err = r.WriteJSON(e.stdout)
	case "markdown":
		err = r.WriteMarkdown(e.stdout)
	default:
		colour := c.Color == "always" || (c.Color == "auto" && isTerminal(e.stdout))
		err = r.WriteText(e.stdout, colour)
	}
	if err != nil {
		return statusError{code: exitUsage, msg: err.Error()}
	}
	if !r.Equal() {
		return statusError{code: exitProblems}
	}
	return nil
}

func (c *diffCmd) compare(e *env) (*review.Report, error) {
	switch {
	case c.Golden:
		if c.Git != "" || len(c.Args) != 2 {
			return nil, errors.New("diff --golden takes GOLDEN OUT: a golden directory and a built tree")
		}
		golden, err := review.ReadDir(c.Args[0])
		if err != nil {
			return nil, err
		}
		built, err := review.ReadDir(c.Args[1])
		if err != nil {
			return nil, err
		}
		if built, err = review.WithSummaries(built); err != nil {
			return nil, err
		}
		return review.Compare(review.Side{Label: c.Args[0], Tree: golden}, review.Side{Label: c.Args[1], Tree: built},
			review.Options{IgnoreModes: true}), nil
	case c.Git != "":
		if len(c.Args) > 1 {
			return nil, errors.New("diff --git REV1..REV2 takes at most one spec directory")
		}
		dir := "."
		if len(c.Args) == 1 {
			dir = c.Args[0]
		}
		rev1, rev2, ok := strings.Cut(c.Git, "..")
		if !ok || rev1 == "" || rev2 == "" || strings.HasPrefix(rev2, ".") {
			return nil, fmt.Errorf("--git %q: write two revisions as REV1..REV2", c.Git)
		}
		var sides [2]diffSide
		for i, rev := range []string{rev1, rev2} {
			tmp, err := os.MkdirTemp("", "kcompile-diff-")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(tmp)
			if err := exportSpec(dir, rev, tmp); err != nil {
				return nil, err
			}
			if sides[i], err = c.side(e, tmp, rev+":"+dir); err != nil {
				return nil, err
			}
		}
		return compareSides(sides[0], sides[1]), nil
	}
	if len(c.Args) != 2 {
		return nil, errors.New("diff takes BASE HEAD (two spec directories), --git REV1..REV2 [DIR] or --golden GOLDEN OUT")
	}
	base, err := c.side(e, c.Args[0], c.Args[0])
	if err != nil {
		return nil, err
	}
	head, err := c.side(e, c.Args[1], c.Args[1])
	if err != nil {
		return nil, err
	}
	return compareSides(base, head), nil
}

func compareSides(a, b diffSide) *review.Report {
	return review.Compare(review.Side{Label: a.label, Tree: a.tree, Etcd: a.etcd, Endpoint: a.endpoint, Facts: a.facts, Violations: a.violations, Topology: a.topology},
		review.Side{Label: b.label, Tree: b.tree, Etcd: b.etcd, Endpoint: b.endpoint, Facts: b.facts, Violations: b.violations, Topology: b.topology}, review.Options{})
}

// side compiles one spec with the shared bundle and builds the target(s).
func (c *diffCmd) side(e *env, dir, label string) (diffSide, error) {
	names := []pipeline.Target{pipeline.Target(c.Target)}
	if c.Target == "all" {
		names = []pipeline.Target{pipeline.Systemd, pipeline.CloudInit, pipeline.Ignition}
	}
	out, err := specAndSecrets{Dir: dir, Secrets: c.Secrets}.run(e, names...)
	if err != nil {
		var s statusError
		if errors.As(err, &s) {
			return diffSide{}, fmt.Errorf("%s: %s", label, s.msg)
		}
		return diffSide{}, err
	}
	s := diffSide{label: label, etcd: etcdMembers(out.Cluster), endpoint: endpointOf(out.Cluster), facts: factsOf(out), topology: picture.Of(out.Cluster), tree: targets.NewTree()}
	if len(c.Policy) > 0 {
		if s.violations, err = violations(dir, c.Policy, c.Profile); err != nil {
			return diffSide{}, fmt.Errorf("%s: %w", label, err)
		}
	}
	for _, name := range names {
		for _, f := range out.Trees[name].Files() {
			p := f.Path
			if c.Target == "all" {
				p = string(name) + "/" + p
			}
			if err := s.tree.Add(p, f.Data, f.Mode); err != nil {
				return diffSide{}, err
			}
		}
	}
	return s, nil
}

// violations holds the spec in dir to the policies: a violation (under
// its policy's id, which no rule of kcompile has) is a finding, not an
// error, on either side; a policy that does not load is an error.
func violations(dir string, policies []string, profile string) ([]review.Violation, error) {
	_, diags := compiler.Compile(compiler.Source{Dir: dir, Policies: policies, Profile: profile})
	rules := map[string]bool{}
	for _, r := range pipeline.Rules() {
		rules[r.Code] = true
	}
	out := []review.Violation{}
	var broken []string
	for _, d := range diags {
		switch {
		case !rules[d.Code]:
			out = append(out, review.Violation{ID: d.Code, Severity: d.Severity.String(), Path: d.Path, Message: d.Message})
		case d.Code == compiler.CodePolicyLoad || d.Code == compiler.CodePolicyShape || d.Code == compiler.CodePolicyNothing || d.Code == compiler.CodeInternal:
			broken = append(broken, fmt.Sprintf("  %s: %s %s: %s", d.Primary(), d.Severity, d.Code, d.Message))
		}
	}
	if len(broken) > 0 {
		return nil, fmt.Errorf("a policy does not load:\n%s", strings.Join(broken, "\n"))
	}
	return out, nil
}

// factsOf are the settings of a compiled side that a restart does not
// apply to a running cluster.
func factsOf(out *pipeline.Output) *review.Facts {
	c := out.Cluster
	f := &review.Facts{Nodes: map[string]review.NodeFacts{}, Domain: c.Network.Domain, CAs: map[string]string{}}
	for _, p := range c.Network.ServiceCIDRs {
		f.ServiceCIDRs = append(f.ServiceCIDRs, p.String())
	}
	for _, p := range c.Network.PodCIDRs {
		f.PodCIDRs = append(f.PodCIDRs, p.String())
	}
	for _, n := range c.Nodes {
		if !n.RunsPods() {
			continue
		}
		var nf review.NodeFacts
		for _, l := range n.Labels {
			nf.Labels = append(nf.Labels, l.Key+"="+l.Value)
		}
		for _, t := range n.Taints {
			nf.Taints = append(nf.Taints, t.Key+"="+t.Value+":"+t.Effect)
		}
		f.Nodes[n.Name] = nf
	}
	if out.Material != nil {
		b := out.Material.Bundle
		for name, a := range map[string]pki.Authority{"kubernetes": pki.ClusterCA, "etcd": pki.EtcdCA, "front-proxy": pki.FrontProxyCA} {
			if ca, ok := b.CAs[a]; ok {
				f.CAs[name] = review.Hash(ca.Cert.Raw)
			}
		}
		if b.ServiceAccountKey != nil {
			if der, err := x509.MarshalPKIXPublicKey(b.ServiceAccountKey.Public()); err == nil {
				f.CAs["service-account"] = review.Hash(der)
			}
		}
	}
	return f
}

// endpointOf says where clients reach the API and what serves it.
func endpointOf(c *ir.Cluster) string {
	e := c.Endpoint
	switch e.Mode {
	case ir.EndpointVIP:
		return fmt.Sprintf("%s, a VIP of the control-plane nodes (VRRP router %d)", e.URL, e.RouterID)
	case ir.EndpointNodeLocal:
		return fmt.Sprintf("%s outside the cluster, %s on every node", e.URL, e.NodeURL())
	case ir.EndpointNode:
		return e.URL + ", the only control-plane node"
	}
	return e.URL + ", served outside the spec"
}

func etcdMembers(c *ir.Cluster) []review.EtcdMember {
	var out []review.EtcdMember
	for _, m := range c.Etcd.Members {
		out = append(out, review.EtcdMember{Name: m.Name, Address: m.Address.String(), Node: m.Node})
	}
	return out
}

// exportSpec writes the files of the spec directory dir as they are at
// git revision rev into out.
func exportSpec(dir, rev, out string) error {
	git := func(args ...string) ([]byte, error) {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return b, nil
	}
	if _, err := git("rev-parse", "--verify", "--quiet", rev+"^{commit}"); err != nil {
		return fmt.Errorf("%s is not a revision of the repository at %s: %w", rev, dir, err)
	}
	// Paths relative to dir, and only those below it.
	list, err := git("ls-tree", "-r", "-z", "--name-only", rev, "--", ".")
	if err != nil {
		return err
	}
	n := 0
	for _, name := range strings.Split(string(list), "\x00") {
		if name == "" {
			continue
		}
		data, err := git("show", rev+":./"+name)
		if err != nil {
			return err
		}
		p := filepath.Join(out, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s has no files at %s", dir, rev)
	}
	return nil
}

// isTerminal reports whether w is a terminal, for colour.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
