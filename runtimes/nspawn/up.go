// Package nspawn boots a compiled cluster for real: every node a
// systemd-nspawn machine whose root is a stock Debian image overlaid with
// the node's systemd tree (or seeded with its cloud-init), real systemd as
// PID 1, one network namespace per node on a host bridge, the images the
// cluster needs served by a registry of its own. What the host needs that
// the tree does not say is an Adjustment, printed, never hidden in the
// tree; everything made on the host is journalled under the work
// directory so that Down removes it, also after a crash.
package nspawn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/writer"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/ignition"
	"github.com/kcompile/kcompile/targets/systemd"
)

// Targets are what a machine can boot from: pipeline.Systemd lays the
// node's systemd tree over the image; pipeline.CloudInit boots the stock
// image with the node's NoCloud seed, and pipeline.Ignition with
// Ignition's stages fetching the node's config from up's Matchbox, as a
// network-booted machine would.
func Targets() []pipeline.Target {
	return []pipeline.Target{pipeline.Systemd, pipeline.CloudInit, pipeline.Ignition}
}

// DefaultWork is the work directory of the cluster named name when the
// user names none: under /var/lib, as systemd-nspawn keeps its machines,
// and one per cluster, so that down finds it from the spec alone.
func DefaultWork(name string) string { return filepath.Join("/var/lib/kcompile/up", name) }

// Config is one `kcompile up`.
type Config struct {
	Cluster *ir.Cluster
	// Systemd is the systemd tree; CloudInit the cloud-init tree, for
	// pipeline.CloudInit; Ignition the Ignition tree, for
	// pipeline.Ignition.
	Systemd, CloudInit, Ignition *targets.Tree
	Target                       pipeline.Target
	// Work is the work directory (absolute): the trees, the machines'
	// layers and logs, the journal.
	Work string
	// Image is a root file system to boot; empty, the Debian image
	// cached under Cache (built once with debootstrap).
	Image, Cache string
	// Binaries holds the nodes' binaries by name (kubelet, etcd, runc,
	// bridge...); up lays them out where the install unit expects them,
	// in a layer between the tree and the image. For pipeline.Ignition
	// it serves them as Matchbox's assets instead, and it holds
	// Ignition's program (IgnitionProgram).
	Binaries string
	// Registry serves the images the cluster pulls. When it is nil, Up
	// plans one from the programs in Images (NewRegistry), refusing a
	// cluster whose images cannot all be built here.
	Registry Registry
	Images   string
	// Version is kcompile's, recorded in the trees' manifests.
	Version string
	// Log receives progress, one line per step.
	Log io.Writer
	// Now is the clock progress is timed with.
	Now func() time.Time
	// Timeout bounds the whole boot, until the addons are ready.
	Timeout time.Duration
	// Recover removes what an earlier up of the work directory left
	// when it ended without stopping the cluster (killed, or its
	// terminal closed), then boots; without it such leftovers are named
	// and nothing is done.
	Recover bool
	// Resolve looks up an endpoint given by name; nil: the host's
	// resolver.
	Resolve Resolver
	// Egress gives the nodes NAT to the host's uplink: Uplink, or the
	// device of the host's default route.
	Egress bool
	Uplink string
	// Spec is the cluster's spec as data (compiler.StateText of
	// compiler.Concrete), and Issued the clock its certificates were
	// issued at: recorded in the work directory for kcompile apply
	// (nil: not recorded).
	Spec   []byte
	Issued time.Time
	// Secrets is the bundle the trees were built with (pki.Bundle's
	// Marshal), recorded beside the spec (BundleFile); nil: not recorded.
	Secrets []byte
	// Bound bounds the evaluation of a state kcompile apply sends (the
	// states of the machines it adds and removes), as the command line
	// bounds the spec's; nil: unbounded.
	Bound func(eval func()) error
}

// Registry is the image registry up serves to the machines.
type Registry interface {
	// Serve listens on addr until ctx ends; it returns once listening.
	Serve(ctx context.Context, addr netip.AddrPort) error
	// Registries are the registry hosts the cluster's images name.
	Registries() []string
	// Refs are the references of the images it serves.
	Refs() []string
}

// Cluster is a booted cluster.
type Cluster struct {
	cfg    Config
	p      *plan
	adjust *adjustments
	j      *journal
	// jmu guards the journal, written by the supervisors too.
	jmu sync.Mutex
	// logMu keeps lines of the log whole: the supervisors, the
	// registry's and the control socket's goroutines log too.
	logMu  sync.Mutex
	events chan *machine
	start  time.Time
	ctx    context.Context
	cancel context.CancelFunc
	bal    *balancer
	image  string
	// binaries is the overlay layer of --binaries.
	binaries string
	mirror   netip.AddrPort
	// lock is the work directory's, held until Down; lock.created says
	// the work directory is up's to remove.
	lock *workLock
	// control answers `kcompile node` once the cluster is up.
	control *http.Server
	// downed says Down ran.
	downed bool
	// phases are when each step of the boot ended.
	phases []Phase
	// kube is the API client of the cluster's super-admin.conf.
	kube *kube
	// served says when the registry's images were built and served.
	served chan served
	// mmu guards the machines (p.machines), live and downed once the
	// cluster runs: kcompile apply adds and removes machines (changing
	// orders those) while the control socket and Down read them.
	mmu, changing sync.Mutex
	// live is the cluster as its machines now are: the booted one, or
	// the state of the last machine apply added or removed.
	live *ir.Cluster
	// matchbox serves the Ignition target's configs and artifacts.
	matchbox *matchbox
}

// served is the end of the registry's start.
type served struct {
	err error
	at  time.Time
}

// Phase is a step of the boot and when it ended, after up started.
type Phase struct {
	Name  string
	Ended time.Duration
}

// Phases are the boot's steps in order: the base image ready, the
// network made and the images served, the machines started, etcd's
// quorum, the API ready, the addons applied, every node Ready (kubelet
// and CNI), every addon running.
func (c *Cluster) Phases() []Phase { return slices.Clone(c.phases) }

