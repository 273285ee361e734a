package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kcompile/kcompile/compare"
	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/runtimes/nspawn"
	"github.com/kcompile/kcompile/targets"
)

// applyCmd performs the plan from the cluster kcompile up runs to a new
// spec.
type applyCmd struct {
	Dir         string        `arg:"" optional:"" default:"." help:"The spec the running cluster is to become (a spec directory)."`
	Work        string        `help:"Work directory of the kcompile up that runs the cluster; default /var/lib/kcompile/up/<cluster name>." placeholder:"DIR"`
	Secrets     string        `short:"s" default:"secrets.json" placeholder:"FILE" help:"The secrets bundle the cluster was booted with."`
	Via         []string      `placeholder:"VERSION" help:"As for kcompile plan: the release of each Kubernetes minor the change passes through."`
	Policy      []string      `placeholder:"PDIR" help:"Hold every state of the plan to the organisation policies of PDIR (repeatable)."`
	Profile     string        `enum:",cis" default:"" help:"With --policy: the benchmark every state is checked with."`
	Binaries    string        `help:"Directory of the programs of the new versions by name (as kcompile up's --binaries): a step that changes a node's binaries lays them from there." placeholder:"DIR"`
	DryRun      bool          `help:"Say what each step would do (the files it would lay on each node, the units it would restart) and change nothing."`
	Resume      bool          `help:"Go on with an apply of the same change that stopped, from the step after the last one done."`
	GateTimeout time.Duration `default:"5m" help:"How long each health gate may take to hold before apply stops."`
}

// Run plans the change from the running cluster's recorded spec to the
// new one, refuses a plan whose any state fails, and performs it (exit 0
// when done, 1 when refused or stopped, 2 on any other error).
func (c *applyCmd) Run(e *env) error {
	via, err := parseVia(c.Via)
	if err != nil {
		return err
	}
	work, err := upWorkDir(e, c.Dir, c.Work)
	if err != nil {
		return err
	}
	running, err := nspawn.ReadRunning(work)
	if err != nil {
		return statusError{code: exitProblems, msg: err.Error()}
	}
	specDir := filepath.Join(work, nspawn.SpecDir)
	p, err := compare.Plan(compare.Input{Args: []string{specDir, c.Dir}, Secrets: c.Secrets, Policies: c.Policy, Profile: c.Profile,
		Bound: e.bound, Now: e.now, Rand: rand.Reader, Cwd: e.cwd, Stage: e.progress.stage}, via)
	if err != nil {
		return planError(e, err, "plan refused, nothing applied: ")
	}
	b, diags, err := loadBundle(c.Secrets)
	if err != nil {
		return err
	}
	if diags.HasErrors() {
		return printDiagnostics(e, diags, "cannot use the secrets bundle "+c.Secrets)
	}
	// Every state is built as the running cluster was: the same bundle,
	// the clock its certificates were issued at.
	build := func(dir string, state map[string]any) (*ir.Cluster, *targets.Tree, error) {
		src, err := compiler.StateSource(compiler.Source{Dir: dir, Bound: e.bound}, state)
		if err != nil {
			return nil, nil, err
		}
		out, err := pipeline.Run(pipeline.Input{Source: src, Bundle: b, Now: running.Issued, Issue: true, Targets: []pipeline.Target{pipeline.Systemd}})
		if err != nil {
			return nil, nil, err
		}
		if out.Diagnostics.HasErrors() {
			return nil, nil, fmt.Errorf("the state does not build: %v", out.Diagnostics.Errors())
		}
		return out.Cluster, out.Trees[pipeline.Systemd], nil
	}
	oldData, oldDiags := compiler.Concrete(compiler.Source{Dir: specDir, Bound: e.bound})
	if oldDiags.HasErrors() {
		return printDiagnostics(e, oldDiags, "the running cluster's recorded spec does not evaluate")
	}
	old, oldTree, err := build(specDir, oldData)
	if err != nil {
		return statusError{code: exitProblems, msg: "the running cluster's recorded spec: " + err.Error()}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	e.progress.pause()
	if err := p.WriteText(e.stderr); err != nil {
		return err
	}
	err = nspawn.Apply(ctx, nspawn.ApplyConfig{
		Running: running, Plan: p, Old: old, OldTree: oldTree,
		Build:    func(state map[string]any) (*ir.Cluster, *targets.Tree, error) { return build(c.Dir, state) },
		Binaries: c.Binaries, DryRun: c.DryRun, Resume: c.Resume, GateTimeout: c.GateTimeout, Log: e.stderr, Now: time.Now,
	})
	if err != nil {
		return statusError{code: exitProblems, msg: err.Error()}
	}
	switch {
	case c.DryRun:
		fmt.Fprintf(e.stdout, "dry run: %s to apply, nothing changed\n", plural(p.Steps(), "step"))
	case p.Steps() == 0:
		fmt.Fprintf(e.stdout, "nothing to apply: the cluster in %s already runs %s\n", work, c.Dir)
	default:
		fmt.Fprintf(e.stdout, "applied %s → %s: %s, every gate held\n", p.From, p.To, plural(p.Steps(), "step"))
	}
	return nil
}
