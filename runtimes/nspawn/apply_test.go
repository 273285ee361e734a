package nspawn

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/kcompile/kcompile/compare"
	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/pipeline"
	change "github.com/kcompile/kcompile/plan"
	"github.com/kcompile/kcompile/review"
	"github.com/kcompile/kcompile/targets"
)

// stopAt is a log that cancels an apply once it has said a line
// holding at.
type stopAt struct {
	mu     sync.Mutex
	b      bytes.Buffer
	at     string
	cancel context.CancelFunc
	// each is told every line as it is written.
	each func(line string)
}

func (s *stopAt) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.b.Write(p)
	stop := s.at != "" && strings.Contains(s.b.String(), s.at)
	s.mu.Unlock()
	if stop {
		s.cancel()
	}
	if s.each != nil {
		for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
			s.each(strings.TrimSpace(line))
		}
	}
	return len(p), nil
}

func (s *stopAt) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// applyEnv is a cluster booted for apply's tests from a spec directory,
// with the bundle and clock it was built with.
type applyEnv struct {
	t       *testing.T
	c       *Cluster
	work    string
	secrets string
	b       *pki.Bundle
	issued  time.Time
	// ssh, when set, is how apply reaches the nodes.
	ssh *SSH
	// gateTimeout, when set, bounds apply's gates (else 3 minutes).
	gateTimeout time.Duration
	// details are long logs (apply's, step by step) a failed test
	// prints after its failures and up's log: CI shows the head and
	// the tail of a long output, and they would push the failures out
	// of both.
	details []string
}

// detail keeps a long log for a failed test's end.
func (e *applyEnv) detail(format string, args ...any) {
	e.details = append(e.details, fmt.Sprintf(format, args...))
}

// bootForApply boots the spec in dir from its systemd trees with the
// programs of binaries (".bin/node" when empty), recording the spec as
// kcompile up does.
func bootForApply(t *testing.T, dir, binaries string) *applyEnv {
	return bootForApplyFrom(t, dir, binaries, pipeline.Systemd)
}

