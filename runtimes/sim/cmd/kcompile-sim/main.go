// Command kcompile-sim runs a compiled cluster in one process: real etcd
// and control plane, simulated kubelets (see package sim). It is a binary
// of its own because it links all of Kubernetes; `kcompile sim ARGS` runs
// it with the same arguments. Like kcompile, this package is the only one
// of its module that reads the clock and the environment and prints
// diagnostics.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/command"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/restore"
	"github.com/kcompile/kcompile/runtimes/sim"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses, as kcompile's.
const (
	exitOK       = command.ExitOK
	exitProblems = command.ExitProblems
	exitUsage    = command.ExitUsage
)

// cli is the grammar of `kcompile sim`.
type cli struct {
	Dir      string        `arg:"" optional:"" default:"." help:"Spec directory (a CUE package)."`
	Secrets  string        `short:"s" default:"secrets.json" help:"Secrets bundle (see kcompile secrets init)."`
	Workdir  string        `placeholder:"DIR" help:"Directory for the node trees, etcd data, admin.kubeconfig and sim.log; it must be empty. Default: a new temporary directory."`
	Until    string        `enum:",ready" default:"" help:"Exit once the cluster reaches this state (ready: every node Ready) instead of running until interrupted."`
	Timeout  time.Duration `default:"10m" help:"How long the cluster may take to become ready."`
	Scenario string        `type:"existingfile" placeholder:"FILE" help:"Play a CUE scenario (steps and expectations) once the cluster is ready, print a pass/fail report and exit: 1 when an expectation fails."`
	Restore  string        `type:"existingfile" placeholder:"SNAPSHOT" help:"Rehearse a restore: every etcd member's data restored from this snapshot (refused when corrupt or of another cluster) before etcd starts; once ready, report what came back and exit: 1 when a key of the snapshot is not back."`
	Etcdutl  string        `placeholder:"PROGRAM" help:"With --restore: etcdutl, which restores the members' data; default: etcdutl on PATH."`
}

// Help is the detailed help of `kcompile sim --help`, with an example and
// the exit statuses, as every kcompile command's help has.
func (cli) Help() string {
	return `Examples:
  kcompile sim examples/ha-stacked -s secrets.json --until ready
  kcompile sim examples/ha-stacked -s secrets.json --scenario drill.cue
  kcompile sim examples/large -s secrets.json --workdir /tmp/large   # Ctrl-C stops it

Exit status:
  0  the cluster reached --until, the scenario passed, a rehearsed restore
     brought every key back, or Ctrl-C stopped it
  1  the spec or the bundle has errors, the cluster did not become ready in
     --timeout, or an expectation of the scenario failed
  2  usage error
`
}

func run(args []string, stdout, stderr io.Writer) int {
	var c cli
	_, _, code, ok := command.Parse(&c, "kcompile sim", "Run the compiled cluster in this process: real etcd and control plane, simulated kubelets.",
		args, stdout, stderr)
	if !ok {
		return code
	}
	now, err := command.Clock()
	if err != nil {
		fmt.Fprintln(stderr, "kcompile sim:", err)
		return exitUsage
	}
	cwd, _ := os.Getwd()
	code, msg := c.run(now, cwd, stdout, stderr)
	if msg != "" {
		fmt.Fprintln(stderr, "kcompile sim:", msg)
	}
	return code
}

