package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kcompile/kcompile/targets/sim"
)

type simCmd struct {
	Dir      string        `arg:"" optional:"" default:"." help:"Spec directory (a CUE package)."`
	Secrets  string        `short:"s" default:"secrets.json" help:"Secrets bundle (see kcompile secrets init)."`
	Workdir  string        `placeholder:"DIR" help:"Directory for the node trees, etcd data, admin.kubeconfig and sim.log; it must be empty. Default: a new temporary directory."`
	Until    string        `enum:",ready" default:"" help:"Exit once the cluster reaches this state (ready: every node Ready) instead of running until interrupted."`
	Timeout  time.Duration `default:"10m" help:"How long the cluster may take to become ready."`
	Scenario string        `type:"existingfile" placeholder:"FILE" help:"Play a CUE scenario (steps and expectations) once the cluster is ready, print a pass/fail report and exit: 1 when an expectation fails."`
}

func (c *simCmd) Run(e *env) error {
	cl, b, err := compileWithBundle(e, c.Dir, c.Secrets)
	if err != nil {
		return err
	}
	var scenario *sim.Scenario
	if c.Scenario != "" {
		src, err := os.ReadFile(c.Scenario)
		if err != nil {
			return err
		}
		if scenario, err = sim.ParseScenario(c.Scenario, src); err != nil {
			return statusError{code: exitProblems, msg: "scenario: " + err.Error()}
		}
	}
	work := c.Workdir
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
	fmt.Fprintf(e.stdout, "workdir %s\n", work)
	s, err := sim.Start(ctx, cl, b, sim.Options{WorkDir: work, Progress: e.stdout})
	if err != nil {
		return err
	}
	defer s.Stop()
	if err := s.WaitReady(ctx, c.Timeout); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "kubectl --kubeconfig %s get nodes\n", filepath.Join(work, sim.AdminKubeconfig))
	if scenario != nil {
		fmt.Fprintf(e.stdout, "scenario %s\n", scenario.Name)
		ok, err := s.Run(ctx, scenario, e.stdout)
		if err != nil {
			return err
		}
		if !ok {
			return statusError{code: exitProblems, msg: "scenario " + scenario.Name + " failed"}
		}
		fmt.Fprintf(e.stdout, "scenario %s passed\n", scenario.Name)
		return nil
	}
	if c.Until == "ready" {
		return nil
	}
	fmt.Fprintln(e.stdout, "running; interrupt to stop")
	<-ctx.Done()
	fmt.Fprintln(e.stdout, "stopping")
	return nil
}
