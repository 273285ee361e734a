package sim

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/internal/fixture"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

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

	runScenarios(t, ctx, s, c)

	s.Stop()
	stopped = true
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort(EndpointAddr(testBlock).String(), "6443"), time.Second); err == nil {
		conn.Close()
		t.Error("the endpoint still listens after Stop")
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
