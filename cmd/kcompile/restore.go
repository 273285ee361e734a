package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/restore"
	"github.com/kcompile/kcompile/runtimes/nspawn"
	"github.com/kcompile/kcompile/targets"
)

// restoreCmd brings a cluster back from an etcd snapshot.
type restoreCmd struct {
	Snapshot    string        `arg:"" help:"The etcd snapshot (etcd.backup's, or etcdctl snapshot save's)."`
	Dir         string        `arg:"" optional:"" default:"." help:"The cluster's spec directory."`
	Work        string        `help:"Work directory of the kcompile up that runs the cluster; default /var/lib/kcompile/up/<cluster name>." placeholder:"DIR"`
	Secrets     string        `short:"s" default:"secrets.json" placeholder:"FILE" help:"The cluster's secrets bundle."`
	Print       bool          `help:"Print the steps, each command on its node, and change nothing: for hosts kcompile does not reach."`
	Rehearse    bool          `help:"Restore into a throw-away cluster of the simulator (kcompile-sim) instead, and report what came back: objects by resource, the newest revision, the time it took."`
	Binaries    string        `help:"Directory with etcdutl: laid on a member that has none (the spec installs it with etcd.backup); with --rehearse, the simulator's (default: etcdutl on PATH)." placeholder:"DIR"`
	GateTimeout time.Duration `default:"5m" help:"How long each gate (etcd's quorum, the API servers ready, the nodes Ready) may take before the restore stops."`
	SSHUser     string        `name:"ssh-user" placeholder:"USER" help:"Bare metal: reach the nodes over SSH at their addresses as USER (root, or an access user with sudo); the cluster's certificates are built with SOURCE_DATE_EPOCH's clock, as kcompile build built them."`
	SSHKey      string        `name:"ssh-key" placeholder:"FILE" help:"With --ssh-user: the private key (unencrypted); default: the keys of ssh-agent."`
	KnownHosts  string        `name:"known-hosts" placeholder:"FILE" help:"With --ssh-user: the nodes' host keys (default ~/.ssh/known_hosts)."`
	SSHPort     int           `name:"ssh-port" default:"22" help:"With --ssh-user: the nodes' SSH port."`
}