func (c *Cluster) phase(name string) { c.phaseAt(name, c.cfg.Now()) }

// phaseAt records a phase that ended at t, in order of the ends: the
// registry's, built beside the machines, is known only later.
func (c *Cluster) phaseAt(name string, t time.Time) {
	p := Phase{Name: name, Ended: t.Sub(c.start)}
	i := len(c.phases)
	for i > 0 && c.phases[i-1].Ended > p.Ended {
		i--
	}
	c.phases = slices.Insert(c.phases, i, p)
}

// Adjustments are what up applied beyond the compiled tree.
func (c *Cluster) Adjustments() []Adjustment { return slices.Clone(c.adjust.list) }

// Kubeconfig is the admin kubeconfig's path.
func (c *Cluster) Kubeconfig() string {
	return filepath.Join(c.cfg.Work, "tree", layout.ClusterTree("admin.conf"))
}

func (c *Cluster) logf(format string, args ...any) {
	if c.cfg.Log == nil {
		return
	}
	d := c.cfg.Now().Sub(c.start).Round(100 * time.Millisecond)
	line := fmt.Sprintf("[%6.1fs] %s\n", d.Seconds(), fmt.Sprintf(format, args...))
	c.logMu.Lock()
	defer c.logMu.Unlock()
	_, _ = io.WriteString(c.cfg.Log, line)
}

// Why up cannot boot calico (found on 2026-12-02; README, "kcompile
// up"): up serves only images it builds from the Go module proxy.
const calicoRefusal = "the Go module proxy serves no release of github.com/projectcalico/calico (its v3 tags are no versions of that module path; v3.30.3 answers 403), and its only pseudo-version imports github.com/projectcalico/api, which its go.mod replaces with ./api, a nested module that is in no module zip and that the proxy does not serve, so calico-node and the calico CNI plugin cannot be built here"

// Resolver looks a host name up as the host does (/etc/hosts, DNS).
type Resolver func(ctx context.Context, host string) ([]netip.Addr, error)

// check says why a cluster cannot be booted on the host h, before
// anything is made (what it says is all there is to fix), with names
// resolved by resolve (nil: the host's resolver). It returns the address
// a named endpoint resolves to, which the machines are given in their
// /etc/hosts.
func check(ctx context.Context, c *ir.Cluster, target pipeline.Target, h hostFacts, resolve Resolver) (why []string, endpoint netip.Addr) {
	switch c.Network.CNI.Plugin {
	case "flannel":
		if c.Network.CNI.Mode == "wireguard" {
			why = append(why, "network.cni.mode wireguard: this host's kernel cannot make wireguard devices inside a namespace; use vxlan or host-gw")
		}
	case "calico":
		why = append(why, "network.cni.plugin calico: "+calicoRefusal+"; up boots flannel clusters (vxlan or host-gw)")
	case "cilium":
	default:
		why = append(why, fmt.Sprintf("network.cni.plugin %s: up boots flannel and cilium clusters", c.Network.CNI.Plugin))
	}
	if dev := tunnelModule(c.Network.CNI); dev != "" {
		if _, lack := h.kernel.split([]string{dev}); len(lack) > 0 {
			why = append(why, fmt.Sprintf("network.cni.mode %s: %s's tunnel is a %s device, which this host's kernel %s has neither built in nor loaded (%s), and a machine cannot load modules; choose another mode, or boot on a host whose kernel has it",
				c.Network.CNI.Mode, c.Network.CNI.Plugin, dev, h.kernel.release, h.kernel.state(lack)))
		}
	}
	if c.Runtime.Engine != "containerd" {
		why = append(why, fmt.Sprintf("runtime.engine %s: up boots containerd nodes only", c.Runtime.Engine))
	}
	for _, n := range c.Nodes {
		if n.OS.Ignition() && target != pipeline.Ignition {
			why = append(why, fmt.Sprintf("%s: node %s runs %s, which boots from its Ignition config: boot the cluster with --target ignition", n.OSPath, n.Name, n.OS.Name()))
			break
		}
	}
	if e := c.Endpoint; e.Host != "" && !e.Address.IsValid() {
		var err error
		if endpoint, err = resolveEndpoint(ctx, c, resolve); err != nil {
			why = append(why, err.Error())
		}
	}
	why = append(why, h.kernel.why(c)...)
	why = append(why, h.conntrack.why(c)...)
	for _, tool := range []string{"systemd-nspawn", "ip", "unshare", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			why = append(why, tool+" is not installed (Debian: systemd-container, iproute2, util-linux)")
		}
	}
	if os.Geteuid() != 0 {
		why = append(why, "up makes network namespaces, devices and machines: run it as root")
	}
	return why, endpoint
}