// bootForApplyFrom is bootForApply with the target the machines boot
// from.
func bootForApplyFrom(t *testing.T, dir, binaries string, target pipeline.Target) *applyEnv {
	t.Helper()
	e := &applyEnv{t: t, issued: time.Now().Truncate(time.Second)}
	// Registered before up's, so run after it: cleanups run last first.
	t.Cleanup(func() {
		if t.Failed() {
			for _, d := range e.details {
				t.Log(d)
			}
		}
	})
	var err error
	if e.b, err = pki.New(rand.Reader, e.issued, pki.NewOptions{Algorithm: pki.ECDSAP256, CAValidity: 10 * 365 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	e.secrets = filepath.Join(t.TempDir(), "secrets.json")
	data, err := e.b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.secrets, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ts := []pipeline.Target{pipeline.Systemd}
	if target == pipeline.CloudInit {
		ts = append(ts, pipeline.CloudInit)
	}
	out, err := pipeline.Run(pipeline.Input{Source: compiler.Source{Dir: dir}, Bundle: e.b, Now: e.issued, Issue: true, Targets: ts})
	if err != nil || out.Diagnostics.HasErrors() {
		t.Fatal(err, out.Diagnostics)
	}
	spec, diags := compiler.Concrete(compiler.Source{Dir: dir})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	text, err := compiler.StateText(spec)
	if err != nil {
		t.Fatal(err)
	}
	e.work = filepath.Join(t.TempDir(), "work")
	e.c = bootIn(t, out, target, e.work, false, func(cfg *Config) {
		cfg.Spec, cfg.Issued, cfg.Secrets = text, e.issued, data
		if binaries != "" {
			cfg.Binaries = fixture.Path(binaries)
		}
	})
	return e
}

// build builds a spec as the running cluster was built, with e.b.
func (e *applyEnv) build(src compiler.Source) (*ir.Cluster, *targets.Tree, error) {
	return e.buildWith(e.b, src)
}

// buildWith builds a spec with bundle b and the running cluster's clock.
func (e *applyEnv) buildWith(b *pki.Bundle, src compiler.Source) (*ir.Cluster, *targets.Tree, error) {
	out, err := pipeline.Run(pipeline.Input{Source: src, Bundle: b, Now: e.issued, Issue: true, Targets: []pipeline.Target{pipeline.Systemd}})
	if err != nil {
		return nil, nil, err
	}
	if out.Diagnostics.HasErrors() {
		return nil, nil, fmt.Errorf("%v", out.Diagnostics)
	}
	return out.Cluster, out.Trees[pipeline.Systemd], nil
}

// plan plans from the recorded spec to the one in dir, as kcompile
// apply does.
func (e *applyEnv) plan(dir string) *change.Plan {
	e.t.Helper()
	p, err := compare.Plan(compare.Input{Args: []string{filepath.Join(e.work, SpecDir), dir}, Secrets: e.secrets, OldSecrets: filepath.Join(e.work, BundleFile), Now: time.Now(), Rand: rand.Reader, Cwd: "/"}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// steps are a plan's steps as "kind [nodes] [restarts]".
func steps(p *change.Plan) []string {
	var out []string
	for _, s := range p.Stages {
		for _, st := range s.Steps {
			out = append(out, fmt.Sprintf("%s %v %v", st.Kind, st.Nodes, st.Restarts))
		}
	}
	return out
}

// apply applies p (to the spec in dir) as kcompile apply does.
func (e *applyEnv) apply(ctx context.Context, p *change.Plan, dir string, log *stopAt, binaries string, dryRun, resume bool) error {
	e.t.Helper()
	running, err := ReadRunning(e.work)
	if err != nil {
		e.t.Fatal(err)
	}
	specDir := filepath.Join(e.work, SpecDir)
	oldData, diags := compiler.Concrete(compiler.Source{Dir: specDir})
	if diags.HasErrors() {
		e.t.Fatal(diags)
	}
	src, err := compiler.StateSource(compiler.Source{Dir: specDir}, oldData)
	if err != nil {
		e.t.Fatal(err)
	}
	// OLD is built with the bundle the running cluster records, the
	// states with e.b: the next stage's during a rotation.
	recorded, err := os.ReadFile(running.Bundle)
	if err != nil {
		e.t.Fatal(err)
	}
	runningB, err := pki.Parse(recorded)
	if err != nil {
		e.t.Fatal(err)
	}
	old, oldTree, err := e.buildWith(runningB, src)
	if err != nil {
		e.t.Fatal(err)
	}
	secrets, err := e.b.Marshal()
	if err != nil {
		e.t.Fatal(err)
	}
	if binaries != "" {
		binaries = fixture.Path(binaries)
	}
	gate := 3 * time.Minute
	if e.gateTimeout > 0 {
		gate = e.gateTimeout
	}
	return Apply(ctx, ApplyConfig{Running: running, Plan: p, Old: old, OldTree: oldTree,
		Build: func(state map[string]any, tolerate []string) (*ir.Cluster, *targets.Tree, error) {
			src, err := compiler.StateSource(compiler.Source{Dir: dir, Tolerate: tolerate}, state)
			if err != nil {
				return nil, nil, err
			}
			return e.build(src)
		},
		Binaries: binaries, DryRun: dryRun, Resume: resume, GateTimeout: gate, Log: log, Now: time.Now, SSH: e.ssh, Secrets: secrets})
}

// invocations are the InvocationIDs of units on nodes: a unit restarted
// has a new one.
func (e *applyEnv) invocations(units map[string][]string) map[string]string {
	e.t.Helper()
	out := map[string]string{}
	for n, us := range units {
		for _, u := range us {
			id, err := e.c.Exec(context.Background(), n, "systemctl", "show", "-p", "InvocationID", "--value", u)
			if err != nil || strings.TrimSpace(string(id)) == "" {
				e.t.Fatalf("%s %s: %v %q", n, u, err, id)
			}
			out[n+" "+u] = strings.TrimSpace(string(id))
		}
	}
	return out
}

// restarted names the units whose invocation changed.
func restarted(before, after map[string]string) []string {
	var out []string
	for k, v := range after {
		if before[k] != v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// specDir writes a spec directory of dir's cluster.cue, each of edits
// (old, new) replaced, and the extra files.
func specDir(t *testing.T, dir string, edits [][2]string, extra map[string]string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "cluster.cue"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, e := range edits {
		if !strings.Contains(text, e[0]) {
			t.Fatalf("%s has no %q", dir, e[0])
		}
		text = strings.ReplaceAll(text, e[0], e[1])
	}
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "cluster.cue"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, content := range extra {
		if err := os.WriteFile(filepath.Join(out, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestUpApply changes a running cluster's configuration with apply: a
// worker pool's maxPods, which restarts only that pool's kubelets, one
// node at a time (its budget). A dry run changes nothing; an apply
// interrupted after its first step says how to go on, refuses to start
// over, and goes on with --resume from the second step; at the end every
// node runs the new spec's files (a second apply finds nothing to do and
// the running files equal the new build), and nothing but the two
// kubelets restarted. apply reaches the nodes over SSH, as it does hosts
// of bare metal: the machines boot from their cloud-init seeds, which
// make the spec's access user with the test's key and sudo, and each
// node's host key is held to a known_hosts file.
func TestUpApply(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	access := fmt.Sprintf("package cluster\n\naccess: users: ops: {sshAuthorizedKeys: [%q], sudo: true}\n", strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))))
	dir := specDir(t, fixture.Path("runtimes/nspawn/testdata/three-nodes"), nil, map[string]string{"access.cue": access})
	e := bootForApplyFrom(t, dir, "", pipeline.CloudInit)
	k := admin(t, e.c)
	ctx := context.Background()
	// A command run in a machine has the machine's environment, not
	// the host's: a host user's TMPDIR names no directory there.
	func() {
		was, had := os.LookupEnv("TMPDIR")
		defer func() {
			if had {
				os.Setenv("TMPDIR", was)
			} else {
				os.Unsetenv("TMPDIR")
			}
		}()
		os.Setenv("TMPDIR", "/only-on-the-host")
		if out, err := e.c.Exec(ctx, "cp1", "sh", "-c", "mktemp -d && env"); err != nil || strings.Contains(string(out), "only-on-the-host") {
			t.Errorf("a command in cp1 has the host's environment: %v\n%s", err, out)
		}
	}()
	var hosts strings.Builder
	for _, n := range e.c.cfg.Cluster.Nodes {
		out, err := e.c.Exec(ctx, n.Name, "sh", "-c", "cloud-init status --wait >/dev/null; cat /etc/ssh/ssh_host_ed25519_key.pub")
		f := strings.Fields(string(out))
		if err != nil || len(f) < 2 {
			t.Fatalf("%s's host key: %v %q", n.Name, err, out)
		}
		fmt.Fprintf(&hosts, "%s %s %s\n", n.Address(), f[0], f[1])
	}
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(known, []byte(hosts.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	hostKeys, err := knownhosts.New(known)
	if err != nil {
		t.Fatal(err)
	}
	e.ssh = &SSH{User: "ops", Signers: []ssh.Signer{signer}, HostKeys: hostKeys}
	pods := "package cluster\n\nworkers: pools: w: capacity: maxPods: 90\n"
	newDir := specDir(t, dir, nil, map[string]string{"access.cue": access, "pods.cue": pods})
	p := e.plan(newDir)
	if got, want := steps(p), []string{"workers [w1] [kubelet.service]", "workers [w2] [kubelet.service]"}; !slices.Equal(got, want) {
		t.Fatalf("plan %q, want %q", got, want)
	}
	units := []string{"kubelet.service", "containerd.service", "kube-proxy.service"}
	watched := map[string][]string{"cp1": append(slices.Clone(units), "etcd.service", "kube-apiserver.service"), "w1": units, "w2": units}

	// On a cluster not healthy (w2's kubelet stopped: its Node stays
	// Ready for the lease's 40 s) a dry run says so and what it would
	// do, and apply waits on the cluster's health before its first step,
	// and changes nothing when it does not come.
	if out, err := e.c.Exec(ctx, "w2", "systemctl", "stop", "kubelet.service"); err != nil {
		t.Fatalf("stopping w2's kubelet: %v\n%s", err, out)
	}
	start := e.invocations(watched)
	dry := &stopAt{}
	if err := e.apply(ctx, p, newDir, dry, "", true, false); err != nil {
		t.Fatalf("dry run: %v\n%s", err, dry)
	}
	for _, said := range []string{
		"the running cluster is not healthy now (w2: kubelet.service inactive",
		"apply would wait up to 3m0s for it before step 1",
		"would lay 1 files on w1 (/var/lib/kubelet/config.yaml), then restart kubelet.service",
	} {
		if !strings.Contains(dry.String(), said) {
			t.Errorf("the dry run does not say %q:\n%s", said, dry)
		}
	}
	e.gateTimeout = 3 * time.Second
	unhealthy := &stopAt{}
	err = e.apply(ctx, p, newDir, unhealthy, "", false, false)
	e.gateTimeout = 0
	if err == nil || !strings.Contains(err.Error(), `apply changes nothing on a cluster that is not healthy: gate "the running cluster healthy before step 1" does not hold (w2: kubelet.service inactive`) {
		t.Errorf("an apply to a cluster with a kubelet stopped: %v\n%s", err, unhealthy)
	}
	if strings.Contains(unhealthy.String(), "step 1/2") {
		t.Errorf("the apply to a cluster not healthy took a step:\n%s", unhealthy)
	}
	if _, err := os.Stat(filepath.Join(e.work, ProgressFile)); !os.IsNotExist(err) {
		t.Errorf("the apply to a cluster not healthy left a progress file: %v", err)
	}
	if r := restarted(start, e.invocations(watched)); len(r) > 0 {
		t.Errorf("the dry run and the apply to a cluster not healthy restarted %v", r)
	}
	if out, err := e.c.Exec(ctx, "w2", "systemctl", "start", "kubelet.service"); err != nil {
		t.Fatalf("starting w2's kubelet: %v\n%s", err, out)
	}
	start = e.invocations(watched)

	// Interrupted once the first step is done.
	ctx1, cancel := context.WithCancel(ctx)
	defer cancel()
	first := &stopAt{at: "step 1/2 done", cancel: cancel}
	err = e.apply(ctx1, p, newDir, first, "", false, false)
	if err == nil || !strings.Contains(err.Error(), "stopped after step 1 of 2") || !strings.Contains(err.Error(), "--resume goes on from step 2") {
		t.Fatalf("an interrupted apply: %v\n%s", err, first)
	}
	// w2's kubelet, just started again, was waited on.
	if !strings.Contains(first.String(), "gate: the running cluster healthy before step 1") {
		t.Errorf("the apply does not say it found the cluster healthy before its first step:\n%s", first)
	}
	afterFirst := e.invocations(watched)
	if r := restarted(start, afterFirst); !slices.Equal(r, []string{"w1 kubelet.service"}) {
		t.Errorf("the first step restarted %v, want w1's kubelet", r)
	}
	// Starting over is refused; --resume goes on.
	if err := e.apply(ctx, e.plan(newDir), newDir, &stopAt{}, "", false, false); err == nil || !strings.Contains(err.Error(), "run it again with --resume to go on from step 2") {
		t.Errorf("an apply over a stopped one: %v", err)
	}
	second := &stopAt{}
	if err := e.apply(ctx, e.plan(newDir), newDir, second, "", false, true); err != nil {
		t.Fatalf("resume: %v\n%s", err, second)
	}
	e.detail("the apply, interrupted:\n%s\nresumed:\n%s", first, second)
	if strings.Contains(second.String(), "step 1/2") {
		t.Errorf("the resumed apply took step 1 again:\n%s", second)
	}
	for _, gate := range []string{"gate: w2 Ready, its kubelet's lease renewed since the restart", "step 2/2 done"} {
		if !strings.Contains(second.String(), gate) {
			t.Errorf("the resumed apply does not say %q:\n%s", gate, second)
		}
	}
	if r := restarted(afterFirst, e.invocations(watched)); !slices.Equal(r, []string{"w2 kubelet.service"}) {
		t.Errorf("the second step restarted %v, want w2's kubelet", r)
	}
	// The new setting is live, where the spec says.
	for n, want := range map[string]string{"cp1": "110", "w1": "90", "w2": "90"} {
		var node corev1.Node
		eventually(t, time.Minute, n+"'s pod capacity", func() error {
			if err := k.get(ctx, "/api/v1/nodes/"+n, &node); err != nil {
				return err
			}
			if got := node.Status.Capacity.Pods().String(); got != want {
				return fmt.Errorf("%s pods, want %s", got, want)
			}
			return nil
		})
	}
	// The cluster is NEW: its recorded spec is, and a second apply finds
	// the nodes' files to be NEW's build and nothing to do.
	if _, err := os.Stat(filepath.Join(e.work, ProgressFile)); !os.IsNotExist(err) {
		t.Errorf("the progress file stayed: %v", err)
	}
	again := &stopAt{}
	if err := e.apply(ctx, e.plan(newDir), newDir, again, "", false, false); err != nil || !strings.Contains(again.String(), "nothing to apply") {
		t.Errorf("a second apply: %v\n%s", err, again)
	}
	// Over SSH, as ops: each node's sshd says so.
	for _, n := range []string{"cp1", "w1", "w2"} {
		out, err := e.c.Exec(ctx, n, "journalctl", "-u", "ssh.service", "--no-pager", "-q")
		if err != nil || !strings.Contains(string(out), "Accepted publickey for ops") {
			t.Errorf("%s's sshd does not say ops logged in: %v\n%s", n, err, out)
		}
	}
	// The service CIDR moves, over SSH too.
	movedDir := serviceMove(t, e, k, newDir, map[string]string{"access.cue": access, "pods.cue": pods})
	// A host whose key is not the known one is refused.
	e.ssh.HostKeys = ssh.FixedHostKey(signer.PublicKey())
	if err := e.apply(ctx, e.plan(movedDir), movedDir, &stopAt{}, "", false, false); err == nil || !strings.Contains(err.Error(), "host key mismatch") {
		t.Errorf("an apply to hosts of unknown keys: %v", err)
	}
}

// steady asks the API through the endpoint every 100 ms (a read of the
// default namespace, with a 2 s timeout) and samples a Deployment and its
// PodDisruptionBudget, until stopped.
type steady struct {
	mu       sync.Mutex
	ok, fail int
	errs     []string
	failures []steadyFailure
	last     time.Time
	longest  time.Duration
	// unavailable are the samples in which the Deployment had no
	// available replica or the budget's healthy pods were below its
	// minimum.
	unavailable []string
	// notReady are the samples of Nodes (startSteadyFrom's) in which one
	// was not Ready.
	notReady []nodeNotReady
	cancel   context.CancelFunc
	done     chan struct{}
}

// nodeNotReady is a sample of a Node not Ready: when, which, and its
// Ready condition's reason, message and transition.
type nodeNotReady struct {
	at            time.Time
	node, message string
}

type steadyFailure struct {
	// at is when the request was sent, took how long until it failed.
	at   time.Time
	took time.Duration
	err  string
}

func startSteady(ctx context.Context, k *kube, deployment, budget string) *steady {
	return startSteadyWith(ctx, func() (*kube, error) { return k, nil }, false, deployment, budget)
}

// startSteadyFrom is startSteady with the kubeconfig at path, read again
// at each request as kubectl reads it at each run, that also samples
// the Nodes.
func startSteadyFrom(ctx context.Context, path, deployment, budget string) *steady {
	f := &kubeconfigFile{path: path}
	return startSteadyWith(ctx, func() (*kube, error) {
		k, _, err := f.kube()
		return k, err
	}, true, deployment, budget)
}

func startSteadyWith(ctx context.Context, client func() (*kube, error), nodes bool, deployment, budget string) *steady {
	ctx, cancel := context.WithCancel(ctx)
	s := &steady{cancel: cancel, done: make(chan struct{}), last: time.Now()}
	go func() {
		defer close(s.done)
		for i := 0; ctx.Err() == nil; i++ {
			began := time.Now()
			k, err := client()
			if err == nil {
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				var ns corev1.Namespace
				err = k.get(rctx, "/api/v1/namespaces/default", &ns)
				cancel()
			}
			now := time.Now()
			s.mu.Lock()
			if err == nil {
				s.ok++
				s.longest = max(s.longest, now.Sub(s.last))
				s.last = now
			} else if ctx.Err() == nil {
				s.fail++
				s.errs = append(s.errs, now.Format("15:04:05.000")+" "+err.Error())
				s.failures = append(s.failures, steadyFailure{at: began, took: now.Sub(began), err: err.Error()})
			}
			s.mu.Unlock()
			if err == nil && i%5 == 0 {
				var d appsv1.Deployment
				var pdb policyv1.PodDisruptionBudget
				var list corev1.NodeList
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				errD := k.get(rctx, "/apis/apps/v1/namespaces/default/deployments/"+deployment, &d)
				errP := k.get(rctx, "/apis/policy/v1/namespaces/default/poddisruptionbudgets/"+budget, &pdb)
				errN := errors.New("not asked")
				if nodes {
					errN = k.get(rctx, "/api/v1/nodes", &list)
				}
				cancel()
				s.mu.Lock()
				if errD == nil && errP == nil && (d.Status.AvailableReplicas < 1 || pdb.Status.CurrentHealthy < pdb.Status.DesiredHealthy) {
					s.unavailable = append(s.unavailable, fmt.Sprintf("%s: %d available, %d healthy of %d desired",
						now.Format("15:04:05.000"), d.Status.AvailableReplicas, pdb.Status.CurrentHealthy, pdb.Status.DesiredHealthy))
				}
				for _, n := range list.Items {
					if errN == nil && !nodeReady(n) {
						nr := nodeNotReady{at: now, node: n.Name}
						for _, c := range n.Status.Conditions {
							if c.Type == corev1.NodeReady {
								nr.message = fmt.Sprintf("%s: %s, since %s", c.Reason, c.Message, c.LastTransitionTime.Format("15:04:05"))
							}
						}
						s.notReady = append(s.notReady, nr)
					}
				}
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *steady) stop() {
	s.cancel()
	<-s.done
}

// workloadHA is a Deployment of two echo replicas that may run on the
// control-plane nodes too, a PodDisruptionBudget keeping one, and a
// Service.
const workloadHA = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
      topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}]
      containers:
      - name: echo
        image: registry.kcompile.test/echo:v1
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`

// kubeletsAgainst reads the audit log of node's API server, upgraded
// once from 1.36 to 1.37 (its 1.37 process started when systemd says),
// and holds every request of a kubelet (user system:node:*, its version
// in its user agent) to the minor the server ran when it received it:
// newer are those of a kubelet newer than that.
func kubeletsAgainst(t *testing.T, c *Cluster, node string) (checked int, newer []string) {
	t.Helper()
	ctx := context.Background()
	out, err := c.Exec(ctx, node, "systemctl", "show", "--timestamp=us+utc", "-p", "ExecMainStartTimestamp", "--value", "kube-apiserver.service")
	if err != nil {
		t.Fatal(err)
	}
	started, err := time.Parse("Mon 2006-01-02 15:04:05.000000 MST", strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("%s: kube-apiserver's start %q: %v", node, out, err)
	}
	log, err := c.Exec(ctx, node, "cat", layout.Abs(layout.AuditLog))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(log), "\n") {
		var ev auditv1.Event
		if line == "" || json.Unmarshal([]byte(line), &ev) != nil || !strings.HasPrefix(ev.User.Username, "system:node:") {
			continue
		}
		v, ok := strings.CutPrefix(strings.Fields(ev.UserAgent + " ")[0], "kubelet/v1.")
		if !ok {
			continue
		}
		kubelet, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
		server := 36
		if !ev.RequestReceivedTimestamp.Time.Before(started) {
			server = 37
		}
		checked++
		if kubelet > server {
			newer = append(newer, fmt.Sprintf("%s %s %s at %s (1.%d)", ev.User.Username, ev.UserAgent, ev.Verb, ev.RequestReceivedTimestamp.Format("15:04:05.000000"), server))
		}
	}
	return checked, newer
}

// TestUpApplyVersionHA upgrades the highly available cluster (three
// control-plane nodes holding the endpoint's VIP, a worker in each of two
// pools) from Kubernetes 1.36 to 1.37 with apply, while a client asks
// the API through the VIP every 100 ms and a Deployment behind a
// PodDisruptionBudget serves: the API servers one at a time, then the
// controllers, then each node drained first, pool by pool. It reports
// the failed requests and the longest wait between two answers, and
// checks that the budget always held, that no kubelet was newer than an
// API server after a step nor ever reached one of an older minor (every
// kubelet request in the API servers' audit logs), that etcd and
// containerd never restarted, and that every component runs 1.37.2 at
// the end, the Nodes' labels and taints and the nodes' files the new
// build's. The upgraded cluster then goes through the VIP drill
// (vipFailover), has every CA and its service-account key rotated
// (rotation) and its machines changed (growAndShrink): one cluster for
// the four, as booting one takes a minute and a half of CI's 25.
func TestUpApplyVersionHA(t *testing.T) {
	// The change also moves the pools' labels and taints, which a
	// restarted kubelet does not: the plan's labels step sets them.
	dir := specDir(t, fixture.Path("runtimes/nspawn/testdata/vip"), [][2]string{twoPools,
		{`blue: {count: 1,`, `blue: {labels: {tier: "batch"}, count: 1,`},
		{`green: {count: 1,`, `green: {taints: [{key: "dedicated", value: "green", effect: "PreferNoSchedule"}], count: 1,`}}, nil)
	oldDir := specDir(t, dir, [][2]string{{`kubernetes: version: "1.37.2"`, `kubernetes: version: "1.36.3"`},
		{`blue: {labels: {tier: "batch"},`, `blue: {labels: {tier: "web", legacy: "yes"},`},
		{`green: {taints: [{key: "dedicated", value: "green", effect: "PreferNoSchedule"}],`, `green: {`}}, nil)
	e := bootForApply(t, oldDir, ".bin/node-1.36")
	k := admin(t, e.c)
	ctx := context.Background()
	if _, err := k.apply(ctx, "web", []byte(workloadHA)); err != nil {
		t.Fatal(err)
	}
	webAvailable(t, k)
	p := e.plan(dir)
	var kinds []string
	for _, s := range steps(p) {
		kinds = append(kinds, strings.SplitN(s, " [", 2)[0]+" "+strings.SplitN(strings.SplitN(s, "[", 2)[1], "]", 2)[0])
	}
	want := []string{"api server cp1", "api server cp2", "api server cp3", "controllers cp1", "controllers cp2", "controllers cp3", "node cp1", "node cp2", "node cp3", "workers w1", "workers g1", "labels g1 w1"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("plan %q, want %q", kinds, want)
	}
	watched := map[string][]string{"w1": {"containerd.service"}, "g1": {"containerd.service"}}
	for _, n := range []string{"cp1", "cp2", "cp3"} {
		watched[n] = []string{"etcd.service", "containerd.service", "keepalived.service"}
	}
	start := e.invocations(watched)
	var skew []string
	log := &stopAt{each: func(line string) {
		if !strings.HasPrefix(line, "step ") || !strings.Contains(line, " done in ") {
			return
		}
		var nodes corev1.NodeList
		if err := k.get(ctx, "/api/v1/nodes", &nodes); err != nil {
			skew = append(skew, line+": "+err.Error())
			return
		}
		oldest := "v9"
		for _, n := range []string{"cp1", "cp2", "cp3"} {
			out, err := e.c.Exec(ctx, n, "sh", "-c", "readlink /proc/$(systemctl show -p MainPID --value kube-apiserver.service)/exe >/dev/null && /usr/local/bin/kube-apiserver --version")
			if v := strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes "); err == nil && v < oldest {
				oldest = v
			}
		}
		for _, n := range nodes.Items {
			if kv := n.Status.NodeInfo.KubeletVersion; kv > oldest {
				skew = append(skew, fmt.Sprintf("%s: %s's kubelet %s is newer than an API server (%s)", line, n.Name, kv, oldest))
			}
		}
	}}
	client := startSteady(ctx, k, "web", "web")
	begin := time.Now()
	err := e.apply(ctx, p, dir, log, ".bin/node", false, false)
	client.stop()
	t.Logf("apply took %s", time.Since(begin).Round(time.Second))
	e.detail("the upgrade's apply:\n%s", log)
	t.Logf("API through the VIP: %d answered, %d failed, longest wait %s; failures: %q", client.ok, client.fail, client.longest.Round(10*time.Millisecond), client.errs)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if len(skew) > 0 {
		t.Errorf("version skew after a step: %q", skew)
	}
	for _, n := range []string{"cp1", "cp2", "cp3"} {
		checked, newer := kubeletsAgainst(t, e.c, n)
		t.Logf("%s's audit log: %d requests of kubelets, each against the minor its API server ran", n, checked)
		if checked == 0 {
			t.Errorf("%s's audit log holds no request of a kubelet", n)
		}
		if len(newer) > 0 {
			t.Errorf("kubelets reached %s's API server of an older minor: %q", n, newer)
		}
	}
	if len(client.unavailable) > 0 {
		t.Errorf("the Deployment's budget did not hold: %q", client.unavailable)
	}
	// An API server's own restart may lose what is in flight to it when
	// it stops (one request of this client at a time: at most one per
	// restart); nothing else may fail, and the endpoint never goes
	// silent for more than 2 s.
	if client.fail > 3 || client.longest > 2*time.Second {
		t.Errorf("the API through the VIP: %d failed requests, longest wait %s", client.fail, client.longest)
	}
	if r := restarted(start, e.invocations(watched)); len(r) > 0 {
		t.Errorf("apply restarted %v, which no step names", r)
	}
	programs := map[string][]string{"w1": {"kubelet", "kube-proxy"}, "g1": {"kubelet", "kube-proxy"}}
	for _, n := range []string{"cp1", "cp2", "cp3"} {
		programs[n] = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}
	}
	for n, progs := range programs {
		for _, prog := range progs {
			out, err := e.c.Exec(ctx, n, "sh", "-c", "p=$(systemctl show -p MainPID --value "+prog+".service) && readlink /proc/$p/exe && /usr/local/bin/"+prog+" --version")
			if got := strings.Fields(strings.TrimSpace(string(out))); err != nil || len(got) != 3 || got[0] != "/usr/local/bin/"+prog || got[2] != "v1.37.2" {
				t.Errorf("%s's %s: %q (%v)", n, prog, out, err)
			}
		}
	}
	// The Nodes carry the new labels and taints, without those only the
	// old spec gave.
	for name, want := range map[string][2]string{"w1": {"tier=batch", ""}, "g1": {"", "dedicated=green:PreferNoSchedule"}} {
		var node corev1.Node
		if err := k.get(ctx, "/api/v1/nodes/"+name, &node); err != nil {
			t.Fatal(err)
		}
		var taints []string
		for _, tn := range node.Spec.Taints {
			taints = append(taints, tn.ToString())
		}
		if _, legacy := node.Labels["legacy"]; want[0] != "" && (node.Labels["tier"] != "batch" || legacy) {
			t.Errorf("%s's labels: %v, want tier=batch and no legacy", name, node.Labels)
		}
		if want[1] != "" && !slices.Contains(taints, want[1]) {
			t.Errorf("%s's taints: %q, want %s", name, taints, want[1])
		}
	}
	again := &stopAt{}
	if err := e.apply(ctx, e.plan(dir), dir, again, ".bin/node", false, false); err != nil || !strings.Contains(again.String(), "nothing to apply") {
		t.Errorf("a second apply: %v\n%s", err, again)
	}
	e.runningIsBuilt(ctx, dir, oldDir)
	if t.Failed() {
		return
	}
	// The upgraded cluster's VIP holder loses its power, and comes back.
	vipFailover(t, e.c, "w1")
	webAvailable(t, k)
	if t.Failed() {
		return
	}
	// Every CA and the service-account key rotate, stage by stage.
	k = rotation(t, e, dir)
	if t.Failed() {
		return
	}
	// The upgraded cluster changes machines: those apply adds boot the
	// programs it was given, not up's older ones, and the rotated PKI.
	growAndShrink(t, e, k, dir, ".bin/node", "v1.37.2")
}

// runningIsBuilt holds every running machine's files to the build of
// the spec in dir with kcompile diff's comparison (review.Compare, modes
// included): each node's files of that build as the machine holds them,
// and those the build of the spec in was (the spec before the change)
// had and this one has not, where the machine still holds them.
func (e *applyEnv) runningIsBuilt(ctx context.Context, dir, was string) {
	t := e.t
	t.Helper()
	_, tree, err := e.build(compiler.Source{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, before, err := e.build(compiler.Source{Dir: was})
	if err != nil {
		t.Fatal(err)
	}
	running, built := targets.NewTree(), targets.NewTree()
	nodes := 0
	for _, ns := range e.c.Status(ctx).Nodes {
		if ns.State != "running" {
			continue
		}
		nodes++
		root := fmt.Sprintf("/proc/%d/root", firstChild(ns.PID))
		prefix := layout.NodeTree(ns.Name, "")
		read := func(f targets.File) {
			rel, ok := strings.CutPrefix(f.Path, prefix)
			if !ok {
				return
			}
			p := filepath.Join(root, filepath.FromSlash(rel))
			data, err := os.ReadFile(p)
			if os.IsNotExist(err) {
				return
			}
			st, serr := os.Stat(p)
			if err != nil || serr != nil {
				t.Fatalf("%s: %v %v", p, err, serr)
			}
			if err := running.Add(f.Path, data, st.Mode().Perm()); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range tree.Files() {
			if strings.HasPrefix(f.Path, prefix) {
				if err := built.Add(f.Path, f.Data, f.Mode); err != nil {
					t.Fatal(err)
				}
				read(f)
			}
		}
		for _, f := range before.Files() {
			if _, ok := tree.Get(f.Path); !ok {
				read(f)
			}
		}
	}
	r := review.Compare(review.Side{Label: "running", Tree: running}, review.Side{Label: "built", Tree: built}, review.Options{})
	if !r.Equal() {
		var b strings.Builder
		if err := r.WriteText(&b, false); err != nil {
			t.Fatal(err)
		}
		t.Errorf("the running nodes' files are not the build of %s:\n%s", dir, b.String())
	}
	t.Logf("the files of %d running machines (%d) are the build, by kcompile diff's comparison", nodes, built.Len())
}

// twoPools is the highly available cluster's worker split into two
// pools: w1 in blue, g1 in green.
var twoPools = [2]string{`workers: nodes: w1: {address: "10.78.0.21", mac: "52:54:00:78:00:21"}`, `workers: pools: {
	blue: {count: 1, namePattern: "w%d", firstAddress: "10.78.0.21", macs: ["52:54:00:78:00:21"]}
	green: {count: 1, namePattern: "g%d", firstAddress: "10.78.0.31", macs: ["52:54:00:78:00:31"]}
}`}

// webAvailable waits until workloadHA's two replicas are available.
func webAvailable(t *testing.T, k *kube) {
	t.Helper()
	eventually(t, 2*time.Minute, "web's two replicas available", func() error {
		var d appsv1.Deployment
		if err := k.get(context.Background(), "/apis/apps/v1/namespaces/default/deployments/web", &d); err != nil {
			return err
		}
		if d.Status.AvailableReplicas < 2 {
			return fmt.Errorf("%d available", d.Status.AvailableReplicas)
		}
		return nil
	})
}
