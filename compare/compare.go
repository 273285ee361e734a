// Package compare compiles the two sides of a change to a spec (two
// directories, or one directory at two git revisions) with one bundle,
// or reads a golden directory and a built tree, and returns review's
// report of what changed. kcompile diff parses its flags, calls Run and
// prints the report.
package compare

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/plan"
	"github.com/kcompile/kcompile/review"
)

// Input is one comparison.
type Input struct {
	// Args are two spec directories; with Git, at most one spec
	// directory (default "."); with Golden, a golden directory and a
	// built tree.
	Args []string
	// Git is REV1..REV2: the spec at two revisions.
	Git string
	// Golden compares a built tree with a golden directory, as the golden
	// tests do; file modes are not compared (git keeps none).
	Golden bool
	// Secrets is the bundle both sides are compiled with. Without it,
	// both are compiled with one bundle made for this comparison alone
	// from Rand and Now, and key material is not compared.
	Secrets string
	// OldSecrets, when set, is the bundle the first side is compiled
	// with instead: the one a running cluster was built with, when the
	// change is of the bundle too (a stage of a rotation, a renewal).
	OldSecrets string
	// Targets are compared (pipeline.Reviewed for all of them).
	Targets []pipeline.Target
	// Policies, and Profile with them, are held against both sides.
	Policies []string
	Profile  string
	// Bound bounds each evaluation of a spec or policy
	// (pipeline.Source.Bound).
	Bound func(eval func()) error
	// Now is the caller's clock and Rand its randomness, for the
	// throwaway bundle and the bundle's checks.
	Now  time.Time
	Rand io.Reader
	// Cwd is where positions are made relative to.
	Cwd string
	// Stage is told each stage of a compile as it starts.
	Stage func(string)
	// then is told each side once it is compiled, while its directory
	// is still there (kcompile plan reads the spec as data).
	then func(i int, side compiled) error
	// Command names the command in messages; "diff" when empty.
	Command string
}

func (in Input) command() string {
	if in.Command == "" {
		return "diff"
	}
	return in.Command
}

// Problems are diagnostics that stop a comparison (a side that does not
// compile, a bundle that cannot be used): the caller prints them, then
// Msg.
type Problems struct {
	Diagnostics diag.List
	Msg         string
}

func (p *Problems) Error() string { return p.Msg }

// throwawayCAValidity is secrets init's default, so that a spec's leaf
// validity fits the throwaway CAs as it fits a bundle made by default.
const throwawayCAValidity = 10 * 365 * 24 * time.Hour

// Run compares as in says.
func Run(in Input) (*review.Report, error) {
	switch {
	case in.Golden:
		if in.Git != "" || len(in.Args) != 2 {
			return nil, errors.New("diff --golden takes GOLDEN OUT: a golden directory and a built tree")
		}
		golden, err := review.ReadDir(in.Args[0])
		if err != nil {
			return nil, err
		}
		built, err := review.ReadDir(in.Args[1])
		if err != nil {
			return nil, err
		}
		if built, err = review.WithSummaries(built); err != nil {
			return nil, err
		}
		return review.Compare(review.Side{Label: in.Args[0], Tree: golden}, review.Side{Label: in.Args[1], Tree: built},
			review.Options{IgnoreModes: true}), nil
	case in.Git != "":
		if len(in.Args) > 1 {
			return nil, errors.New("diff --git REV1..REV2 takes at most one spec directory")
		}
		dir := "."
		if len(in.Args) == 1 {
			dir = in.Args[0]
		}
		rev1, rev2, ok := strings.Cut(in.Git, "..")
		if !ok || rev1 == "" || rev2 == "" || strings.HasPrefix(rev2, ".") {
			return nil, fmt.Errorf("--git %q: write two revisions as REV1..REV2", in.Git)
		}
		b, err := in.bundle()
		if err != nil {
			return nil, err
		}
		var sides [2]compiled
		for i, rev := range []string{rev1, rev2} {
			tmp, err := os.MkdirTemp("", "kcompile-diff-")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(tmp)
			if err := exportSpec(dir, rev, tmp); err != nil {
				return nil, err
			}
			// Positions name the revision, not the temporary copy that
			// is gone when the report is read.
			at := func(l diag.List) diag.List { return underName(l, tmp, rev+":"+filepath.ToSlash(filepath.Clean(dir))) }
			if sides[i], err = in.side(b, tmp, rev+":"+dir, at); err != nil {
				return nil, err
			}
			if in.then != nil {
				if err := in.then(i, sides[i]); err != nil {
					return nil, err
				}
			}
		}
		return in.withPlan(in.compare(sides[0].Side, sides[1].Side), sides), nil
	}
	if len(in.Args) != 2 {
		return nil, errors.New(in.command() + " takes BASE HEAD (two spec directories), --git REV1..REV2 [DIR] or --golden GOLDEN OUT")
	}
	b, err := in.bundle()
	if err != nil {
		return nil, err
	}
	bundles := [2]*pki.Bundle{b, b}
	if in.OldSecrets != "" {
		if bundles[0], err = (Input{Secrets: in.OldSecrets}).bundle(); err != nil {
			return nil, err
		}
	}
	var sides [2]compiled
	for i, dir := range in.Args {
		if sides[i], err = in.side(bundles[i], dir, dir, func(l diag.List) diag.List { return l.Relative(in.Cwd) }); err != nil {
			return nil, err
		}
		if in.then != nil {
			if err := in.then(i, sides[i]); err != nil {
				return nil, err
			}
		}
	}
	return in.withPlan(in.compare(sides[0].Side, sides[1].Side), sides), nil
}

