// Package sim runs a compiled cluster in one process: real embedded etcd
// members with their compiled certificates, real kube-apiservers,
// controller-managers and schedulers with their compiled flags, a TCP
// load balancer on the API endpoint, and simulated kubelets that use each
// node's own credentials. Every node gets a loopback address of its own
// (Remap), and the normal catalogue issues the PKI for those addresses.
//
// The Kubernetes control plane is imported from k8s.io/kubernetes here
// and nowhere else.
package sim

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/writer"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/systemd"
)

// Options configure a simulation.
type Options struct {
	// WorkDir receives the node trees and etcd data (under tree/) and
	// admin.kubeconfig. It must not hold a previous simulation.
	WorkDir string
	// Progress receives one line per phase.
	Progress io.Writer
	// Block is the block of the loopback network the simulation's
	// addresses are taken from: 127.Block.0.0 and up (see MaxBlock).
	Block int
	// Restore, when set, is a snapshot the members' data is restored
	// from before etcd starts.
	Restore *Restore
}

// Sim is a running simulated cluster.
type Sim struct {
	opts    Options
	cluster *ir.Cluster
	// index finds a node of cluster by name.
	index map[string]int
	addrs *AddressMap
	tree  *targets.Tree
	// placement is how the trees were asked for: under the work directory,
	// on the nodes' own addresses.
	placement systemd.Options

	ctx    context.Context
	cancel context.CancelFunc
	// componentStopped is set once a component has been stopped (see
	// exitHook); it is its own allocation so that the hook does not keep
	// the whole simulation.
	componentStopped *atomic.Bool

	mu         sync.Mutex
	etcd       map[string]*embed.Etcd
	components map[string]*component
	lb         *balancer
	kubelets   map[string]*kubelet
	admin      *rest.Config
	adminCS    kubernetes.Interface
	// informers watch the cluster once for the whole simulation; nodes
	// is their Node cache.
	informers informers.SharedInformerFactory
	nodes     corev1listers.NodeLister
	// renewEvery is how often the kubelets renew their Leases.
	renewEvery time.Duration
	wg         sync.WaitGroup
	// chains is the kubelets' shared verdict on server certificates.
	chains chainCache
	// prepared is how long issuing the PKI and laying out the trees
	// took, before the first etcd member started.
	prepared time.Duration
}

// component is one running control-plane process of a node.
type component struct {
	cancel context.CancelFunc
	errc   <-chan error
}

// AdminKubeconfig is the path of the kubeconfig the simulation writes for
// kubectl, relative to the workdir.
const AdminKubeconfig = "admin.kubeconfig"