// resolveEndpoint is the address an endpoint given by name resolves to
// on this host, which must lie on a node network: the machines resolve
// no names (nothing serves DNS on up's bridge), so up writes the answer
// into their /etc/hosts, and serves the endpoint there unless the nodes
// hold it (mode vip).
func resolveEndpoint(ctx context.Context, c *ir.Cluster, resolve Resolver) (netip.Addr, error) {
	host := c.Endpoint.Host
	if resolve == nil {
		resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := resolve(ctx, host)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("controlPlane.endpoint.host %q does not resolve on this host (%v), and up's machines resolve only what up tells them; map it to an address on a node network (%s) in the host's /etc/hosts, or give controlPlane.endpoint.address", host, err, ir.Join(c.Network.NodeNetworks, ", "))
	}
	for _, a := range addrs {
		a = a.Unmap()
		if _, ok := networkOf(c, a); ok {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("controlPlane.endpoint.host %q resolves on this host to %s, on no node network (%s): up's machines could not reach it; map the name to an address on a node network in the host's /etc/hosts, or give controlPlane.endpoint.address", host, ir.Join(addrs, ", "), ir.Join(c.Network.NodeNetworks, ", "))
}

// Up boots the cluster and returns when every node is Ready and the
// addons are running; on failure everything made is removed again.
func Up(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	h, err := readHostFacts()
	if err != nil {
		return nil, fmt.Errorf("reading the host: %w", err)
	}
	why, named := check(ctx, cfg.Cluster, cfg.Target, h, cfg.Resolve)
	var mb *matchbox
	if cfg.Target == pipeline.Ignition {
		if cfg.Ignition == nil {
			return nil, errors.New("kcompile bug: the Ignition target without its tree")
		}
		var more []string
		mb, more = planMatchbox(cfg.Cluster, cfg.Ignition, cfg.Binaries)
		why = append(why, more...)
	}
	if len(why) > 0 {
		return nil, fmt.Errorf("this cluster cannot be booted here; nothing was started:\n  %s", strings.Join(why, "\n  "))
	}
	if cfg.Registry == nil {
		if cfg.Images == "" {
			return nil, errors.New("--images DIR is needed: the machines reach no registry, and up serves the images packed from the programs in DIR (scripts/tools builds .bin/images)")
		}
		reg, problems, err := NewRegistry(cfg.Cluster, cfg.Images, nil)
		if err != nil {
			return nil, err
		}
		if len(problems) > 0 {
			msg := "these images of the cluster cannot be built here; nothing was started:"
			for _, p := range problems {
				msg += "\n  " + p.Error()
			}
			return nil, errors.New(msg)
		}
		cfg.Registry = reg
	}
	if err := workPathOK(cfg.Work); err != nil {
		return nil, err
	}
	// The lock first: every check below sees the host as no other up of
	// this work directory is changing it.
	lock, err := lockWork(cfg.Work)
	if err != nil {
		return nil, err
	}
	handedOver := false
	defer func() {
		if !handedOver {
			lock.release(true)
		}
	}()
	if err := takeOver(ctx, cfg, lock); err != nil {
		return nil, err
	}
	p, err := newPlan(cfg.Cluster, cfg.Work)
	if err != nil {
		return nil, err
	}
	if linkExists(p.bridge) {
		return nil, fmt.Errorf("the host already has a device %s: another kcompile up with work directory %s runs; kcompile down --work %s stops it", p.bridge, cfg.Work, cfg.Work)
	}
	if cfg.Target == pipeline.CloudInit && cfg.CloudInit == nil {
		return nil, errors.New("kcompile bug: the cloud-init target without its tree")
	}
	if named.IsValid() {
		if err := p.named(cfg.Cluster, named); err != nil {
			return nil, err
		}
	}
	if cfg.Egress {
		var why []string
		if p.egress, why = planEgress(ctx, cfg.Cluster, p, cfg.Uplink); len(why) > 0 {
			return nil, fmt.Errorf("the host is not ready for this cluster; nothing was made:\n  %s", strings.Join(why, "\n  "))
		}
	}
	c := &Cluster{cfg: cfg, p: p, events: make(chan *machine, len(p.machines)), start: cfg.Now(), lock: lock, live: cfg.Cluster, matchbox: mb}
	mirror, mirrorAdjust, err := c.mirrorAddress()
	if err != nil {
		return nil, err
	}
	c.mirror = mirror
	c.adjust, err = decide(cfg.Cluster, p, h, cfg.Target, mirrorAdjust)
	if err != nil {
		return nil, err
	}
	if err := c.preflight(ctx, preflight{}); err != nil {
		return nil, err
	}
	if err := c.claimWork(); err != nil {
		return nil, err
	}
	if err := c.recordSpec(); err != nil {
		return nil, err
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	handedOver = true
	defer func() {
		if err != nil {
			c.logf("boot failed; removing what up made")
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if derr := c.Down(dctx); derr != nil {
				err = fmt.Errorf("%w; cleaning up also failed: %v", err, derr)
			}
		}
	}()
	for _, a := range c.adjust.list {
		c.logf("adjustment: %s", a)
	}
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	if err := c.prepare(ctx); err != nil {
		return nil, err
	}
	if err := c.bootAll(); err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	if err := c.serveControl(); err != nil {
		return nil, err
	}
	return c, nil
}

// preflight reads the host before anything is made: errors stop up
// with every one of them named, warnings are said.
func (c *Cluster) preflight(ctx context.Context, h preflight) error {
	var listen []service
	if c.mirror.IsValid() {
		listen = append(listen, service{at: c.mirror, what: "its image registry", setByPath: "runtime.mirrors"})
	}
	if c.p.endpoint.IsValid() {
		listen = append(listen, service{at: c.p.endpoint, what: "the API endpoint", setByPath: "controlPlane.endpoint"})
	}
	if c.matchbox != nil {
		listen = append(listen, service{at: c.matchbox.addr, what: "Matchbox (the nodes' Ignition configs and artifacts)", setByPath: "boot.matchboxURL"})
	}
	f, err := h.check(ctx, c.cfg.Cluster.Network.NodeNetworks, listen)
	if err != nil {
		return fmt.Errorf("reading the host: %w", err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(c.cfg.Work, &st); err != nil {
		return fmt.Errorf("reading the host: %w", err)
	}
	switch warn, refuse := diskWhy(st.Bavail*uint64(st.Bsize), st.Blocks*uint64(st.Bsize), c.cfg.Work); {
	case refuse != "":
		f.errors = append(f.errors, refuse)
	case warn != "":
		f.warnings = append(f.warnings, warn)
	}
	if limit := readInotifyLimit(); limit > 0 {
		if why := inotifyWhy(limit, inotifyInUse(), len(c.p.machines)); why != "" {
			f.errors = append(f.errors, why)
		}
	}
	for _, w := range f.warnings {
		c.logf("warning: %s", w)
	}
	if len(f.errors) > 0 {
		return fmt.Errorf("the host is not ready for this cluster; nothing was made:\n  %s", strings.Join(f.errors, "\n  "))
	}
	return nil
}

// The kubelet's default hard eviction thresholds on the disks of its
// images and of its pods: a node whose disk has less free evicts pods.
const (
	imagefsAvailable = 15
	nodefsAvailable  = 10
)

// diskWhy judges the file system of the work directory dir, free bytes
// of total: every machine's disks are on it (their roots' upper layers
// and containerd's directories), so the kubelets judge it by their
// eviction thresholds. Below the image threshold up refuses (the pods
// would be evicted at once); within 5 points of it, it warns.
func diskWhy(free, total uint64, dir string) (warn, refuse string) {
	if total == 0 {
		return "", ""
	}
	share := float64(free) * 100 / float64(total)
	what := fmt.Sprintf("the machines' disks are on the file system of %s, which has %.1f%% free (%.1f GiB of %.1f GiB): the kubelets evict pods once it has under %d%% (their imagefs.available threshold; nodefs.available is %d%%)",
		dir, share, float64(free)/(1<<30), float64(total)/(1<<30), imagefsAvailable, nodefsAvailable)
	switch {
	case share < imagefsAvailable:
		return "", what + ", so every pod would be evicted: free space on it, or choose a --work on another file system"
	case share < imagefsAvailable+5:
		return what + ", and the cluster's images and pods take it nearer: free space on it if pods are evicted with DiskPressure", ""
	}
	return "", ""
}

// takeOver deals with the journal an earlier up of the work directory
// left: its owner is gone, since this run holds the lock. With
// cfg.Recover what it left is removed; otherwise it is named and
// nothing is done.
func takeOver(ctx context.Context, cfg Config, lock *workLock) error {
	prev, err := ReadState(cfg.Work)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	left := prev.leftovers(cfg.Work)
	if !cfg.Recover {
		what := "its journal"
		if len(left) > 0 {
			what = strings.Join(left, "; ")
		}
		return fmt.Errorf("the kcompile up (pid %d) of cluster %s in %s ended without stopping it (killed, or its terminal closed); it left %s.\n`kcompile up --recover` removes that and boots again; `kcompile down --work %s` only removes it",
			prev.Owner.PID, prev.Cluster, cfg.Work, what, cfg.Work)
	}
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, "the kcompile up (pid %d) of cluster %s in %s ended without stopping it; removing what it left (%s)\n", prev.Owner.PID, prev.Cluster, cfg.Work, strings.Join(left, "; "))
	}
	own, err := undo(ctx, &journal{path: filepath.Join(cfg.Work, StateName), state: *prev}, cfg.Log)
	if err != nil {
		return err
	}
	// The work directory the earlier run made is this run's to remove.
	lock.created = lock.created || own
	return nil
}

// claimWork makes the work directory up's, or refuses one that holds
// what up did not make.
func (c *Cluster) claimWork() error {
	work := c.cfg.Work
	c.j = &journal{path: filepath.Join(work, StateName), state: State{Cluster: c.cfg.Cluster.Name}}
	entries, err := os.ReadDir(work)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() != LockName {
			return fmt.Errorf("work directory %s holds files kcompile up did not make: empty it or choose another with --work", work)
		}
	}
	self := os.Getpid()
	c.j.state.Owner = Resource{Kind: KindProcess, Name: "kcompile up", PID: self, Start: processStart(self)}
	c.j.state.Kubeconfig = c.Kubeconfig()
	if c.lock.created {
		if err := c.j.record(Resource{Kind: KindDir, Name: work}); err != nil {
			return err
		}
	}
	return c.j.save()
}

// mkdir makes a directory of up's under the work directory, each
// missing directory on the way journalled before it is made, so that
// down leaves no empty parent behind in a work directory up did not
// make.
func (c *Cluster) mkdir(dir string) error {
	var missing []string
	for d := dir; d != c.cfg.Work && d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := c.j.record(Resource{Kind: KindDir, Name: missing[i]}); err != nil {
			return err
		}
		if err := os.Mkdir(missing[i], 0o700); err != nil {
			return err
		}
	}
	return nil
}

// prepare writes the trees, finds the image, lays out each machine and
// the network, and starts the registry and the endpoint.
func (c *Cluster) prepare(ctx context.Context) error {
	cfg := c.cfg
	if err := c.writeTrees(); err != nil {
		return err
	}
	c.image = cfg.Image
	if c.image == "" {
		var err error
		c.image, err = ensureImage(ctx, cfg.Cache, cfg.Now(), cfg.Log, c.logf)
		if err != nil {
			return err
		}
	}
	c.phase("image")
	if _, err := os.Stat(filepath.Join(c.image, layout.SystemdInit)); err != nil {
		return fmt.Errorf("image %s has no %s: it is not a systemd root file system", c.image, layout.Abs(layout.SystemdInit))
	}
	binaries, err := c.binariesLayer()
	if err != nil {
		return err
	}
	c.binaries = binaries
	if err := c.bridge(); err != nil {
		return err
	}
	if c.matchbox != nil {
		if err := c.matchbox.serve(c.ctx); err != nil {
			return fmt.Errorf("serving Matchbox on %s: %v", c.matchbox.addr, err)
		}
		c.logf("Matchbox serving on %s: %d Ignition configs, %d assets", c.matchbox.addr, len(c.matchbox.configs), len(c.matchbox.assets))
	}
	if c.p.egress != nil {
		if err := c.startEgress(); err != nil {
			return err
		}
	}
	if cfg.Registry != nil {
		// The images are built while the machines boot: nothing pulls
		// before the addons are applied, and waitReady waits for the
		// registry before it applies them. An interrupt while the images
		// are built ends the building; once they serve, only Down ends
		// them.
		c.served = make(chan served, 1)
		serving, stopServing := context.WithCancel(c.ctx)
		interrupted := context.AfterFunc(ctx, stopServing)
		go func() {
			err := cfg.Registry.Serve(serving, c.mirror)
			if !interrupted() && err == nil {
				err = fmt.Errorf("interrupted while the images were built: %w", ctx.Err())
			}
			if err != nil {
				err = fmt.Errorf("image registry on %s: %v", c.mirror, err)
			}
			c.served <- served{err: err, at: cfg.Now()}
		}()
	}
	if c.p.endpoint.IsValid() {
		var backends []netip.AddrPort
		for _, m := range c.p.machines {
			if m.node.Runs(ir.ComponentAPIServer) {
				backends = append(backends, netip.AddrPortFrom(m.node.Address(), uint16(cfg.Cluster.Endpoint.Port)))
			}
		}
		b, err := serveBalancer(c.p.endpoint, backends)
		if err != nil {
			return fmt.Errorf("API endpoint %s: %v", c.p.endpoint, err)
		}
		c.bal = b
	}
	for _, m := range c.p.machines {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted while the machines were laid out: %w", err)
		}
		if err := c.layout(cfg.Cluster, m); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// writeTrees writes the compiled trees into the work directory: a
// machine of the systemd target boots its node's tree as a layer.
func (c *Cluster) writeTrees() error {
	for name, tree := range map[string]*targets.Tree{"tree": c.cfg.Systemd, "cloudinit": c.cfg.CloudInit, "ignition": c.cfg.Ignition} {
		if tree == nil {
			continue
		}
		dir := filepath.Join(c.cfg.Work, name)
		if err := c.j.record(Resource{Kind: KindDir, Name: dir}); err != nil {
			return err
		}
		if _, err := writer.Write(dir, tree, writer.Options{Version: c.cfg.Version}); err != nil {
			return err
		}
	}
	return nil
}

// binariesLayer lays the binaries of --binaries (a directory holding
// them by name: kubelet, etcd, runc, bridge...) out at the paths the
// install unit checks, as an overlay layer under the work directory
// (hard links, or copies across file systems). A binary that neither it
// nor the image has is reported before anything boots: the install unit
// would fail the same way, later and inside a machine.
func (c *Cluster) binariesLayer() (string, error) {
	if c.cfg.Target == pipeline.Ignition {
		return c.ignitionLayer()
	}
	if c.cfg.Cluster.Install.Source == "download" && c.cfg.Binaries == "" {
		return "", nil
	}
	layer := filepath.Join(c.cfg.Work, "binaries")
	if err := c.mkdir(layer); err != nil {
		return "", err
	}
	return layer, c.layBinaries(layer, c.cfg.Binaries, c.cfg.Cluster.Nodes)
}

// ignitionLayer is the layer of the Ignition target's machines: only
// Ignition's program, which a distribution's initramfs carries. The
// binaries the nodes need come from their configs.
func (c *Cluster) ignitionLayer() (string, error) {
	src := filepath.Join(c.cfg.Binaries, IgnitionProgram)
	if c.cfg.Binaries == "" || !isExecutable(src) {
		return "", fmt.Errorf("up --target ignition runs Ignition's own program in each machine, as the distributions' initramfs does, and --binaries DIR holds no %s (scripts/tools builds .bin/node/%s)", IgnitionProgram, IgnitionProgram)
	}
	layer := filepath.Join(c.cfg.Work, "initramfs")
	if err := c.mkdir(layer); err != nil {
		return "", err
	}
	return layer, linkOrCopy(src, filepath.Join(layer, layout.UpIgnition))
}

// layBinaries lays the binaries nodes' install units check into layer,
// each taken by name from the directory from (when given) or left to
// the image.
func (c *Cluster) layBinaries(layer, from string, nodes []ir.Node) error {
	var missing []string
	seen := map[string]bool{}
	for _, n := range nodes {
		for _, b := range n.Binaries {
			if seen[b.Path] {
				continue
			}
			seen[b.Path] = true
			if b.OS {
				// The distribution's package, in the image.
				if !isExecutable(filepath.Join(c.image, b.Path)) {
					missing = append(missing, b.Path+" (a package of the image)")
				}
				continue
			}
			src := ""
			if from != "" {
				src = filepath.Join(from, filepath.Base(b.Path))
			}
			if isExecutable(src) {
				if err := linkOrCopy(src, filepath.Join(layer, b.Path)); err != nil {
					return err
				}
				continue
			}
			if c.cfg.Cluster.Install.Source != "download" && !isExecutable(filepath.Join(c.image, b.Path)) {
				missing = append(missing, b.Path)
			}
		}
	}
	if len(missing) > 0 {
		where := "--binaries DIR (binaries by name)"
		if from != "" {
			where = from
		}
		return fmt.Errorf("the nodes' install unit needs %s, which neither %s nor the image holds", strings.Join(missing, ", "), where)
	}
	return nil
}

func isExecutable(p string) bool {
	if p == "" {
		return false
	}
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// linkOrCopy puts src at dst: a hard link, or a copy where src lies on
// another file system.
func linkOrCopy(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// bridge makes the bridge joining the machines, with the gateways, the
// endpoint and the registry on the host's side.
func (c *Cluster) bridge() error {
	p := c.p
	if err := c.j.record(Resource{Kind: KindLink, Name: p.bridge}); err != nil {
		return err
	}
	if err := ip("link", "add", p.bridge, "mtu", mtuArg(p.mtu), "type", "bridge"); err != nil {
		return err
	}
	if alias := bridgeAlias + c.cfg.Work; len(alias) <= maxAlias {
		if err := ip("link", "set", "dev", p.bridge, "alias", alias); err != nil {
			return err
		}
	}
	addrs := slices.Clone(p.gateways)
	extras := []netip.Addr{p.endpoint.Addr(), c.mirror.Addr()}
	if c.matchbox != nil {
		extras = append(extras, c.matchbox.addr.Addr())
	}
	for _, extra := range extras {
		if !extra.IsValid() {
			continue
		}
		held := false
		for _, a := range addrs {
			held = held || a.Addr() == extra
		}
		if held {
			continue
		}
		nw, _ := networkOf(c.cfg.Cluster, extra)
		addrs = append(addrs, netip.PrefixFrom(extra, nw.Bits()))
	}
	for _, a := range addrs {
		if err := ip("addr", "add", addrArg(a), "dev", p.bridge); err != nil {
			return err
		}
	}
	if err := ip("link", "set", p.bridge, "up"); err != nil {
		return err
	}
	var shown []string
	for _, a := range addrs {
		shown = append(shown, a.String())
	}
	c.logf("bridge %s: %s", p.bridge, strings.Join(shown, ", "))
	return nil
}

// layout makes a machine's directory and writes up's files into its
// upper layer (never into the tree), none at the path of a compiled file:
// the machine sees every file of its node's tree as compiled. cl is the
// cluster the machine's node belongs to.
func (c *Cluster) layout(cl *ir.Cluster, m *machine) error {
	m.dir = filepath.Join(c.cfg.Work, "machines", m.name)
	m.done = make(chan struct{})
	if err := c.mkdir(m.dir); err != nil {
		return err
	}
	for _, d := range []string{m.upper(), m.workDir(), m.root(), m.containerdDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	m.lowers = nil
	if c.cfg.Target == pipeline.Systemd {
		m.lowers = append(m.lowers, filepath.Join(c.cfg.Work, "tree", layout.NodeTree(m.name, "")))
	}
	binaries := c.binaries
	if m.binaries != "" {
		// A machine added by apply boots the programs apply was given,
		// which after an upgrade are no longer up's own.
		binaries = filepath.Join(m.dir, "binaries")
		if err := os.MkdirAll(binaries, 0o755); err != nil {
			return err
		}
		if err := c.layBinaries(binaries, m.binaries, []ir.Node{m.node}); err != nil {
			return err
		}
	}
	if binaries != "" {
		m.lowers = append(m.lowers, binaries)
	}
	m.lowers = append(m.lowers, c.image)
	files, err := c.adjust.machineFiles(cl, m)
	if err != nil {
		return err
	}
	modes := map[string]os.FileMode{layout.UpInit: 0o755}
	files[layout.UpInit] = []byte(c.adjust.init)
	var configWrites map[string]targets.File
	if c.cfg.Target == pipeline.Ignition {
		cmdline, err := kernelCmdline(cl, m.node)
		if err != nil {
			return err
		}
		files[layout.UpCmdline] = []byte(cmdline)
		files[firstBootFlag(m.node.OS)] = []byte{}
		files[layout.UpNetwork] = initramfsNetwork(c.p, m)
		if m.node.OS == ir.OSFedoraCoreOS {
			files[layout.UpNetworkKept] = []byte("# Written by kcompile up: no NetworkManager reads the node's keyfile here.\n")
		}
		cfg, _ := c.cfg.Ignition.Get(layout.NodeTree(m.name, ignition.ConfigName))
		d, err := ignition.Decode(cfg.Data)
		if err != nil {
			return fmt.Errorf("kcompile bug: node %s's Ignition config: %v", m.name, err)
		}
		configWrites = d.Files
	}
	if c.cfg.Target == pipeline.CloudInit {
		for _, f := range []string{"user-data", "meta-data", "network-config"} {
			t, ok := c.cfg.CloudInit.Get(layout.NodeTree(m.name, f))
			if !ok {
				if f == "network-config" {
					continue
				}
				return fmt.Errorf("the cloud-init tree has no %s for node %s", f, m.name)
			}
			// user-data holds the node's keys: its compiled mode
			// keeps them root's.
			files[layout.CloudInitNoCloudSeed+f], modes[layout.CloudInitNoCloudSeed+f] = t.Data, t.Mode
		}
	}
	mirrors, err := c.mirrorFiles()
	if err != nil {
		return err
	}
	for p, data := range mirrors {
		files[p] = data
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if c.cfg.Target == pipeline.Systemd {
			if _, err := os.Lstat(filepath.Join(m.lowers[0], n)); err == nil {
				return fmt.Errorf("kcompile bug: up would write its %s over node %s's compiled one", n, m.name)
			}
		}
		if _, ok := configWrites[layout.Abs(n)]; ok {
			return fmt.Errorf("kcompile bug: up would write its %s, which node %s's Ignition config writes", n, m.name)
		}
		// A directory in the upper layer hides a symbolic link of the
		// same name below it: lib/modules must land in usr/lib/modules
		// where the image's /lib is a link to usr/lib.
		full := filepath.Join(m.upper(), resolveIn(m.lowers, n))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		mode, ok := modes[n]
		if !ok {
			mode = 0o644
		}
		if err := os.WriteFile(full, files[n], mode); err != nil {
			return err
		}
		// WriteFile's mode passes through the umask.
		if err := os.Chmod(full, mode); err != nil {
			return err
		}
	}
	return nil
}

// resolveIn resolves the symbolic links among rel's directories as the
// union of the layers (top first) shows them, giving the root-relative
// path at which a file written above them appears at /rel.
func resolveIn(layers []string, rel string) string {
	parts := strings.Split(filepath.Clean(rel), "/")
	for hops := 0; hops < 40; hops++ {
		changed := false
		for i := 0; i < len(parts)-1 && !changed; i++ {
			prefix := filepath.Join(parts[:i+1]...)
			for _, l := range layers {
				info, err := os.Lstat(filepath.Join(l, prefix))
				if err != nil {
					continue
				}
				if info.Mode()&os.ModeSymlink != 0 {
					target, err := os.Readlink(filepath.Join(l, prefix))
					if err != nil {
						return rel
					}
					if !filepath.IsAbs(target) {
						target = filepath.Join("/", filepath.Dir("/"+prefix), target)
					}
					next := strings.TrimPrefix(filepath.Clean(target), "/")
					parts = append(strings.Split(next, "/"), parts[i+1:]...)
					changed = true
				}
				break
			}
		}
		if !changed {
			return filepath.Join(parts...)
		}
	}
	return rel
}

// launch boots a machine and supervises it.
func (c *Cluster) launch(m *machine) error {
	c.jmu.Lock()
	err := c.boot(m)
	c.jmu.Unlock()
	if err != nil {
		return err
	}
	go c.supervise(m)
	return nil
}

// bootAll starts every machine.
func (c *Cluster) bootAll() error {
	for _, m := range c.p.machines {
		if err := c.launch(m); err != nil {
			return err
		}
	}
	c.logf("machines started: %d", len(c.p.machines))
	c.phase("machines")
	return nil
}

// waitReady follows the boot through its phases: etcd quorum, API
// ready, addons applied, nodes Ready, addons running.
func (c *Cluster) waitReady(ctx context.Context) error {
	tree := c.cfg.Systemd
	admin, ok := tree.Get(layout.ClusterTree("super-admin.conf"))
	if !ok {
		return errors.New("kcompile bug: the cluster tree has no super-admin.conf")
	}
	k, err := newKube(admin.Data)
	if err != nil {
		return err
	}
	c.kube = k
	poll := func(what string, f func() (bool, string)) error {
		last := ""
		for {
			ok, status := f()
			if status != last {
				c.logf("%s: %s", what, status)
				last = status
			}
			if ok {
				return nil
			}
			select {
			case <-ctx.Done():
				if errors.Is(ctx.Err(), context.Canceled) {
					return fmt.Errorf("interrupted while waiting for %s (%s)", what, status)
				}
				return fmt.Errorf("%s: %s when the time ran out (%w)%s", what, status, ctx.Err(), c.hints())
			case m := <-c.events:
				return m.err
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	etcd, err := c.etcdClient()
	if err != nil {
		return err
	}
	members := c.cfg.Cluster.Etcd.Members
	if err := poll("etcd quorum", func() (bool, string) {
		healthy := 0
		for _, mem := range members {
			if etcd.healthy(ctx, mem.ClientURL()) {
				healthy++
			}
		}
		return healthy > len(members)/2, fmt.Sprintf("%d/%d members healthy", healthy, len(members))
	}); err != nil {
		return err
	}
	c.phase("etcd")
	if err := poll("API", func() (bool, string) {
		if k.ready(ctx) {
			return true, "ready (" + c.cfg.Cluster.Endpoint.URL() + "/readyz)"
		}
		return false, "not ready"
	}); err != nil {
		return err
	}
	c.phase("api")
	if err := c.awaitRegistry(ctx); err != nil {
		return err
	}
	manifests, err := addonManifests(c.cfg.Cluster, tree, c.adjust.overrides)
	if err != nil {
		return err
	}
	for _, m := range manifests {
		rel, data := m.name, m.data
		var n int
		if err := poll("addons", func() (bool, string) {
			var err error
			n, err = k.apply(ctx, rel, data)
			if err != nil {
				return false, "applying " + rel + ": " + err.Error()
			}
			return true, fmt.Sprintf("applied %s (%d objects) with super-admin.conf", rel, n)
		}); err != nil {
			return err
		}
	}
	c.phase("addons-applied")
	want := 0
	for _, m := range c.p.machines {
		if m.node.RunsPods() {
			want++
		}
	}
	if err := poll("nodes", func() (bool, string) {
		nodes, err := k.nodes(ctx)
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, n := range nodes {
			if nodeReady(n) {
				ready++
			}
		}
		return ready == want, fmt.Sprintf("%d/%d Ready", ready, want)
	}); err != nil {
		return err
	}
	c.phase("nodes-ready")
	if err := poll("addons", func() (bool, string) {
		return k.workloadsReady(ctx)
	}); err != nil {
		return err
	}
	c.phase("addons-running")
	c.logf("cluster %s is up: kubectl --kubeconfig %s get nodes", c.cfg.Cluster.Name, c.Kubeconfig())
	return nil
}

// awaitRegistry waits until the images the addons pull are served.
func (c *Cluster) awaitRegistry(ctx context.Context) error {
	if c.served == nil {
		return nil
	}
	var r served
	select {
	case r = <-c.served:
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("the cluster's images were not built and served within the boot's timeout: %w", ctx.Err())
		}
		return fmt.Errorf("interrupted while the images were built: %w", ctx.Err())
	case m := <-c.events:
		return m.err
	}
	if r.err != nil {
		return r.err
	}
	c.logf("image registry serving on %s (ready %.1fs after up started)", c.mirror, r.at.Sub(c.start).Seconds())
	if c.p.egress == nil {
		c.logf("the nodes have no egress (up --egress gives them some): they pull only the images up serves (%s); a pod of any other image waits in ImagePullBackOff, and kcompile node status names it", strings.Join(c.cfg.Registry.Refs(), ", "))
	}
	c.phaseAt("registry", r.at)
	return nil
}

// hints is what to look at when a boot times out: each machine's failed
// units.
func (c *Cluster) hints() string {
	var b strings.Builder
	hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range c.p.machines {
		out, err := m.exec(hctx, "systemctl", "list-units", "--failed", "--no-legend", "--plain")
		if err != nil {
			fmt.Fprintf(&b, "\n  %s: %v (console: %s)", m.name, err, m.console())
			continue
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			fmt.Fprintf(&b, "\n  %s: failed units:\n    %s", m.name, strings.ReplaceAll(s, "\n", "\n    "))
		}
	}
	return b.String()
}

// etcdClient dials etcd with the API server's client certificate from
// the first control-plane node's tree.
func (c *Cluster) etcdClient() (*etcdHealth, error) {
	return etcdClientOf(c.cfg.Cluster, c.cfg.Systemd)
}

// etcdClientOf is a client of cluster c's etcd with the credentials of
// the API server of its first control-plane node in tree.
func etcdClientOf(cl *ir.Cluster, tree *targets.Tree) (*etcdHealth, error) {
	for _, n := range cl.Nodes {
		if !n.Runs(ir.ComponentAPIServer) {
			continue
		}
		return etcdClientFrom(func(p string) ([]byte, error) {
			f, ok := tree.Get(layout.NodeTree(n.Name, p))
			if !ok {
				return nil, fmt.Errorf("node %s has no %s", n.Name, p)
			}
			return f.Data, nil
		})
	}
	return nil, errors.New("no control-plane node")
}

// liveEtcdClient is a client of etcd with the credentials a running
// machine's API server has now, read from its root: after apply rotated
// the CAs, those of the boot are no longer trusted.
func (c *Cluster) liveEtcdClient() (*etcdHealth, error) {
	for _, m := range c.machines() {
		pid := m.leader()
		if pid == 0 || !m.node.Runs(ir.ComponentAPIServer) {
			continue
		}
		at := machineAccess{name: m.name, pid: pid}
		if e, err := etcdClientFrom(func(p string) ([]byte, error) { return at.read(context.Background(), p) }); err == nil {
			return e, nil
		}
	}
	return nil, errors.New("no running control-plane machine has its etcd credentials")
}

// etcdClientFrom is a client of etcd with the API server's etcd client
// certificate and the etcd CA that get reads by their paths on a node.
func etcdClientFrom(get func(p string) ([]byte, error)) (*etcdHealth, error) {
	crt, err := get(layout.CertFile(layout.APIServerEtcdClientStem))
	if err != nil {
		return nil, err
	}
	key, err := get(layout.KeyFile(layout.APIServerEtcdClientStem))
	if err != nil {
		return nil, err
	}
	ca, err := get(layout.EtcdCACert)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &etcdHealth{http: &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}}, nil
}

// addonManifest is one file of the cluster tree's addons, by its name
// there, as up applies it.
type addonManifest struct {
	name string
	data []byte
}

// addonManifests are the addon files of tree in order, up's copies
// (systemd.UpAddons) in place of those its overrides change.
func addonManifests(c *ir.Cluster, tree *targets.Tree, o systemd.UpOverrides) ([]addonManifest, error) {
	copies, err := systemd.UpAddons(c, o)
	if err != nil {
		return nil, err
	}
	var out []addonManifest
	for _, f := range tree.Files() {
		name, ok := strings.CutPrefix(f.Path, layout.ClusterTree("addons/"))
		if !ok {
			continue
		}
		data, copied := copies[f.Path]
		if !copied {
			data = f.Data
		}
		out = append(out, addonManifest{name: name, data: data})
	}
	return out, nil
}

// Exec runs a command inside a node's machine.
func (c *Cluster) Exec(ctx context.Context, node string, args ...string) ([]byte, error) {
	m := c.machine(node)
	if m == nil {
		return nil, fmt.Errorf("no node %s", node)
	}
	return m.exec(ctx, args...)
}

// Stop halts a node's machine and does not boot it again: with a grace
// of zero at once, as a machine that loses its power.
func (c *Cluster) Stop(ctx context.Context, node string, grace time.Duration) error {
	m := c.machine(node)
	if m == nil {
		return fmt.Errorf("no node %s", node)
	}
	m.stop(ctx, grace)
	return nil
}

// Reboot asks a node to reboot (systemctl reboot inside); up boots it
// again with the same disk, in a fresh network namespace.
func (c *Cluster) Reboot(ctx context.Context, node string) error {
	m := c.machine(node)
	if m == nil {
		return fmt.Errorf("no node %s", node)
	}
	m.mu.Lock()
	boots := m.boots
	m.mu.Unlock()
	if _, err := m.exec(ctx, "systemctl", "reboot"); err != nil {
		return err
	}
	defer m.halting()()
	for {
		m.mu.Lock()
		b := m.boots
		m.mu.Unlock()
		if b > boots {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s did not come back from its reboot: %w", node, ctx.Err())
		case <-m.done:
			return fmt.Errorf("node %s stopped instead of rebooting: %v", node, m.err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) machine(node string) *machine {
	for _, m := range c.machines() {
		if m.name == node {
			return m
		}
	}
	return nil
}

// machines are the cluster's machines as they are now.
func (c *Cluster) machines() []*machine {
	c.mmu.Lock()
	defer c.mmu.Unlock()
	return slices.Clone(c.p.machines)
}

// Wait runs the cluster until ctx ends. A machine that stops by itself
// is said, with why, and the cluster goes on: `kcompile node start`
// boots it again.
func (c *Cluster) Wait(ctx context.Context) error {
	for {
		select {
		case m := <-c.events:
			c.logf("%v; the cluster goes on without it: kcompile node start %s --work %s boots it again", m.err, m.name, c.cfg.Work)
		case <-ctx.Done():
			return nil
		}
	}
}

// stopAPIServers stops every running API server, and the controllers
// beside it, before any machine halts. Halted together, the machines' etcd members could lose quorum
// while an API server still drains its requests (one that had just
// started has its own in flight); those then wait out their timeout
// and the halt is forced. Stopped first, every API server drains
// against a healthy etcd. A failure here only costs the clean halt,
// which Down reports.
func (c *Cluster) stopAPIServers(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range c.machines() {
		if m.done == nil || m.cmd == nil || !m.node.Runs(ir.ComponentAPIServer) {
			continue
		}
		if m.leader() == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The controllers with it, first (they are ordered after it):
			// neither is left to fail over, restart, and hold up the halt.
			if _, err := m.exec(ctx, "systemctl", "stop", "kube-controller-manager.service", "kube-scheduler.service", "kube-apiserver.service"); err != nil {
				c.logf("down: the API server of %s did not stop before the halt: %v", m.name, err)
			}
		}()
	}
	wg.Wait()
}

// Down halts every machine and removes everything up made; a second
// call does nothing. It halts each machine as its power button would
// (systemd's SIGRTMIN+3, which does not go through logind): `kcompile
// node stop` is the graceful power-off, which waits on the kubelets'
// shutdown.
func (c *Cluster) Down(ctx context.Context) error {
	c.mmu.Lock()
	downed := c.downed
	c.downed = true
	c.mmu.Unlock()
	if downed {
		return nil
	}
	c.stopAPIServers(ctx)
	var wg sync.WaitGroup
	for _, m := range c.machines() {
		if m.done == nil || m.cmd == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.stop(ctx, 20*time.Second) {
				c.logf("machine %s did not halt within 20 s: stopped by force; the end of its console:\n%s", m.name, consoleTail(m.console(), 15))
			}
		}()
	}
	wg.Wait()
	if c.control != nil {
		_ = c.control.Close()
	}
	if c.cancel != nil {
		c.cancel()
	}
	if c.bal != nil {
		c.bal.close()
	}
	c.jmu.Lock()
	defer c.jmu.Unlock()
	own, err := undo(ctx, c.j, c.cfg.Log)
	if err != nil {
		c.lock.release(false)
		return err
	}
	c.lock.created = c.lock.created || own
	c.lock.release(true)
	c.logf("down: every machine stopped, every namespace, device and file up made removed")
	return nil
}