// withPlan gives diff's etcd membership step the plan's actions: the
// members added and removed one at a time, each started with the
// membership of its own step, in the order kcompile plan takes them
// (plan.Make, without checking each state). Where the plan refuses the
// change, the step says why.
func (in Input) withPlan(r *review.Report, sides [2]compiled) *review.Report {
	if in.command() != "diff" {
		return r
	}
	i := slices.IndexFunc(r.Steps, func(s review.Step) bool { return s.Kind == review.StepEtcdMembership })
	if i < 0 {
		return r
	}
	var ends [2]plan.Side
	for j, c := range sides {
		data, diags := compiler.Concrete(compiler.Source{Dir: c.Dir, Bound: in.Bound})
		if diags.HasErrors() {
			return r
		}
		ends[j] = plan.Side{Label: c.Label, Cluster: c.Cluster, Data: data}
	}
	step := &r.Steps[i]
	p, err := plan.Make(plan.Input{Old: ends[0], New: ends[1], Report: r})
	if err != nil {
		step.Actions = append(step.Actions, "kcompile plan refuses this change: "+err.Error())
		return r
	}
	var actions []string
	for _, st := range p.Stages {
		for _, s := range st.Steps {
			if !slices.Contains(s.Tolerate, compiler.CodeEtcdEven) && s.Kind != "etcd" && s.Kind != "api server" {
				continue
			}
			actions = append(actions, fmt.Sprintf("step %d, %s %s: %s", s.N, s.Kind, strings.Join(s.Nodes, " "), strings.Join(s.Actions, "; ")))
		}
	}
	if len(actions) == 0 {
		return r
	}
	if len(actions) < p.Steps() {
		actions = append(actions, fmt.Sprintf("the other %d steps as kcompile plan %s %s orders them", p.Steps()-len(actions), sides[0].Label, sides[1].Label))
	}
	step.Actions = actions
	return r
}

// compiled is one side of a comparison: what review compares, and the
// cluster and spec directory it was compiled from.
type compiled struct {
	review.Side
	Cluster *ir.Cluster
	Dir     string
	// bundle is the secrets bundle both sides were built with.
	bundle *pki.Bundle
}

func (in Input) compare(a, b review.Side) *review.Report {
	return review.Compare(a, b, review.Options{ThrowawayKeys: in.Secrets == ""})
}

// bundle is the secrets bundle of Secrets, or else one made for this
// comparison alone (as secrets init makes one), which both sides share
// so that only the spec's change shows; it is never written anywhere.
func (in Input) bundle() (*pki.Bundle, error) {
	if in.Secrets == "" {
		return pki.New(in.Rand, in.Now, pki.NewOptions{Algorithm: pki.ECDSAP256, CAValidity: throwawayCAValidity})
	}
	b, diags, err := pipeline.LoadBundle(in.Secrets)
	if err != nil {
		return nil, err
	}
	if diags.HasErrors() {
		return nil, &Problems{Diagnostics: diags, Msg: "cannot use the secrets bundle " + in.Secrets}
	}
	return b, nil
}

// side compiles one spec with the shared bundle (and the policies, in
// the same compile) and builds the targets. Its warnings are not
// printed: the report compares them. at rewrites the positions of its
// diagnostics for the report.
func (in Input) side(b *pki.Bundle, dir, label string, at func(diag.List) diag.List) (compiled, error) {
	src := pipeline.Source{Dir: dir, Bound: in.Bound, Policies: in.Policies}
	if len(in.Policies) > 0 {
		src.Profile = in.Profile
	}
	run := pipeline.Input{Source: src, Bundle: b, Now: in.Now, Issue: true, Targets: in.Targets, Stage: in.Stage, Findings: true}
	out, err := pipeline.Run(run)
	if err != nil {
		return compiled{}, err
	}
	if err := out.PolicyLoadError(); err != nil {
		return compiled{}, fmt.Errorf("%s: %w", label, err)
	}
	if out.Diagnostics.HasErrors() {
		return compiled{}, &Problems{Diagnostics: out.Diagnostics, Msg: label + ": " + out.Stopped(run, "nothing compared")}
	}
	c := review.Compiled{Cluster: out.Cluster, Material: out.Material, Diagnostics: out.Diagnostics, Findings: out.Findings}
	for _, t := range in.Targets {
		c.Trees = append(c.Trees, review.NamedTree{Name: string(t), Tree: out.Trees[t]})
	}
	for _, w := range out.Waivers {
		c.Waivers = append(c.Waivers, review.Waiver{ID: w.ID, Reason: w.Reason, Positions: w.Positions, Waives: w.Waives})
	}
	side, err := review.SideOf(label, c, at)
	return compiled{Side: side, Cluster: out.Cluster, Dir: dir, bundle: b}, err
}

// underName rewrites the positions of diagnostics in the directory dir
// as positions under name.
func underName(l diag.List, dir, name string) diag.List {
	out := make(diag.List, len(l))
	for i, d := range l {
		d.Positions = slices.Clone(d.Positions)
		for j, p := range d.Positions {
			if rel, err := filepath.Rel(dir, p.File); err == nil && filepath.IsAbs(p.File) && !strings.HasPrefix(rel, "..") {
				d.Positions[j].File = name + "/" + filepath.ToSlash(rel)
			}
		}
		out[i] = d
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