// Start boots the cluster: etcd quorum, API servers, the load balancer,
// addons, controller-managers and schedulers, then every kubelet.
func Start(ctx context.Context, c *ir.Cluster, b *pki.Bundle, opts Options) (*Sim, error) {
	// A controller-manager that stops would otherwise exit the process.
	// The gate is process-wide in Kubernetes; the simulation owns the
	// process.
	if err := utilfeature.DefaultMutableFeatureGate.Set("ControllerManagerReleaseLeaderElectionLockOnExit=true"); err != nil {
		return nil, err
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if err := raiseFileLimit(len(c.Nodes)); err != nil {
		return nil, err
	}
	if opts.Block < 1 || opts.Block > MaxBlock {
		return nil, fmt.Errorf("loopback block %d is outside 1-%d", opts.Block, MaxBlock)
	}
	began := time.Now()
	p, err := prepare(c, b, opts)
	if err != nil {
		return nil, err
	}
	s := &Sim{opts: opts, cluster: p.cluster, index: p.index, addrs: p.addrs, tree: p.tree, placement: p.placement,
		etcd: map[string]*embed.Etcd{}, components: map[string]*component{}, kubelets: map[string]*kubelet{},
		prepared: time.Since(began), componentStopped: new(atomic.Bool)}
	// The simulation owns the process (see exitHook).
	klog.OsExit = exitHook(s.componentStopped)
	s.progress("prepared: certificates and trees of %d nodes (%s)", len(p.cluster.Nodes), s.prepared.Round(time.Millisecond))
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.boot(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Prepared is how long Start spent issuing the PKI and laying out the
// trees before the first etcd member started.
func (s *Sim) Prepared() time.Duration { return s.prepared }

// preparation is what a simulation runs: the cluster on its loopback
// addresses, its compiled trees and how they were laid out.
type preparation struct {
	cluster   *ir.Cluster
	index     map[string]int
	addrs     *AddressMap
	tree      *targets.Tree
	placement systemd.Options
}

// prepare issues the PKI for the loopback addresses, builds the trees
// and writes what real processes read to the work directory.
func prepare(c *ir.Cluster, b *pki.Bundle, opts Options) (*preparation, error) {
	mapped, addrs := Remap(c, opts.Block)
	index := nodeIndex(mapped)
	work, err := filepath.Abs(opts.WorkDir)
	if err != nil {
		return nil, err
	}
	treeDir := filepath.Join(work, "tree")
	if _, err := os.Stat(treeDir); err == nil {
		return nil, fmt.Errorf("workdir %s holds a previous simulation; give an empty one", work)
	}
	apiServers := 0
	for _, n := range mapped.Nodes {
		if n.Runs(ir.ComponentAPIServer) {
			apiServers++
		}
	}
	sdOpts := placement(treeDir, addrs, apiServers)
	// Nodes running etcd or the control plane get their whole compiled
	// trees; a node that is only a simulated kubelet gets its kubelet's
	// client certificate and kubeconfig, all the simulation reads of it
	// besides its kubelet unit (NodeUnits).
	sdOpts.Trees = runsProcesses
	_, tree, err := pipeline.Place(mapped, b, pipeline.Placement{Systemd: sdOpts, Certs: func(cert pki.Cert) bool {
		return cert.Node == "" || runsProcesses(mapped.Nodes[index[cert.Node]]) || cert.Name == "kubelet-client"
	}})
	if err != nil {
		return nil, err
	}
	if _, err := writer.Write(treeDir, processTree(mapped, tree), writer.Options{}); err != nil {
		return nil, err
	}
	admin, ok := tree.Get(layout.ClusterTree("admin.conf"))
	if !ok {
		return nil, errors.New("kcompile bug: no cluster/admin.conf")
	}
	if err := os.WriteFile(filepath.Join(work, AdminKubeconfig), admin.Data, 0o600); err != nil {
		return nil, err
	}
	return &preparation{cluster: mapped, index: index, addrs: addrs, tree: tree, placement: sdOpts}, nil
}

// nodeIndex maps node names to their positions in c.Nodes.
func nodeIndex(c *ir.Cluster) map[string]int {
	index := make(map[string]int, len(c.Nodes))
	for i, n := range c.Nodes {
		index[n.Name] = i
	}
	return index
}

// LogTo sends the components' logs (klog, process-wide) to w instead of
// stderr; the terminal keeps the progress lines.
func LogTo(w io.Writer) error {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for name, value := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(name, value); err != nil {
			return err
		}
	}
	klog.SetOutput(w)
	return nil
}

func (s *Sim) progress(format string, args ...any) {
	fmt.Fprintf(s.opts.Progress, format+"\n", args...)
}

// raiseFileLimit makes room for the connections of a whole cluster in
// one process. A simulated kubelet holds a connection only while it
// talks to the API and kubeletIdle after (each is two descriptors, its
// end and the API server's): at the fleet's renewal rate, a few hundred
// are open at a time; a connection per node and a half is the margin.
// The limit is process-wide; the simulation owns the process.
func raiseFileLimit(nodes int) error {
	need := uint64(nodes/2 + 4096)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= need {
		return nil
	}
	want := lim
	want.Cur = need
	if want.Max < need {
		want.Max = need
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		if lim.Max < need {
			return fmt.Errorf("%d nodes need %d open files; the limit is %d (raise it with ulimit -n as root)", nodes, need, lim.Max)
		}
		lim.Cur = lim.Max
		return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	return nil
}

// runsProcesses says whether a node runs real processes in the
// simulation (etcd or the control plane) rather than only a simulated
// kubelet.
func runsProcesses(n ir.Node) bool {
	return n.Runs(ir.ComponentEtcd) || n.Runs(ir.ComponentAPIServer)
}

// processTree is the part of the compiled tree that real processes read
// from disk: the cluster files and the nodes running etcd or the control
// plane. Simulated kubelets take their credentials from the tree in
// memory.
func processTree(c *ir.Cluster, tree *targets.Tree) *targets.Tree {
	keep := map[string]bool{}
	for _, n := range c.Nodes {
		if runsProcesses(n) {
			keep[n.Name] = true
		}
	}
	out := targets.NewTree()
	for _, f := range tree.Files() {
		if node, _, ok := layout.SplitTree(f.Path); ok && !keep[node] {
			continue
		}
		// The paths and modes come from a valid tree: Add cannot fail.
		_ = out.Add(f.Path, f.Data, f.Mode)
	}
	return out
}

func (s *Sim) boot(ctx context.Context) error {
	start := time.Now()
	if s.opts.Restore != nil {
		if err := s.restoreMembers(); err != nil {
			return err
		}
		s.progress("etcd: every member restored from %s (%s)", s.opts.Restore.Snapshot.Path, time.Since(start).Round(time.Millisecond))
	}
	for _, mem := range s.cluster.Etcd.Members {
		if err := s.StartEtcd(mem.Name); err != nil {
			return err
		}
	}
	for _, mem := range s.cluster.Etcd.Members {
		if err := waitEtcd(s.etcd[mem.Name], time.Minute); err != nil {
			return err
		}
	}
	s.progress("etcd: quorum of %d members (%s)", len(s.cluster.Etcd.Members), time.Since(start).Round(time.Millisecond))

	var backends []string
	for _, n := range s.cluster.Nodes {
		if n.Role == ir.RoleControlPlane {
			backends = append(backends, net.JoinHostPort(s.addrs.Nodes[n.Name].String(), strconv.Itoa(s.cluster.Kubernetes.APIServerPort)))
			if err := s.startComponent(n.Name, ir.ComponentAPIServer); err != nil {
				return err
			}
		}
	}
	super, ok := s.tree.Get(layout.ClusterTree("super-admin.conf"))
	if !ok {
		return errors.New("kcompile bug: no cluster/super-admin.conf")
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(super.Data)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 500, 1000
	s.admin = cfg
	// Built-in types travel as protobuf, as between the real components;
	// the dynamic client of apply needs the JSON config.
	if s.adminCS, err = kubernetes.NewForConfig(protobuf(cfg)); err != nil {
		return err
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return err
	}
	s.lb, err = newBalancer(net.JoinHostPort(s.addrs.Endpoint.String(), strconv.Itoa(s.cluster.Endpoint.Port)), backends, tlsCfg)
	if err != nil {
		return fmt.Errorf("load balancer on the API endpoint: %w", err)
	}
	if s.cluster.Endpoint.Mode == ir.EndpointVIP {
		var cps []string
		for _, n := range s.cluster.Nodes {
			if n.Runs(ir.ComponentAPIServer) {
				cps = append(cps, n.Name)
			}
		}
		s.lb.withVIP(cps, time.Duration(s.cluster.Endpoint.AdvertInterval)*time.Second, time.Now())
		s.progress("API endpoint: a VIP, held by %s", s.lb.Holder())
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.lb.run(s.ctx) }()
	if err := s.waitFor(ctx, 2*time.Minute, func() bool { return s.lb.Healthy() == len(backends) }); err != nil {
		return fmt.Errorf("API servers not ready: %d of %d answer /readyz", s.lb.Healthy(), len(backends))
	}
	s.progress("API servers ready: %d behind %s (%s)", len(backends), s.cluster.Endpoint.URL(), time.Since(start).Round(time.Millisecond))

	if err := s.watchNodes(ctx); err != nil {
		return err
	}
	if err := s.keepKubernetesEndpoints(ctx); err != nil {
		return err
	}
	if err := s.applyAddons(ctx, false); err != nil {
		return err
	}
	for _, n := range s.cluster.Nodes {
		if n.Role == ir.RoleControlPlane {
			for _, comp := range []ir.Component{ir.ComponentControllerManager, ir.ComponentScheduler} {
				if err := s.startComponent(n.Name, comp); err != nil {
					return err
				}
			}
		}
	}
	if err := s.startKubelets(ctx); err != nil {
		return err
	}
	if err := s.applyAddons(ctx, true); err != nil {
		return err
	}
	s.startProvisioner()
	return nil
}

// protobuf is cfg speaking protobuf for built-in types.
func protobuf(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return cfg
}

// watchNodes starts the Node cache the kubelets, the progress reports
// and Status read, so that no one lists 5,000 nodes to count them.
func (s *Sim) watchNodes(ctx context.Context) error {
	s.informers = informers.NewSharedInformerFactory(s.adminCS, 0)
	nodes := s.informers.Core().V1().Nodes()
	if err := nodes.Informer().SetTransform(trimNode); err != nil {
		return err
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.nodeChanged(obj) },
		UpdateFunc: func(_, obj any) { s.nodeChanged(obj) },
	}); err != nil {
		return err
	}
	s.nodes = nodes.Lister()
	s.informers.Start(s.ctx.Done())
	for typ, ok := range s.informers.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("watching %v: %w", typ, ctx.Err())
		}
	}
	return nil
}

