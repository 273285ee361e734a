package main

import (
	"context"
	"fmt"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/runtimes/nspawn"
)

// nodeCmd drives the nodes of a cluster kcompile up runs.
type nodeCmd struct {
	Status  nodeStatusCmd  `cmd:"" help:"Show the nodes of a running kcompile up, their state, who holds the API endpoint's VIP and etcd's leader."`
	Stop    nodeStopCmd    `cmd:"" help:"Power a node off as its operator would (systemctl poweroff: the kubelet ends its pods first); the cluster goes on without it."`
	Start   nodeStartCmd   `cmd:"" help:"Boot a stopped node again, with the disk it had."`
	Kill    nodeKillCmd    `cmd:"" help:"Cut a node's power: nothing in it gets to say goodbye (a failover drill)."`
	Restart nodeRestartCmd `cmd:"" help:"Stop a node, then start it."`
}

// upWork finds the work directory of a running up: --work, or up's
// default for the spec's cluster.
type upWork struct {
	Dir  string `arg:"" optional:"" default:"." help:"Spec directory (for the cluster name, when --work is not given)."`
	Work string `help:"Work directory of the kcompile up." placeholder:"DIR"`
}

// upWorkDir is the absolute work directory of an up: work, or up's
// default for the cluster of the spec in dir.
func upWorkDir(e *env, dir, work string) (string, error) {
	if work == "" {
		cl, err := compileSpec(e, dir)
		if err != nil {
			return "", err
		}
		work = nspawn.DefaultWork(cl.Name)
	}
	return filepath.Abs(work)
}

func (u upWork) dial(e *env) (*nspawn.Control, error) {
	work, err := upWorkDir(e, u.Dir, u.Work)
	if err != nil {
		return nil, err
	}
	k, err := nspawn.Dial(work)
	if err != nil {
		return nil, statusError{code: exitProblems, msg: err.Error()}
	}
	return k, nil
}

type nodeStatusCmd struct {
	upWork
	Output string `short:"o" enum:"text,json" default:"text" help:"Output format: text or json."`
}

type nodePowerCmd struct {
	Node string `arg:"" help:"The node."`
	upWork
}

func (nodeStatusCmd) Help() string {
	return `Examples:
  sudo kcompile node status examples/ha-stacked
  sudo kcompile node status --work /var/lib/kcompile/up/demo -o json
` + exitCodes("0", "shown", "1", "no kcompile up runs there, or the spec has errors", "2", "usage error")
}

func (nodePowerCmd) Help() string {
	return `Examples:
  sudo kcompile node kill cp1 examples/ha-stacked   # the VIP moves; the API answers through it
  sudo kcompile node start cp1 examples/ha-stacked
` + exitCodes("0", "done; the status after it is shown", "1", "no kcompile up runs there, no such node, or the node cannot do it now", "2", "usage error")
}

func (c *nodeStatusCmd) Run(e *env) error {
	k, err := c.dial(e)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := k.Status(ctx)
	if err != nil {
		return statusError{code: exitProblems, msg: err.Error()}
	}
	if c.Output == "json" {
		return diag.EncodeJSON(e.stdout, s)
	}
	return printStatus(e, s)
}

// The power commands differ only in their action.
type (
	nodeStopCmd    struct{ nodePowerCmd }
	nodeStartCmd   struct{ nodePowerCmd }
	nodeKillCmd    struct{ nodePowerCmd }
	nodeRestartCmd struct{ nodePowerCmd }
)

func (c *nodeStopCmd) Run(e *env) error    { return c.runPower(e, nspawn.PowerStop) }
func (c *nodeStartCmd) Run(e *env) error   { return c.runPower(e, nspawn.PowerStart) }
func (c *nodeKillCmd) Run(e *env) error    { return c.runPower(e, nspawn.PowerKill) }
func (c *nodeRestartCmd) Run(e *env) error { return c.runPower(e, nspawn.PowerRestart) }

// runPower performs action on the node and shows the status after.
func (c *nodePowerCmd) runPower(e *env, action string) error {
	k, err := c.dial(e)
	if err != nil {
		return err
	}
	// A power-off waits on the kubelet's graceful shutdown.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, err := k.Power(ctx, c.Node, action)
	if err != nil {
		return statusError{code: exitProblems, msg: err.Error()}
	}
	return printStatus(e, s)
}

func printStatus(e *env, s nspawn.Status) error {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tSTATE\tPID\tBOOTS\n")
	for _, n := range s.Nodes {
		pid := "-"
		if n.PID > 0 {
			pid = fmt.Sprint(n.PID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", n.Name, n.State, pid, n.Boots)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.VIPHolder != "" {
		fmt.Fprintf(e.stdout, "the API endpoint's VIP is on %s\n", s.VIPHolder)
	}
	if len(s.Unpullable) > 0 {
		fmt.Fprintln(e.stdout, "pods waiting for an image no node can pull (the nodes have no egress; up serves only the cluster's own images):")
		for _, p := range s.Unpullable {
			fmt.Fprintln(e.stdout, "  "+diag.Printable(p, maxShown))
		}
	}
	leader := s.EtcdLeader
	if leader == "" {
		leader = "none answers"
	}
	fmt.Fprintf(e.stdout, "etcd leader: %s\n", leader)
	return nil
}
