package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/runtimes/nspawn"
)

// upCmd boots the compiled cluster, one systemd-nspawn machine per node.
type upCmd struct {
	specAndSecrets
	Target   string        `enum:"${up_targets}" default:"systemd" help:"What each machine boots: systemd (the node's systemd tree laid over the image) or cloudinit (the stock image with the node's NoCloud seed, as a network-booted machine)."`
	Work     string        `help:"Work directory: the trees, the machines' disks and consoles, the journal kcompile down reads. Default /var/lib/kcompile/up/<cluster name>." placeholder:"DIR"`
	Binaries string        `help:"Directory holding the binaries the install unit checks, by name (kubelet, etcd, containerd, runc, bridge...); up puts each where the install unit expects it. scripts/tools builds one in .bin/node." placeholder:"DIR"`
	Images   string        `help:"Directory of the programs the cluster's images are packed from; scripts/tools builds one in .bin/images." placeholder:"DIR"`
	Image    string        `help:"Root file system every machine boots (Debian with systemd); default: one built once with debootstrap and cached." placeholder:"ROOTFS"`
	Cache    string        `default:"/var/cache/kcompile" help:"Where the debootstrapped image is cached."`
	Timeout  time.Duration `default:"10m" help:"How long the boot may take, until the addons run."`
	Recover  bool          `help:"When an earlier up of the work directory ended without stopping its cluster (killed, or its terminal closed), remove what it left first; without it up names what it found and stops."`
}

// downCmd stops a cluster kcompile up booted.
type downCmd struct {
	Dir  string `arg:"" optional:"" default:"." help:"Spec directory (for the cluster name, when --work is not given)."`
	Work string `help:"Work directory of the kcompile up to stop." placeholder:"DIR"`
}

func (c *upCmd) Run(e *env) error {
	targets := []pipeline.Target{pipeline.Systemd}
	if pipeline.Target(c.Target) == pipeline.CloudInit {
		targets = append(targets, pipeline.CloudInit)
	}
	out, err := c.run(e, targets...)
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
	})
	if err != nil {
		return statusError{code: exitProblems, msg: err.Error()}
	}
	fmt.Fprintf(e.stdout, "cluster %s is up (%s) in %s; kubeconfig: %s\n`kcompile node status --work %s` shows its nodes; Ctrl-C or `kcompile down --work %s` stops it.\n",
		out.Cluster.Name, plural(len(out.Cluster.Nodes), "node"), e.progress.took(), cluster.Kubeconfig(), work, work)
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