// trimNode keeps of a Node what the simulation reads from its cache
// (name, pod range, Ready): thousands of whole Nodes are tens of
// megabytes.
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
		Spec: corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR}}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return out, nil
}

// waitFor polls cond until it holds, ctx ends or timeout passes.
func (s *Sim) waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// StartEtcd starts (or restarts) an etcd member from its compiled flags.
func (s *Sim) StartEtcd(member string) error {
	i := slices.IndexFunc(s.cluster.Etcd.Members, func(m ir.EtcdMember) bool { return m.Name == member })
	if i < 0 {
		return fmt.Errorf("no etcd member %s", member)
	}
	node := s.cluster.Etcd.Members[i].Node
	args, err := s.execArgs(node, "etcd.service")
	if err != nil {
		return err
	}
	flags := flagMap(args)
	if _, err := os.Stat(flags["data-dir"]); err == nil {
		// A restart rejoins with its data.
		flags["initial-cluster-state"] = "existing"
	}
	cfg, err := etcdConfig(flags)
	if err != nil {
		return err
	}
	e, err := startEtcd(cfg)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.etcd[member] = e
	s.mu.Unlock()
	return nil
}

// StopEtcd stops an etcd member.
func (s *Sim) StopEtcd(member string) error {
	s.mu.Lock()
	e, ok := s.etcd[member]
	delete(s.etcd, member)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("etcd member %s is not running", member)
	}
	// A member that lost its quorum can take long to stop; it is
	// abandoned (and its listeners closed) after a while.
	done := make(chan struct{})
	go func() { e.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("etcd member %s did not stop within 10s", member)
	}
	return nil
}

