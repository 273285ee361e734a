package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/internal/detach"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/runtimes/nspawn"
)

// upCmd boots the compiled cluster, one systemd-nspawn machine per node.
type upCmd struct {
	specAndSecrets
	Target   string        `enum:"${up_targets}" default:"systemd" help:"What each machine boots: systemd (the node's systemd tree laid over the image), cloudinit (the stock image with the node's NoCloud seed, as a network-booted machine) or ignition (Flatcar and Fedora CoreOS nodes: Ignition's own stages fetch the node's config and artifacts from up's Matchbox at boot.matchboxURL on the first boot)."`
	Work     string        `help:"Work directory: the trees, the machines' disks and consoles, the journal kcompile down reads. Default /var/lib/kcompile/up/<cluster name>." placeholder:"DIR"`
	Binaries string        `help:"Directory holding the binaries the install unit checks, by name (kubelet, etcd, containerd, runc, bridge...); up puts each where the install unit expects it, or with --target ignition serves each artifact of the spec under Matchbox's assets by its URL's last segment, and runs its ignition program in each machine. scripts/tools builds one in .bin/node." placeholder:"DIR"`
	Images   string        `help:"Directory of the programs the cluster's images are packed from; scripts/tools builds one in .bin/images." placeholder:"DIR"`
	Image    string        `help:"Root file system every machine boots (Debian with systemd); default: one built once with debootstrap and cached." placeholder:"ROOTFS"`
	Cache    string        `default:"/var/cache/kcompile" help:"Where the debootstrapped image is cached."`
	Timeout  time.Duration `default:"10m" help:"How long the boot may take, until the addons run."`
	Egress   bool          `help:"Give the nodes IPv4 egress: NAT to the host's uplink through an nftables table of up's own (inet kc<id>-egress), removed by down. up changes no host-wide setting: the uplink must forward already (sysctl net.ipv4.conf.<uplink>.forwarding=1)."`
	Uplink   string        `help:"The device --egress sends the nodes' traffic out of; default: the device of the host's IPv4 default route." placeholder:"DEV"`
	Detach   bool          `help:"Go on in the background once the cluster is up: up's process (the lock, the registry, the endpoint, the control socket) leaves the terminal, in a session of its own, and logs to WORK/control/up.log; kcompile node drives it and kcompile down stops it. Until the cluster is up, up's output and an interrupt are as without it."`
	Recover  bool          `help:"When an earlier up of the work directory ended without stopping its cluster (killed, or its terminal closed), remove what it left first; without it up names what it found and stops."`
}

// downCmd stops a cluster kcompile up booted.
type downCmd struct {
	Dir  string `arg:"" optional:"" default:"." help:"Spec directory (for the cluster name, when --work is not given)."`
	Work string `help:"Work directory of the kcompile up to stop." placeholder:"DIR"`
}

func (c *upCmd) Run(e *env) error {
	if c.Detach && !detach.Child() {
		return c.detach(e)
	}
	if detach.Child() {
		// Its parent may be gone before it is ready: output is then
		// lost, not fatal.
		signal.Ignore(syscall.SIGPIPE)
	}
	targets := []pipeline.Target{pipeline.Systemd}
	if t := pipeline.Target(c.Target); t != pipeline.Systemd {
		targets = append(targets, t)
	}
	out, err := c.run(e, targets...)
	if err != nil {
		return err
	}
	// What kcompile apply plans from: the spec as data.
	data, diags := compiler.Concrete(compiler.Source{Dir: c.Dir, Bound: e.bound})
	if diags.HasErrors() {
		return printDiagnostics(e, diags, "the spec does not evaluate to data")
	}
	spec, err := compiler.StateText(data)
	if err != nil {
		return err
	}
	secrets, err := out.Material.Bundle.Marshal()
	if err != nil {
		return err
	}
	work := c.Work
	if work == "" {
		work = nspawn.DefaultWork(out.Cluster.Name)
	}
	if work, err = filepath.Abs(work); err != nil {
		return err
	}
	// A closed terminal (SIGHUP) or SIGQUIT stops the cluster as Ctrl-C
	// does: nothing keeps running without the process that serves its
	// images and endpoint.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer stop()
	// From here up tells each step on stderr itself, a line each.
	e.progress.pause()
	cluster, err := nspawn.Up(ctx, nspawn.Config{
		Cluster:   out.Cluster,
		Systemd:   out.Trees[pipeline.Systemd],
		CloudInit: out.Trees[pipeline.CloudInit],
		Ignition:  out.Trees[pipeline.Ignition],
		Target:    pipeline.Target(c.Target),
		Work:      work,
		Image:     c.Image,
		Cache:     c.Cache,
		Binaries:  c.Binaries,
		Images:    c.Images,
		Version:   version(),
		Log:       e.stderr,
		Now:       time.Now,
		Timeout:   c.Timeout,
		Recover:   c.Recover,
		Egress:    c.Egress,
		Uplink:    c.Uplink,
		Spec:      spec,
		Issued:    e.now,
		Secrets:   secrets,
		Bound:     e.bound,
	})
	if err != nil {
		return statusError{code: exitProblems, msg: err.Error()}
	}
	if detach.Child() {
		log := filepath.Join(work, "control", "up.log")
		fmt.Fprintf(e.stdout, "cluster %s is up (%s) in %s; kubeconfig: %s\nit runs in the background (pid %d, log %s); `kcompile node status --work %s` shows its nodes; `kcompile down --work %s` stops it.\n",
			out.Cluster.Name, plural(len(out.Cluster.Nodes), "node"), e.progress.took(), cluster.Kubeconfig(), os.Getpid(), log, work, work)
		if err := detach.Ready(log); err != nil {
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			return errors.Join(fmt.Errorf("going on in the background: %w", err), cluster.Down(dctx))
		}
	} else {
		fmt.Fprintf(e.stdout, "cluster %s is up (%s) in %s; kubeconfig: %s\n`kcompile node status --work %s` shows its nodes; Ctrl-C or `kcompile down --work %s` stops it.\n",
			out.Cluster.Name, plural(len(out.Cluster.Nodes), "node"), e.progress.took(), cluster.Kubeconfig(), work, work)
	}
	werr := cluster.Wait(ctx)
	stop()
	dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cluster.Down(dctx); err != nil {
		return err
	}
	if werr != nil {
		return statusError{code: exitProblems, msg: werr.Error()}
	}
	return nil
}

// detach runs this very command again as a background process and
// returns once its cluster is up, or with its exit status when it fails.
func (c *upCmd) detach(e *env) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer stop()
	e.progress.pause()
	if _, err := detach.Start(ctx, exe, os.Args, os.Environ(), e.stdout, e.stderr); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() > 0 {
			// The child said why.
			return statusError{code: exit.ExitCode()}
		}
		return err
	}
	return nil
}

func (c *downCmd) Run(e *env) error {
	work, err := upWorkDir(e, c.Dir, c.Work)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := nspawn.Down(ctx, work, e.stderr); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return statusError{code: exitProblems, msg: err.Error()}
		}
		return err
	}
	fmt.Fprintf(e.stdout, "stopped; %s removed\n", work)
	return nil
}