// run compiles the spec, checks it with the bundle and the scenario, and
// runs the simulation; it returns the exit status and what to say.
func (c *cli) run(now time.Time, cwd string, stdout, stderr io.Writer) (int, string) {
	printed := func(diags diag.List, msg string) (int, string) {
		if err := diags.Relative(cwd).WriteText(stderr); err != nil {
			return exitProblems, err.Error()
		}
		return exitProblems, msg
	}
	b, diags, err := pipeline.LoadBundle(c.Secrets)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return exitProblems, err.Error()
	case err != nil:
		return exitProblems, err.Error()
	case diags.HasErrors():
		return printed(diags, "cannot use the secrets bundle "+c.Secrets)
	}
	in := pipeline.Input{Source: pipeline.Source{Dir: c.Dir}, Bundle: b, Now: now, Scenario: c.Scenario}
	out, err := pipeline.Run(in)
	if err != nil {
		return exitProblems, err.Error()
	}
	if out.Diagnostics.HasErrors() {
		return printed(out.Diagnostics, out.Stopped(in, "the spec and the secrets bundle do not fit together"))
	}
	var rehearse *sim.Restore
	if c.Restore != "" {
		if c.Scenario != "" {
			return exitUsage, "--restore rehearses a restore and exits: play a scenario in a simulation of its own"
		}
		snap, err := restore.Inspect(c.Restore)
		if err != nil {
			return exitProblems, "nothing restored: " + err.Error()
		}
		if err := restore.Match(snap, out.Cluster, b.Trusted(pki.ClusterCA)); err != nil {
			return exitProblems, "nothing restored: " + err.Error()
		}
		etcdutl := c.Etcdutl
		if etcdutl == "" {
			if etcdutl, err = exec.LookPath("etcdutl"); err != nil {
				return exitProblems, "--restore needs etcdutl, etcd's own restore, of the cluster's etcd release: give --etcdutl PROGRAM (kcompile's scripts/tools builds it into .bin)"
			}
		}
		rehearse = &sim.Restore{Snapshot: snap, Etcdutl: etcdutl}
	}
	if err := c.simulate(out.Cluster, out.Scenario, b, rehearse, stdout); err != nil {
		return exitProblems, err.Error()
	}
	return exitOK, ""
}

// freeBlock finds a block of the loopback network no other simulation
// uses: the first whose API endpoint can be listened on.
func freeBlock(port int) (int, error) {
	for b := 1; b <= sim.MaxBlock; b++ {
		l, err := net.Listen("tcp", net.JoinHostPort(sim.EndpointAddr(b).String(), strconv.Itoa(port)))
		if err == nil {
			l.Close()
			return b, nil
		}
	}
	return 0, fmt.Errorf("every block of 127.1.0.0-127.%d.0.0 is taken by another simulation", sim.MaxBlock)
}

func (c *cli) simulate(cl *ir.Cluster, scenario *ir.Scenario, b *pki.Bundle, rehearse *sim.Restore, stdout io.Writer) error {
	work := c.Workdir
	var err error
	if work == "" {
		if work, err = os.MkdirTemp("", "kcompile-sim-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(work, 0o700); err != nil {
		return err
	}
	// The components log through klog; their log goes to the workdir,
	// the terminal gets the phases.
	logFile, err := os.OpenFile(filepath.Join(work, "sim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	if err := sim.LogTo(logFile); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stdout, "workdir %s\n", work)
	block, err := freeBlock(cl.Endpoint.Port)
	if err != nil {
		return err
	}
	began := time.Now()
	s, err := sim.Start(ctx, cl, b, sim.Options{WorkDir: work, Progress: stdout, Block: block, Restore: rehearse})
	if err != nil {
		return err
	}
	defer s.Stop()
	if err := s.WaitReady(ctx, c.Timeout); err != nil {
		return err
	}
	if rehearse != nil {
		rep, err := s.RestoreReport(ctx, began)
		if err != nil {
			return err
		}
		rep.WriteText(stdout, rehearse.Snapshot)
		if len(rep.Missing) > 0 {
			return fmt.Errorf("the rehearsal lost %d keys of the snapshot", len(rep.Missing))
		}
		return nil
	}
	fmt.Fprintf(stdout, "kubectl --kubeconfig %s get nodes\n", filepath.Join(work, sim.AdminKubeconfig))
	if scenario != nil {
		// The name is the scenario's text: escaped and cut for a terminal.
		name := diag.Printable(scenario.Name, 200)
		fmt.Fprintf(stdout, "scenario %s\n", name)
		ok, err := s.Run(ctx, scenario, stdout)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("scenario %s failed", name)
		}
		fmt.Fprintf(stdout, "scenario %s passed\n", name)
		return nil
	}
	if c.Until == "ready" {
		return nil
	}
	fmt.Fprintln(stdout, "running; interrupt to stop")
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping")
	return nil
}