// startComponent starts one control-plane component of a node.
func (s *Sim) startComponent(node string, comp ir.Component) error {
	args, err := s.execArgs(node, string(comp)+".service")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(s.ctx)
	var errc <-chan error
	switch comp {
	case ir.ComponentAPIServer:
		// The previous instance's listener may outlive the 10 s
		// stopComponent waits for it; systemd would restart the unit
		// (Restart=always) until the port is free.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			errc, err = startAPIServer(ctx, node, args)
			if err == nil || !strings.Contains(err.Error(), "address already in use") || time.Now().After(deadline) {
				break
			}
		}
	case ir.ComponentControllerManager:
		errc, err = startControllerManager(ctx, args)
	case ir.ComponentScheduler:
		errc, err = startScheduler(ctx, node, args)
	default:
		err = fmt.Errorf("kcompile bug: %s is not simulated as a process", comp)
	}
	if err != nil {
		cancel()
		return fmt.Errorf("%s on %s: %w", comp, node, err)
	}
	// A component that ends by itself (a controller-manager that lost
	// its leadership under load) is reported and, as systemd does with
	// the compiled unit's Restart=, started again.
	done := make(chan error, 1)
	go func() {
		err := <-errc
		done <- err
		if ctx.Err() != nil {
			return
		}
		restart, delay := s.restartPolicy(node, string(comp)+".service")
		if !restart {
			s.progress("%s on %s exited: %v", comp, node, err)
			return
		}
		s.progress("%s on %s exited (%v); restarting in %s", comp, node, err, delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		if err := s.startComponent(node, comp); err != nil {
			s.progress("%s on %s: restart failed: %v", comp, node, err)
		}
	}()
	s.mu.Lock()
	s.components[node+"/"+string(comp)] = &component{cancel: cancel, errc: done}
	s.mu.Unlock()
	return nil
}

