package nspawn

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/restore"
	"github.com/kcompile/kcompile/targets"
)

// RestoreConfig is one kcompile restore of a running cluster: the
// machines of up, or hosts over SSH.
type RestoreConfig struct {
	Running *Running
	// Cluster and Tree are the running cluster's, built from its
	// recorded spec and bundle.
	Cluster *ir.Cluster
	Tree    *targets.Tree
	// Snapshot is the snapshot, inspected and matched to the cluster.
	Snapshot *restore.Snapshot
	// Binaries is a directory with etcdutl, laid on a member that has
	// none (the spec installs it with etcd.backup).
	Binaries string
	SSH      *SSH
	// GateTimeout bounds each gate (default 5m).
	GateTimeout time.Duration
	Log         io.Writer
	Now         func() time.Time
}

// Restored is what a restore did.
type Restored struct {
	Plan *restore.Plan
	// Took is the time from the first step to every node Ready.
	Took time.Duration
}

// Restore brings the running cluster back to the snapshot: it checks
// first that it reaches every node and that every member has etcdutl
// (or lays it from Binaries), then takes the steps of restore.Steps,
// waiting on each one's gate. A failure stops it with the step named;
// every member's data before the restore is kept (restore.Plan.Aside).
func Restore(ctx context.Context, cfg RestoreConfig) (*Restored, error) {
	if cfg.GateTimeout == 0 {
		cfg.GateTimeout = 5 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := newApplier(ApplyConfig{Running: cfg.Running, Old: cfg.Cluster, OldTree: cfg.Tree, SSH: cfg.SSH, GateTimeout: cfg.GateTimeout, Log: cfg.Log, Now: cfg.Now})
	defer a.closeAll()
	if err := a.connect(ctx); err != nil {
		return nil, err
	}
	c := cfg.Cluster
	began := cfg.Now()
	opts := restore.Options{Stamp: began.UTC().Format("20060102T150405Z"), Etcdutl: map[string]string{}}
	for _, m := range c.Etcd.Members {
		at, err := a.node(ctx, m.Node)
		if err != nil {
			return nil, err
		}
		have, err := at.exists(ctx, restore.Etcdutl(c, m))
		if err != nil {
			return nil, err
		}
		if have {
			continue
		}
		if cfg.Binaries == "" {
			return nil, fmt.Errorf("etcd member %s has no etcdutl (the spec installs it with etcd.backup): give --binaries DIR with etcdutl of etcd %s, which the restore lays for its run; nothing was stopped", m.Name, c.Etcd.Version)
		}
		if _, err := os.Stat(filepath.Join(cfg.Binaries, "etcdutl")); err != nil {
			return nil, fmt.Errorf("--binaries: %v; nothing was stopped", err)
		}
		opts.Etcdutl[m.Node] = layout.Abs(layout.RestoreEtcdutl)
	}
	p := restore.Steps(c, cfg.Snapshot, opts)
	if err := p.WriteText(cfg.Log); err != nil {
		return nil, err
	}
	var since time.Time
	for _, st := range p.Steps {
		a.log("step %d/%d: %s", st.N, len(p.Steps), st.Kind)
		stepBegan := cfg.Now()
		if st.Kind == restore.StartControlPlane {
			since = stepBegan
		}
		for _, cmd := range st.Commands {
			if err := a.restoreCommand(ctx, cmd, cfg, opts); err != nil {
				return nil, fmt.Errorf("step %d (%s) stopped on %s: %w; the members' data before the restore is at %s on each", st.N, st.Kind, cmd.Node, err, p.Aside)
			}
		}
		if err := a.restoreGate(ctx, st.Kind, c, since); err != nil {
			return nil, fmt.Errorf("step %d (%s) stopped: %w; the members' data before the restore is at %s on each", st.N, st.Kind, err, p.Aside)
		}
		a.log("step %d/%d done in %s", st.N, len(p.Steps), cfg.Now().Sub(stepBegan).Round(100*time.Millisecond))
	}
	return &Restored{Plan: p, Took: cfg.Now().Sub(began)}, nil
}

// restoreCommand does one node's part of a step.
func (a *applier) restoreCommand(ctx context.Context, cmd restore.Command, cfg RestoreConfig, opts restore.Options) error {
	at, err := a.node(ctx, cmd.Node)
	if err != nil {
		return err
	}
	if cmd.Copy != "" {
		if out, err := at.run(ctx, "install", "-d", "-m", "0700", layout.Abs(layout.RestoreDir)); err != nil {
			return fmt.Errorf("%v %s", err, out)
		}
		if err := at.install(ctx, cfg.Snapshot.Path, cmd.Copy); err != nil {
			return err
		}
		if out, err := at.run(ctx, "chmod", "0600", cmd.Copy); err != nil {
			return fmt.Errorf("%v %s", err, out)
		}
		if u, ok := opts.Etcdutl[cmd.Node]; ok {
			if err := at.install(ctx, filepath.Join(cfg.Binaries, "etcdutl"), u); err != nil {
				return err
			}
		}
		a.log("  %s: snapshot laid at %s", cmd.Node, cmd.Copy)
		return nil
	}
	for _, argv := range cmd.Argv {
		if out, err := at.run(ctx, argv...); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// restoreGate waits on what a step of kind k must leave.
func (a *applier) restoreGate(ctx context.Context, k restore.Kind, c *ir.Cluster, since time.Time) error {
	switch k {
	case restore.StartEtcd:
		for _, m := range c.Etcd.Members {
			if err := a.await(ctx, "etcd member "+m.Name+" healthy", func() (bool, string) {
				return a.etcd.healthy(ctx, m.ClientURL()), "not healthy"
			}); err != nil {
				return err
			}
		}
		return a.await(ctx, "etcd's members the spec's", func() (bool, string) {
			list, err := a.etcd.members(ctx, c.Etcd.Members[0].ClientURL())
			if err != nil {
				return false, err.Error()
			}
			var have, want []string
			for _, m := range list {
				have = append(have, m.Name+"="+strings.Join(m.PeerURLs, ","))
			}
			for _, m := range c.Etcd.Members {
				want = append(want, m.Name+"="+m.PeerURL())
			}
			slices.Sort(have)
			slices.Sort(want)
			return slices.Equal(have, want), "members " + strings.Join(have, " ")
		})
	case restore.StartControlPlane:
		for _, n := range c.Nodes {
			if !n.Runs(ir.ComponentAPIServer) {
				continue
			}
			k := a.kube.at(c.APIServerURL(n))
			if err := a.await(ctx, "kube-apiserver of "+n.Name+" ready", func() (bool, string) {
				return k.ready(ctx), "/readyz does not answer ok"
			}); err != nil {
				return err
			}
		}
	case restore.NodesReady:
		// The restored Nodes say what they said at the snapshot: a
		// lease renewed since the API servers came back is the kubelet's
		// word of now.
		for _, n := range c.Nodes {
			if !n.RunsPods() {
				continue
			}
			if err := a.renewedReady(ctx, n.Name, since, "its lease renewed since the restore", "lease not renewed since the restore"); err != nil {
				return err
			}
		}
	}
	return nil
}
