package sim

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/restore"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
)

func compile(t testing.TB, example string) (*ir.Cluster, *pki.Bundle) {
	t.Helper()
	return fixture.Cluster(t, example, nil), fixture.Bundle(t)
}

// testBlock keeps this package's simulations apart from those of the
// kcompile-sim tests, which run at the same time and choose free blocks
// from 1 up.
const testBlock = 100

func TestRemap(t *testing.T) {
	c, _ := compile(t, "ha-stacked")
	m, addrs := Remap(c, testBlock)
	seen := map[netip.Addr]bool{}
	for _, n := range m.Nodes {
		a := n.Address()
		if !a.IsLoopback() || seen[a] || a == addrs.Endpoint || addrs.Nodes[n.Name] != a {
			t.Errorf("node %s at %s", n.Name, a)
		}
		seen[a] = true
	}
	if !m.Endpoint.Address.IsLoopback() || m.Endpoint.URL() != "https://127.100.0.2:6443" {
		t.Errorf("endpoint %+v", m.Endpoint)
	}
	for _, em := range m.Etcd.Members {
		if em.Address != addrs.Nodes[em.Node] || !strings.Contains(m.Etcd.InitialCluster(), em.Name+"=https://"+em.Address.String()+":2380") {
			t.Errorf("etcd member %+v in %s", em, m.Etcd.InitialCluster())
		}
	}
	if c.Nodes[0].Address().IsLoopback() {
		t.Error("Remap changed the cluster it was given")
	}
}

// TestSimHAStacked boots examples/ha-stacked: three etcd members, three
// API servers behind the load balancer, every node Ready; a Deployment of
// 20 replicas runs on the workers with addresses from their pod ranges;
// a node's credentials cannot touch another node. Then the scenarios of
// testdata play against the same cluster (one boot for all: the machine
// has two cores), and Stop leaves no listener.
func TestSimHAStacked(t *testing.T) {
	c, b := compile(t, "ha-stacked")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	work := t.TempDir()
	var progress strings.Builder
	s, err := Start(ctx, c, b, Options{WorkDir: work, Progress: &progress, Block: testBlock})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	stopped := false
	defer func() {
		if !stopped {
			s.Stop()
		}
	}()
	if err := s.WaitReady(ctx, 3*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	t.Log(progress.String())

	// kubectl's way in: the written admin kubeconfig, through the endpoint.
	cfg, err := clientcmd.BuildConfigFromFlags("", work+"/"+AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 9 {
		t.Fatalf("%d nodes", len(nodes.Items))
	}
	podCIDR := map[string]netip.Prefix{}
	for _, n := range nodes.Items {
		podCIDR[n.Name], _ = netip.ParsePrefix(n.Spec.PodCIDR)
		if _, cp := n.Labels["node-role.kubernetes.io/control-plane"]; cp != strings.HasPrefix(n.Name, "cp") {
			t.Errorf("node %s labels %v", n.Name, n.Labels)
		}
	}

	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(20)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}}}}},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods *corev1.PodList
	if err := s.waitFor(ctx, 2*time.Minute, func() bool {
		pods, err = cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(pods.Items) != 20 {
			return false
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("20 replicas did not run: %v", err)
	}
	// The ranges the controller-manager allocated, by now.
	if nodes, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		podCIDR[n.Name], _ = netip.ParsePrefix(n.Spec.PodCIDR)
	}
	for _, p := range pods.Items {
		ip, _ := netip.ParseAddr(p.Status.PodIP)
		if strings.HasPrefix(p.Spec.NodeName, "cp") || !podCIDR[p.Spec.NodeName].Contains(ip) {
			t.Errorf("pod %s on %s at %s (node range %s)", p.Name, p.Spec.NodeName, ip, podCIDR[p.Spec.NodeName])
		}
	}

	// The Node authorizer and NodeRestriction keep w01 to itself.
	w01, err := s.NodeConfig("w01")
	if err != nil {
		t.Fatal(err)
	}
	n1 := kubernetes.NewForConfigOrDie(w01)
	_, err = n1.CoreV1().Nodes().Patch(ctx, "w02", types.MergePatchType, []byte(`{"metadata":{"labels":{"evil":"yes"}}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("w01 patching w02: %v, want forbidden", err)
	}
	if _, err := n1.CoreV1().Nodes().Patch(ctx, "w01", types.MergePatchType, []byte(`{"metadata":{"labels":{"mine":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("w01 patching itself: %v", err)
	}

	checkAudit(t, ctx, s, work)

	snapshot := snapshotWithObjects(t, ctx, s, cs)

	runScenarios(t, ctx, s, c)

	s.Stop()
	stopped = true
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort(EndpointAddr(testBlock).String(), "6443"), time.Second); err == nil {
		conn.Close()
		t.Error("the endpoint still listens after Stop")
	}

	rehearseRestore(t, ctx, c, b, snapshot)
}

// shop are the objects a snapshot is taken with, and a rehearsal of its
// restore must bring back.
var shopConfig = map[string]string{"currency": "EUR", "vat": "0.21"}

// snapshotWithObjects creates a namespace, a ConfigMap and a Deployment,
// and takes a snapshot through a member's API, as etcd.backup's
// etcdctl does (the database and its SHA-256).
func snapshotWithObjects(t *testing.T, ctx context.Context, s *Sim, cs kubernetes.Interface) string {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "prices"}, Data: shopConfig}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "till"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "till", Namespace: "shop"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "till", Image: "registry.k8s.io/pause:3.10"}}}}},
	}
	if _, err := cs.AppsV1().Deployments("shop").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.waitFor(ctx, 2*time.Minute, func() bool {
		pods, err := cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=till"})
		return err == nil && len(pods.Items) == 2 && pods.Items[0].Status.Phase == corev1.PodRunning && pods.Items[1].Status.Phase == corev1.PodRunning
	}); err != nil {
		t.Fatalf("the till's pods did not run: %v", err)
	}
	s.mu.Lock()
	e := s.etcd[s.cluster.Etcd.Members[0].Name]
	s.mu.Unlock()
	client := v3client.New(e.Server)
	defer client.Close()
	rc, err := client.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// rehearseRestore is kcompile restore --rehearse of examples/ha-stacked:
// a new simulation whose members are restored from the snapshot, with
// etcd's own etcdutl; every key of the snapshot is back, and the objects
// read through the API as they were written.
func rehearseRestore(t *testing.T, ctx context.Context, c *ir.Cluster, b *pki.Bundle, path string) {
	t.Helper()
	snap, err := restore.Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Hashed || snap.Counts["deployments"] < 1 || snap.Counts["namespaces"] < 5 {
		t.Fatalf("the snapshot: hashed %v, counts %v", snap.Hashed, snap.Counts)
	}
	// The simulation's members are the spec's on loopback addresses
	// (Remap): a snapshot of it is matched to those; one of the real
	// cluster is matched to the spec's, as kcompile-sim does.
	remapped, _ := Remap(c, testBlock)
	if err := restore.Match(snap, remapped, b.Trusted(pki.ClusterCA)); err != nil {
		t.Fatalf("the cluster's own snapshot is refused: %v", err)
	}
	if err := restore.Match(snap, c, b.Trusted(pki.ClusterCA)); err == nil || !strings.Contains(err.Error(), "another cluster") {
		t.Errorf("a snapshot of the simulation matched to the spec's own addresses: %v", err)
	}
	etcdutl, err := filepath.Abs("../../.bin/etcdutl")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(etcdutl); err != nil {
		t.Fatalf("etcdutl is missing from .bin: run scripts/tools first (%v)", err)
	}
	work := t.TempDir()
	var progress strings.Builder
	began := time.Now()
	s, err := Start(ctx, c, b, Options{WorkDir: work, Progress: &progress, Block: testBlock, Restore: &Restore{Snapshot: snap, Etcdutl: etcdutl}})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	defer s.Stop()
	if err := s.WaitReady(ctx, 3*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	rep, err := s.RestoreReport(ctx, began)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	rep.WriteText(&text, snap)
	t.Logf("%s\n%s", progress.String(), text.String())
	if len(rep.Missing) > 0 {
		t.Errorf("keys of the snapshot not back: %v", rep.Missing)
	}
	if rep.Revision <= snap.Revision+restore.BumpRevision {
		t.Errorf("revision %d after the restore, want past the snapshot's %d moved on by %d", rep.Revision, snap.Revision, restore.BumpRevision)
	}
	cs := kubernetes.NewForConfigOrDie(s.AdminConfig())
	cm, err := cs.CoreV1().ConfigMaps("shop").Get(ctx, "prices", metav1.GetOptions{})
	if err != nil || !maps.Equal(cm.Data, shopConfig) {
		t.Errorf("shop/prices after the restore: %v %v", cm, err)
	}
	d, err := cs.AppsV1().Deployments("shop").Get(ctx, "till", metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 2 {
		t.Errorf("shop/till after the restore: %v", err)
	}
	if err := s.waitFor(ctx, time.Minute, func() bool {
		pods, err := cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=till"})
		return err == nil && len(pods.Items) == 2 && pods.Items[0].Status.Phase == corev1.PodRunning && pods.Items[1].Status.Phase == corev1.PodRunning
	}); err != nil {
		t.Errorf("the till's pods do not run after the restore: %v", err)
	}
}

// TestScenarioTestdata: the scenarios TestSimHAStacked plays load
// cleanly against the cluster they are written for, without booting it.
func TestScenarioTestdata(t *testing.T) {
	c, _ := compile(t, "ha-stacked")
	files, err := filepath.Glob("testdata/*.cue")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in testdata: %v", err)
	}
	for _, f := range files {
		sc, diags := compiler.LoadScenario(f, c)
		if sc == nil || len(diags) > 0 {
			var b strings.Builder
			diags.WriteText(&b)
			t.Errorf("%s:\n%s", f, b.String())
		}
	}
}

// runScenarios plays the scenarios of testdata in order; each leaves the
// cluster whole again. A scenario with a wrong expectation fails, naming
// its step and the step's position.
func runScenarios(t *testing.T, ctx context.Context, s *Sim, c *ir.Cluster) {
	for _, name := range []string{"etcd-quorum", "control-plane", "worker"} {
		sc, diags := compiler.LoadScenario("testdata/"+name+".cue", c)
		if sc == nil {
			t.Fatalf("%s: %v", name, diags)
		}
		var report strings.Builder
		ok, err := s.Run(ctx, sc, &report)
		if err != nil || !ok {
			t.Errorf("scenario %s: %v\n%s", name, err, report.String())
		} else {
			t.Logf("scenario %s:\n%s", name, report.String())
		}
		// The endpoint is a VIP of the control-plane nodes: losing its
		// holder moves it, and the report says from where to where.
		if name == "control-plane" && c.Endpoint.Mode == ir.EndpointVIP {
			for _, want := range []string{"stop node cp1, which holds the API endpoint's VIP", "the VIP moved from cp1 to cp2 in "} {
				if !strings.Contains(report.String(), want) {
					t.Errorf("scenario %s: the report does not say %q:\n%s", name, want, report.String())
				}
			}
		}
	}
	wrong := filepath.Join(t.TempDir(), "wrong.cue")
	if err := os.WriteFile(wrong, []byte(`name: "wrong", steps: [{expect: write: "fails"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, diags := compiler.LoadScenario(wrong, c)
	if sc == nil {
		t.Fatal(diags)
	}
	var report strings.Builder
	if ok, _ := s.Run(ctx, sc, &report); ok || !strings.Contains(report.String(), "FAIL step 1 at "+wrong+":1:24: expect writes to fail") {
		t.Errorf("a wrong expectation passed:\n%s", report.String())
	}
}

// checkAudit reads what the API servers audited under the compiled
// policy: a node's heartbeat (its Lease renewed) is not logged, while its
// Lease's creation, its own Node patch and the admin's Deployment are,
// with their bodies; the policy's rule is honoured by the real API server,
// not only written.
func checkAudit(t *testing.T, ctx context.Context, s *Sim, work string) {
	t.Helper()
	s.mu.Lock()
	k := s.kubelets["w01"]
	s.mu.Unlock()
	if err := k.renewLease(ctx); err != nil {
		t.Fatalf("w01 renewing its Lease: %v", err)
	}
	type event struct {
		Level, Verb   string
		User          struct{ Username string }
		ObjectRef     struct{ Resource, Namespace, Name string }
		RequestObject json.RawMessage
	}
	var renewals, leaseCreates, nodePatches, deployments int
	// The log is written as requests finish; read until the Deployment's
	// creation and w01's Lease are there (or give up).
	if err := s.waitFor(ctx, 30*time.Second, func() bool {
		renewals, leaseCreates, nodePatches, deployments = 0, 0, 0, 0
		logs, _ := filepath.Glob(filepath.Join(work, "tree/nodes/*/var/log/kubernetes/audit/audit.log"))
		for _, log := range logs {
			data, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				var e event
				if err := json.Unmarshal([]byte(line), &e); err != nil {
					t.Fatalf("%s: %v: %q", log, err, line)
				}
				r := e.ObjectRef
				switch {
				case r.Resource == "leases" && r.Namespace == "kube-node-lease" && e.Verb == "update" && strings.HasPrefix(e.User.Username, "system:node:"):
					renewals++
				case r.Resource == "leases" && r.Name == "w01" && e.Verb == "create" && e.User.Username == "system:node:w01":
					leaseCreates++
				case r.Resource == "nodes" && r.Name == "w01" && e.Verb == "patch" && e.User.Username == "system:node:w01" && len(e.RequestObject) > 0:
					nodePatches++
				case r.Resource == "deployments" && r.Name == "web" && e.Verb == "create" && e.Level == "Request" && len(e.RequestObject) > 0:
					deployments++
				}
			}
		}
		return leaseCreates > 0 && nodePatches > 0 && deployments > 0
	}); err != nil {
		t.Errorf("audit logs: %d Lease creations by w01, %d patches of w01 by itself, %d Deployment creations with their bodies; want each",
			leaseCreates, nodePatches, deployments)
	}
	if renewals > 0 {
		t.Errorf("%d node heartbeats (Lease renewals) audited; the compiled policy leaves them out", renewals)
	}
}