// stopComponent stops one control-plane component and waits for it.
func (s *Sim) stopComponent(node string, comp ir.Component) {
	s.mu.Lock()
	c, ok := s.components[node+"/"+string(comp)]
	delete(s.components, node+"/"+string(comp))
	s.mu.Unlock()
	if !ok {
		return
	}
	s.componentStopped.Store(true)
	c.cancel()
	// Some controllers of a controller-manager take long to wind down;
	// they are left behind after a while, as systemd would kill them.
	select {
	case <-c.errc:
	case <-time.After(10 * time.Second):
	}
}

// keepKubernetesEndpoints points the default/kubernetes Service at the
// API servers: their endpoint reconciler is off, as it refuses loopback
// addresses. Endpoints may not hold loopback addresses either, so they
// list the API servers' addresses in the spec, as production would.
func (s *Sim) keepKubernetesEndpoints(ctx context.Context) error {
	var addrs []corev1.EndpointAddress
	for _, n := range s.cluster.Nodes {
		if n.Role == ir.RoleControlPlane {
			addrs = append(addrs, corev1.EndpointAddress{IP: s.addrs.Real[n.Name].String()})
		}
	}
	ports := []corev1.EndpointPort{{Name: "https", Port: int32(s.cluster.Kubernetes.APIServerPort), Protocol: corev1.ProtocolTCP}}
	//lint:ignore SA1019 v1 Endpoints is what the API server's own reconciler writes for this Service; the controller-manager mirrors it into an EndpointSlice.
	subsets := []corev1.EndpointSubset{{Addresses: addrs, Ports: ports}}
	//lint:ignore SA1019 as above.
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault}, Subsets: subsets}
	var last error
	err := s.waitFor(ctx, time.Minute, func() bool {
		eps := s.adminCS.CoreV1().Endpoints(metav1.NamespaceDefault)
		cur, err := eps.Get(ctx, "kubernetes", metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = eps.Create(ctx, ep, metav1.CreateOptions{})
		case err == nil:
			cur.Subsets = ep.Subsets
			_, err = eps.Update(ctx, cur, metav1.UpdateOptions{})
		}
		last = err
		return err == nil
	})
	if err != nil {
		return fmt.Errorf("endpoints of the kubernetes Service: %w (%v)", err, last)
	}
	return nil
}

