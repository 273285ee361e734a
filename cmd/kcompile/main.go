// Command kcompile compiles a CUE description of a Kubernetes cluster into
// what is needed to run it. This package is the only one that reads the
// environment, the wall clock or crypto/rand, and the only one that prints
// diagnostics.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/kcompile/kcompile/internal/command"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/runtimes/nspawn"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Exit statuses shared by every command.
const (
	exitOK       = command.ExitOK
	exitProblems = command.ExitProblems
	exitUsage    = command.ExitUsage
)

// cli is the kong grammar of kcompile.
type cli struct {
	Check      checkCmd      `cmd:"" help:"Check a spec: schema errors and semantic checks, all reported at once."`
	Explain    explainCmd    `cmd:"" help:"Show effective values of a spec and where each came from."`
	Build      buildCmd      `cmd:"" help:"Compile a spec into a target and write it atomically to DIR/<target> (-d DIR, default out)."`
	Plan       planCmd       `cmd:"" help:"Order a change of a running cluster, OLD spec to NEW: stages and steps within the rollout budgets, every state between the two compiled and checked."`
	Diff       diffCmd       `cmd:"" help:"Show what a spec change does to the compiled cluster: nodes, files, restarts, etcd quorum; or compare a built tree with a golden directory."`
	Provision  provisionCmd  `cmd:"" help:"Provision bare metal: serve every node's cloud-init through Matchbox with OpenTofu/Terraform (init, plan, confirm, apply)."`
	Up         upCmd         `cmd:"" help:"Boot the compiled cluster for real: every node a systemd-nspawn machine (real systemd, its own network namespace) booting its systemd tree or its cloud-init; runs until Ctrl-C or kcompile down (root)."`
	Down       downCmd       `cmd:"" help:"Stop a cluster kcompile up booted and remove every machine, namespace, device and file it made."`
	Apply      applyCmd      `cmd:"" help:"Change a cluster kcompile up runs into a new spec, step by step as kcompile plan orders it: each node's files laid, its units restarted, health gates between the steps (root)."`
	Restore    restoreCmd    `cmd:"" help:"Bring a cluster back from an etcd snapshot: every member restored with its own name and peer URL and a new cluster token, the API servers stopped around it; performed on a cluster kcompile up runs or over SSH, printed for other hosts, or rehearsed in the simulator."`
	Node       nodeCmd       `cmd:"" help:"Show or drive the nodes of a cluster kcompile up runs: status, stop, start, kill (a power cut), restart (root)."`
	Sim        simCmd        `cmd:"" passthrough:"all" help:"Run the compiled cluster in one process: real etcd and control plane, simulated kubelets (runs kcompile-sim; kcompile sim --help lists its flags)."`
	Secrets    secretsCmd    `cmd:"" help:"Create or import the secrets bundle."`
	PKI        pkiCmd        `cmd:"" name:"pki" help:"Inspect, renew and verify the cluster's certificates."`
	Version    versionCmd    `cmd:"" help:"Print the kcompile version and the schema versions it understands."`
	Completion completionCmd `cmd:"" help:"Print a shell completion script (bash, zsh or fish)."`

	Quiet bool `short:"q" help:"Show no progress on stderr (progress is shown only when stderr is a terminal); warnings and errors are still printed."`
	// A spec or policy from a pull request may be written to exhaust
	// the machine that checks it.
	EvalTimeout time.Duration `name:"eval-timeout" default:"1m" help:"Give up evaluating a spec, or a policy directory, after this long (a positioned error)."`
	EvalMemory  string        `name:"eval-memory" default:"2GiB" placeholder:"SIZE" help:"Give up evaluating a spec, or a policy directory, when it grows the heap by more than this (e.g. 512MiB, 2GiB)."`
}

// env is what commands may touch of the outside world.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// cwd makes printed positions relative to where the user stands.
	cwd string
	// now is the wall clock, or SOURCE_DATE_EPOCH for reproducible runs.
	now time.Time
	app *kong.Kong
	// progress shows long work on stderr, or nothing.
	progress *progress
	// bound limits each stage of a spec's or policy's evaluation.
	bound func(eval func()) error
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var c cli
	// kcompile alone is a newcomer asking what it does.
	if len(args) == 0 {
		args = []string{"--help"}
	}
	parser, kctx, code, ok := command.Parse(&c, "kcompile", "kcompile compiles a CUE specification of a Kubernetes cluster into what is needed to run it.",
		args, stdout, stderr, targetNames())
	if !ok {
		return code
	}
	cwd, err := os.Getwd()
	if err != nil {
		cwd = ""
	}
	now, err := command.Clock()
	if err != nil {
		fmt.Fprintln(stderr, "kcompile:", err)
		return exitUsage
	}
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, cwd: cwd, now: now, app: parser}
	memory, err := parseSize(c.EvalMemory)
	if err != nil || c.EvalTimeout <= 0 {
		if err == nil {
			err = fmt.Errorf("--eval-timeout %s is not a positive duration", c.EvalTimeout)
		}
		fmt.Fprintln(stderr, "kcompile:", err)
		return exitUsage
	}
	e.bound = evalBound(c.EvalTimeout, memory)
	e.progress = newProgress(stderr, !c.Quiet && isTerminal(stderr))
	defer e.progress.close()
	if err := kctx.Run(e); err != nil {
		var s statusError
		if errors.As(err, &s) {
			if s.msg != "" {
				fmt.Fprintln(stderr, "kcompile:", s.msg)
			}
			return s.code
		}
		fmt.Fprintln(stderr, "kcompile:", err)
		return exitProblems
	}
	return exitOK
}

// statusError ends a command with a given exit status, optionally saying
// why on stderr.
type statusError struct {
	code int
	msg  string
}

func (s statusError) Error() string { return s.msg }

// targetNames gives the commands' target flags their choices from the
// one list each comes from: every target the pipeline builds, the ones
// review compares (and "all" of them), the ones up boots from.
func targetNames() kong.Vars {
	join := func(ts []pipeline.Target, more ...string) string {
		var out []string
		for _, t := range ts {
			out = append(out, string(t))
		}
		return strings.Join(append(out, more...), ",")
	}
	return kong.Vars{
		"build_targets": join(pipeline.Targets()),
		"diff_targets":  join(pipeline.Reviewed(), "all"),
		"up_targets":    join(nspawn.Targets()),
	}
}