// Run refuses a snapshot that is corrupt or of another cluster before
// anything is stopped, then prints, rehearses or performs the restore.
func (c *restoreCmd) Run(e *env) error {
	modes := 0
	for _, on := range []bool{c.Print, c.Rehearse, c.SSHUser != ""} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return usageError("--print, --rehearse and --ssh-user are three ways of restoring: give one")
	}
	snap, err := filepath.Abs(c.Snapshot)
	if err != nil {
		return err
	}
	if c.Rehearse {
		// The simulator reads, matches and refuses the snapshot itself.
		return c.rehearse(e, snap)
	}
	e.progress.stage("reading " + c.Snapshot)
	s, err := restore.Inspect(snap)
	if err != nil {
		return statusError{code: exitProblems, msg: "nothing stopped: " + err.Error()}
	}
	b, diags, err := loadBundle(c.Secrets)
	if err != nil {
		return err
	}
	if diags.HasErrors() {
		return printDiagnostics(e, diags, "cannot use the secrets bundle "+c.Secrets)
	}
	// The cluster as it runs: up's recorded spec and bundle; else the
	// spec built as kcompile build built it.
	var running *nspawn.Running
	specDir, issued := c.Dir, e.now
	if !c.Print && c.SSHUser == "" {
		work, err := upWorkDir(e, c.Dir, c.Work)
		if err != nil {
			return err
		}
		if running, err = nspawn.ReadRunning(work); err != nil {
			return statusError{code: exitProblems, msg: err.Error() + "; for hosts of bare metal give --ssh-user, or --print for the steps"}
		}
		if !running.Up() {
			return usageError("the cluster in " + work + " runs on hosts kcompile up did not boot: give --ssh-user USER to reach them, or --print")
		}
		specDir, issued = filepath.Join(work, nspawn.SpecDir), running.Issued
		if running.Bundle != "" {
			if b, diags, err = loadBundle(running.Bundle); err != nil {
				return err
			}
			if diags.HasErrors() {
				return printDiagnostics(e, diags, "cannot use the running cluster's recorded secrets bundle "+running.Bundle)
			}
		}
	}
	cl, tree, err := buildRunning(e, b, specDir, issued)
	if err != nil {
		return err
	}
	if err := restore.Match(s, cl, b.Trusted(pki.ClusterCA)); err != nil {
		return statusError{code: exitProblems, msg: "nothing stopped: " + err.Error()}
	}
	if c.Print {
		e.progress.pause()
		return restore.Steps(cl, s, restore.Options{Stamp: e.now.UTC().Format("20060102T150405Z")}).WriteText(e.stdout)
	}
	var transport *nspawn.SSH
	if c.SSHUser != "" {
		if transport, err = sshTransport(c.SSHUser, c.SSHKey, c.KnownHosts, c.SSHPort); err != nil {
			return err
		}
		running = &nspawn.Running{Work: c.Work}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	e.progress.pause()
	r, err := nspawn.Restore(ctx, nspawn.RestoreConfig{Running: running, Cluster: cl, Tree: tree, Snapshot: s, Binaries: c.Binaries, SSH: transport,
		GateTimeout: c.GateTimeout, Log: e.stderr, Now: time.Now})
	if err != nil {
		return statusError{code: exitProblems, msg: err.Error()}
	}
	fmt.Fprintf(e.stdout, "restored cluster %s from %s (revision %d, %d keys) in %s: every etcd member healthy, every API server ready, every node Ready; the data before the restore is at %s on each member\n",
		cl.Name, c.Snapshot, s.Revision, s.Keys, r.Took.Round(100*time.Millisecond), r.Plan.Aside)
	return nil
}

// buildRunning builds the cluster of the spec in dir with the bundle,
// its certificates issued at the given clock, and its systemd tree.
func buildRunning(e *env, b *pki.Bundle, dir string, issued time.Time) (*ir.Cluster, *targets.Tree, error) {
	data, diags := compiler.Concrete(compiler.Source{Dir: dir, Bound: e.bound})
	if diags.HasErrors() {
		return nil, nil, printDiagnostics(e, diags, "the cluster's spec does not evaluate")
	}
	src, err := compiler.StateSource(compiler.Source{Dir: dir, Bound: e.bound}, data)
	if err != nil {
		return nil, nil, err
	}
	out, err := pipeline.Run(pipeline.Input{Source: src, Bundle: b, Now: issued, Issue: true, Targets: []pipeline.Target{pipeline.Systemd}})
	if err != nil {
		return nil, nil, err
	}
	if out.Diagnostics.HasErrors() {
		return nil, nil, printDiagnostics(e, out.Diagnostics, "the cluster's spec does not build")
	}
	return out.Cluster, out.Trees[pipeline.Systemd], nil
}

// rehearse restores the snapshot into the simulator, which reads it and
// refuses it as restore does, runs the spec's compiled control plane on
// it, and prints its report.
func (c *restoreCmd) rehearse(e *env, snap string) error {
	bin, err := findSim()
	if err != nil {
		return statusError{code: exitProblems, msg: fmt.Sprintf("kcompile restore --rehearse runs %s, which is neither beside kcompile nor on PATH; from a checkout of kcompile:\n\n    %s", simBinary, installSim)}
	}
	e.progress.pause()
	args := []string{c.Dir, "--secrets", c.Secrets, "--restore", snap}
	if c.Binaries != "" {
		args = append(args, "--etcdutl", filepath.Join(c.Binaries, "etcdutl"))
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = e.stdout, e.stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return statusError{code: exit.ExitCode(), msg: ""}
	case errors.Is(err, fs.ErrNotExist):
		return statusError{code: exitProblems, msg: err.Error()}
	}
	return err
}