// startKubelets registers every pod-running node with its own
// credentials, then runs its heartbeat and the pods bound to it. The
// whole fleet has one deadline, proportional to its size; progress is
// reported every few seconds.
func (s *Sim) startKubelets(ctx context.Context) error {
	var nodes []ir.Node
	for _, n := range s.cluster.Nodes {
		if n.RunsPods() {
			nodes = append(nodes, n)
		}
	}
	s.renewEvery = renewInterval(len(nodes), s.nodeGracePeriod())
	if s.renewEvery > kubeletRenew {
		s.progress("kubelets renew their Leases every %s (the kubelet's %s would exceed what one process sustains for %d nodes)",
			s.renewEvery.Round(time.Second), kubeletRenew, len(nodes))
	}
	start := time.Now()
	timeout := time.Minute + time.Duration(len(nodes))*60*time.Millisecond
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var registered atomic.Int64
	stopReport := s.every(progressEvery, func() {
		s.progress("nodes registered: %d/%d (%s)", registered.Load(), len(nodes), time.Since(start).Round(time.Second))
	})
	defer stopReport()

	var mu sync.Mutex
	var firstErr error
	work := make(chan ir.Node)
	var wg sync.WaitGroup
	for w := 0; w < registerWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				err := s.registerKubelet(ctx, n)
				if err == nil {
					registered.Add(1)
					continue
				}
				mu.Lock()
				if firstErr == nil {
					firstErr = err
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, n := range nodes {
		select {
		case work <- n:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("%d of %d nodes registered within %s: %w", registered.Load(), len(nodes), timeout, firstErr)
	}
	stopReport()
	s.progress("nodes registered: %d/%d (%s)", registered.Load(), len(nodes), time.Since(start).Round(time.Millisecond))
	s.startPodDispatch()
	return nil
}

// nodeGracePeriod is how long the node lifecycle controller waits for a
// silent node before marking it NotReady: the compiled
// controller-manager flag or its default.
func (s *Sim) nodeGracePeriod() time.Duration {
	for _, n := range s.cluster.Nodes {
		if !n.Runs(ir.ComponentControllerManager) {
			continue
		}
		args, err := s.execArgs(n.Name, string(ir.ComponentControllerManager)+".service")
		if err != nil {
			break
		}
		if d, err := time.ParseDuration(flagMap(args)["node-monitor-grace-period"]); err == nil {
			return d
		}
		break
	}
	return 50 * time.Second
}

// registerWorkers is how many nodes register at once: enough to keep the
// API servers busy, few enough that requests do not queue past their
// timeouts.
const registerWorkers = 64

// progressEvery is how often a long phase reports its progress.
const progressEvery = 5 * time.Second

// registerKubelet registers one node, retrying until ctx ends, and
// starts its heartbeat.
func (s *Sim) registerKubelet(ctx context.Context, n ir.Node) error {
	k, err := s.newKubelet(n)
	if err != nil {
		return err
	}
	for {
		err = k.register(ctx)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s did not register: %w", n.Name, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
	s.mu.Lock()
	s.kubelets[n.Name] = k
	s.mu.Unlock()
	// The controller-manager may have allocated the node's pod range
	// before the kubelet was listed here; take it from the cache.
	if node, err := s.nodes.Get(n.Name); err == nil {
		s.nodeChanged(node)
	}
	s.runKubelet(k)
	return nil
}

// every calls f every period until the returned function is called.
func (s *Sim) every(period time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var once sync.Once
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-s.ctx.Done():
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { once.Do(func() { close(done) }) }
}

// newKubelet prepares a node's agent from its compiled kubelet unit and
// kubeconfig.
func (s *Sim) newKubelet(n ir.Node) (*kubelet, error) {
	args, err := s.execArgs(n.Name, "kubelet.service")
	if err != nil {
		return nil, err
	}
	labels, taints, err := parseKubeletFlags(flagMap(args))
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	kc, ok := s.tree.Get(layout.NodeTree(n.Name, layout.KubeletKubeconfig))
	if !ok {
		return nil, fmt.Errorf("kcompile bug: node %s has no kubelet.conf", n.Name)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc.Data)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 20, 40
	// The kubelet's --kube-api-content-type defaults to protobuf.
	cfg = protobuf(cfg)
	hc, closeIdle, err := kubeletClient(cfg, &s.chains, s.lb.DialerFor(n.Name))
	if err != nil {
		return nil, err
	}
	core, err := corev1client.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	coordination, err := coordinationv1client.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	return &kubelet{name: n.Name, addr: s.addrs.Nodes[n.Name], version: n.KubeletVersion, labels: labels, taints: taints,
		cpu: n.Capacity.CPU, memory: n.Capacity.Memory, maxPods: n.Capacity.MaxPods, core: core, coordination: coordination, renewEvery: s.renewEvery,
		running: map[types.UID]bool{}, closeIdle: closeIdle}, nil
}

// kubeletIdle is how long a simulated kubelet keeps its connection to
// the API open without a request. A real kubelet holds one for its
// watches; the simulated ones watch nothing (one watch serves the whole
// fleet), and thousands of open connections, each with its buffers and
// goroutines at both ends, would be most of the simulation's memory.
const kubeletIdle = 2 * time.Second

// kubeletClient is the HTTP client of one simulated kubelet: its own
// credentials and its own TLS session cache, so that a renewal resumes
// the node's session (no certificate is sent or verified again) instead
// of a full handshake, while no node ever presents another's identity.
// What the fleet shares is the verdict on the API servers' certificates
// (chains) and the key exchange: X25519 alone, as the hybrid
// post-quantum exchange Go offers first costs more CPU than the rest of
// a handshake, and 5,000 nodes connect at once.
func kubeletClient(cfg *rest.Config, chains *chainCache, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*http.Client, func(), error) {
	// The CA is parsed once for the fleet (roots), not once per node.
	ca, roots, err := chains.roots(cfg)
	if err != nil {
		return nil, nil, err
	}
	own := rest.CopyConfig(cfg)
	own.CAData, own.CAFile = nil, ""
	tlsCfg, err := rest.TLSConfigFor(own)
	if err != nil {
		return nil, nil, err
	}
	if tlsCfg == nil {
		return nil, nil, fmt.Errorf("kcompile bug: the kubelet's API server %s is not reached over TLS", cfg.Host)
	}
	tlsCfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
	tlsCfg.CurvePreferences = []tls.CurveID{tls.X25519}
	name := tlsCfg.ServerName
	if name == "" {
		u, err := url.Parse(cfg.Host)
		if err != nil {
			return nil, nil, err
		}
		name = u.Hostname()
	}
	// The chain is verified below, through the shared cache, on every
	// connection (resumed ones too), with the same roots and name.
	tlsCfg.InsecureSkipVerify = true
	tlsCfg.VerifyConnection = func(cs tls.ConnectionState) error {
		return chains.verify(ca, roots, name, cs.PeerCertificates)
	}
	tr := &http.Transport{
		DialContext:         dial,
		TLSClientConfig:     tlsCfg,
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     kubeletIdle,
		MaxIdleConnsPerHost: 1,
	}
	rt, err := rest.HTTPWrappersForConfig(cfg, tr)
	if err != nil {
		return nil, nil, err
	}
	return &http.Client{Transport: rt}, tr.CloseIdleConnections, nil
}

// chainCache remembers which server certificates verified against which
// roots for which name, so that thousands of kubelets trusting the same
// CA verify each API server's certificate once.
type chainCache struct {
	mu sync.Mutex
	ok map[[sha256.Size]byte]bool
	// pools are the parsed CAs, by ca (see verify).
	pools map[string]*x509.CertPool
}

// roots is the CA a client configuration trusts, parsed once, and the
// name verify knows it by: its PEM or its file.
func (c *chainCache) roots(cfg *rest.Config) (string, *x509.CertPool, error) {
	ca := string(cfg.CAData) + "\x00" + cfg.CAFile
	c.mu.Lock()
	defer c.mu.Unlock()
	if pool, ok := c.pools[ca]; ok {
		return ca, pool, nil
	}
	data := cfg.CAData
	if len(data) == 0 && cfg.CAFile != "" {
		var err error
		if data, err = os.ReadFile(cfg.CAFile); err != nil {
			return "", nil, err
		}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return "", nil, fmt.Errorf("the kubeconfig of %s has no CA certificate", cfg.Host)
	}
	if c.pools == nil {
		c.pools = map[string]*x509.CertPool{}
	}
	c.pools[ca] = pool
	return ca, pool, nil
}

// ca names the roots (their PEM, or their file).
func (c *chainCache) verify(ca string, roots *x509.CertPool, name string, certs []*x509.Certificate) error {
	if len(certs) == 0 {
		return errors.New("the server sent no certificate")
	}
	h := sha256.New()
	for _, b := range []string{ca, name} {
		h.Write([]byte(b))
		h.Write([]byte{0})
	}
	for _, cert := range certs {
		h.Write(cert.Raw)
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	c.mu.Lock()
	known := c.ok[key]
	c.mu.Unlock()
	if known {
		return nil
	}
	inter := x509.NewCertPool()
	for _, cert := range certs[1:] {
		inter.AddCert(cert)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: name}); err != nil {
		return err
	}
	c.mu.Lock()
	if c.ok == nil {
		c.ok = map[[sha256.Size]byte]bool{}
	}
	c.ok[key] = true
	c.mu.Unlock()
	return nil
}

// runKubelet starts a registered kubelet's heartbeat.
func (s *Sim) runKubelet(k *kubelet) { k.start(s.ctx) }

// startPodDispatch watches pods and nodes once for the whole fleet and
// hands each pod to the kubelet of its node, which acts on it with its
// own credentials.
func (s *Sim) startPodDispatch() {
	factory := s.informers
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	pods := factory.Core().V1().Pods()
	pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { enqueue(queue, obj) },
		UpdateFunc: func(_, obj any) { enqueue(queue, obj) },
	})
	factory.Start(s.ctx.Done())
	factory.WaitForCacheSync(s.ctx.Done())
	for w := 0; w < 16; w++ {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				key, quit := queue.Get()
				if quit {
					return
				}
				ok := s.syncPod(pods.Lister(), key)
				if ok {
					queue.Forget(key)
				} else {
					queue.AddRateLimited(key)
				}
				queue.Done(key)
			}
		}()
	}
	go func() { <-s.ctx.Done(); queue.ShutDown() }()
}

func enqueue(q workqueue.TypedRateLimitingInterface[string], obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		q.Add(key)
	}
}

func (s *Sim) nodeChanged(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	s.mu.Lock()
	k := s.kubelets[n.Name]
	s.mu.Unlock()
	if k == nil {
		return
	}
	if n.Spec.PodCIDR != "" {
		k.setPodCIDR(n.Spec.PodCIDR)
	}
	// The node lifecycle controller marks a node whose Lease went stale
	// Unknown; a running kubelet reports Ready again, as a real one does
	// on its next status update.
	if !nodeReady(n) && !k.stopped() {
		go k.reportReady(s.ctx)
	}
}

// nodeReady says whether a Node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// syncPod hands a pod to its node's kubelet; false asks for a retry.
func (s *Sim) syncPod(lister corev1listers.PodLister, key string) bool {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return true
	}
	pod, err := lister.Pods(ns).Get(name)
	if err != nil || pod.Spec.NodeName == "" {
		return true
	}
	s.mu.Lock()
	k := s.kubelets[pod.Spec.NodeName]
	s.mu.Unlock()
	if k == nil || k.stopped() {
		// A stopped node does nothing; the pod waits for the node
		// lifecycle controller.
		return true
	}
	return k.runPod(s.ctx, pod)
}
