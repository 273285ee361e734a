package nspawn

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/layout"
	change "github.com/kcompile/kcompile/plan"
	"github.com/kcompile/kcompile/targets"
)

// rotation rotates every CA and the service-account key of
// TestUpApplyVersionHA's running cluster (three control-plane nodes
// holding the endpoint's VIP, workers w1 and g1; the spec in dir) as a
// user does: kcompile secrets rotate --ca all writes stage 1 to the
// bundle, and one kcompile apply --to-end rolls it out, writes and rolls
// out stage 2 (its apply restarts every pod once the API servers sign
// tokens with the new key), then the end. Stage 1 restarts every pod
// too, once every namespace's kube-root-ca.crt holds both CAs: a client
// that loaded its CA bundle when it started (as client-go's does)
// trusts the API servers' new certificates of stage 2.
//
// Throughout: a client asks the API through the VIP every 100 ms with
// the admin kubeconfig up named, read again at each request as kubectl
// does (apply brings it to each step's state), and samples the Nodes; a
// web pod's logs and an exec in it, served by its kubelet, are asked
// for every second; a web pod's client asks the API with its
// service-account token (the kubernetes Service) through the web
// Service from w1. A failure of any of them must come from a restart
// the step of its time names on its path, and none may be of trust: a
// refused certificate or token fails the test whenever it comes. At the
// end every node is Ready, a second apply finds nothing to do, no file
// of any node holds a certificate of an old CA, an old CA or the old
// service-account key, and the old admin credentials are refused. It
// returns a client of the rotated admin kubeconfig.
func rotation(t *testing.T, e *applyEnv, dir string) *kube {
	ctx := context.Background()
	b0 := e.b
	bin := kcompileBinary(t)
	secrets := filepath.Join(t.TempDir(), "secrets.json")
	data, err := b0.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secrets, data, 0o600); err != nil {
		t.Fatal(err)
	}
	kcompile := func(stdout, stderr io.Writer, args ...string) error {
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		return cmd.Run()
	}
	var out, said strings.Builder
	if err := kcompile(&out, &said, "secrets", "rotate", dir, "-s", secrets, "--ca", "all"); err != nil || !strings.Contains(out.String(), "stage 1 of the rotation") {
		t.Fatalf("kcompile secrets rotate: %v\n%s%s", err, out.String(), said.String())
	}
	old := admin(t, e.c)
	var web corev1.Service
	if err := old.get(ctx, "/api/v1/namespaces/default/services/web", &web); err != nil {
		t.Fatal(err)
	}
	// Before the rotation a web pod (one that runs, ready) reaches the
	// API. What the API's kubernetes Service and its endpoints are at
	// each refusal is logged.
	eventually(t, time.Minute, "before the rotation, a web pod asking the API", func() error {
		var pods corev1.PodList
		if err := old.get(ctx, "/api/v1/namespaces/default/pods?labelSelector="+url.QueryEscape("app=web"), &pods); err != nil {
			return err
		}
		i := slices.IndexFunc(pods.Items, func(p corev1.Pod) bool {
			return p.DeletionTimestamp == nil && p.Status.PodIP != "" && podReady(p)
		})
		if i < 0 {
			return fmt.Errorf("no web pod runs ready: %d pods", len(pods.Items))
		}
		r, err := viaPod(ctx, old, pods.Items[i].Name, "/api", url.Values{"path": {"/api"}})
		if err == nil && r.Status == http.StatusOK {
			return nil
		}
		var svc corev1.Service
		var slices discoveryv1.EndpointSliceList
		e1 := old.get(ctx, "/api/v1/namespaces/default/services/kubernetes", &svc)
		e2 := old.get(ctx, "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector="+url.QueryEscape(discoveryv1.LabelServiceName+"=kubernetes"), &slices)
		var sl []string
		for _, s := range slices.Items {
			sl = append(sl, fmt.Sprintf("%s %v %+v", s.Name, s.Labels, s.Endpoints))
		}
		t.Logf("%s: the pod: %d %v; the kubernetes Service: %s %s %v; its slices: %q %v", time.Now().Format("15:04:05.000"), r.Status, err, svc.Spec.Type, svc.Spec.ClusterIP, e1, sl, e2)
		return fmt.Errorf("%d %v", r.Status, err)
	})

	// A pod's client, as client-go's in-cluster one (its CA bundle read
	// when it starts, its token at each request), asks the API through
	// the web Service from w1. /api is open to any authenticated client:
	// an answer proves the pod's trust of the API server's certificate
	// and the API server's of the pod's token.
	webURL := "http://" + net.JoinHostPort(web.Spec.ClusterIP, "80") + "/api?path=" + url.QueryEscape("/api")
	pr := startNetChecks(t, e.c.machine("w1").leader(), []probeCheck{{"a pod's client", true, func() error { return podAsksAPI(webURL) }}})
	client := startSteadyFrom(ctx, e.c.Kubeconfig(), "web", "web")
	kubelets := startKubeletProbe(ctx, e.c.Kubeconfig())

	var nodes []string
	for _, n := range e.c.cfg.Cluster.Nodes {
		nodes = append(nodes, n.Name)
	}
	steps := &stepTimes{nodes: nodes}
	log := &stopAt{each: steps.line}
	began := time.Now()
	out.Reset()
	err = kcompile(&out, log, "apply", dir, "--work", e.work, "-s", secrets, "--to-end")
	client.stop()
	probed := kubelets.stop()
	results := pr.stop()
	if err != nil {
		for _, u := range []string{"kube-controller-manager", "kube-apiserver"} {
			out, _ := e.c.Exec(ctx, "cp1", "journalctl", "-u", u, "-n", "30", "--no-pager", "-q")
			t.Logf("cp1's %s:\n%s", u, out)
		}
		t.Fatalf("kcompile apply --to-end: %v\n%s\n%s", err, out.String(), log)
	}
	t.Logf("the rotation took %s", time.Since(began).Round(time.Second))
	e.detail("the rotation's apply:\n%s\n%s", out.String(), log)
	// Each stage's etcd step starts each API server again with its
	// node's new files: its own step has nothing left to restart.
	if n, want := strings.Count(log.String(), "kube-apiserver.service runs these files already"), 3*3; n != want {
		t.Errorf("%d API server steps found their API server running the stage's files, want %d (one per control-plane node and stage)", n, want)
	}
	e.detail("its steps: %s", steps)
	if n := strings.Count(out.String(), "every gate held"); n != 3 {
		t.Errorf("apply --to-end rolled out %d stages, want 3", n)
	}
	// Stage 1 restarts every pod to load the new CA bundle, stage 2 for
	// tokens of the new key.
	if n := len(regexp.MustCompile(`(?m)^step \d+/\d+: `+change.KindPods+` $`).FindAllString(log.String(), -1)); n != 2 {
		t.Errorf("apply --to-end restarted every pod %d times, want twice (stages 1 and 2)", n)
	}

	// The API through the VIP: a failure only while an API server, or
	// the etcd member it alone talks to, restarts, or the HAProxy of a
	// control-plane node; never more than one a restart.
	restarts := steps.of("api server", "etcd")
	for _, w := range steps.of("node") {
		if slices.ContainsFunc(w.nodes, func(n string) bool { return strings.HasPrefix(n, "cp") }) {
			restarts = append(restarts, w)
		}
	}
	t.Logf("the API through the VIP: %d answered, %d failed, longest wait %s; failures: %q", client.ok, client.fail, client.longest.Round(10*time.Millisecond), client.errs)
	for _, f := range client.failures {
		if trustFailure(f.err) || !within(restarts, f.at, f.took) {
			t.Errorf("the API through the VIP failed at %s, %s: %s", f.at.Format("15:04:05.000"), steps.at(f.at), f.err)
		}
	}
	if client.fail > len(restarts) || client.longest > 3*time.Second {
		t.Errorf("the API through the VIP: %d failed requests over %d restarts on its path, longest wait %s", client.fail, len(restarts), client.longest)
	}
	if client.ok < 100 {
		t.Errorf("the API through the VIP answered %d times: the client did not run", client.ok)
	}
	// A kubelet that has just restarted may post its first status
	// before its first relist of the pods (the kubelet's "PLEG ... has
	// yet to be successful"): seen once in five runs, a second on the
	// node whose kubelet the step restarts, no request of the probes
	// failing. Any other NotReady, or one outside the node's own step,
	// fails.
	for _, nr := range client.notReady {
		if strings.Contains(nr.message, "pleg has yet to be successful") && within(steps.on(nr.node, "node", "workers"), nr.at, 0) {
			t.Logf("%s NotReady at %s, %s: its restarted kubelet's first status (%s)", nr.node, nr.at.Format("15:04:05.000"), steps.at(nr.at), nr.message)
			continue
		}
		t.Errorf("%s NotReady at %s, %s: %s", nr.node, nr.at.Format("15:04:05.000"), steps.at(nr.at), nr.message)
	}
	// Logs and exec, served by the pod's kubelet: a failure only while
	// an API server (or its etcd), or the pod's kubelet, restarts, or
	// the pod goes. Where they failed (by step name, with the first
	// error: the steps that still cost a kubelet-served request), and
	// each step's outage of a kind of request, first failure to last
	// in that run of the step: a kubelet restarting is away a second or
	// two (it was 26 s on a node booted again with its last boot's
	// cgroups), an API server that stops fails what it had in flight.
	type outage struct {
		what        string
		first, last time.Time
		n           int
	}
	where, spans := map[string][]string{}, map[string]*outage{}
	served, failed := 0, 0
	for _, r := range probed {
		served++
		if r.err == "" {
			continue
		}
		failed++
		path := steps.of("api server", "etcd")
		path = append(path, steps.on(r.node, "node", "workers")...)
		if trustFailure(r.err) || !within(path, r.at, r.took) {
			t.Errorf("%s of a pod on %s at %s (%s in flight), %s: %s", r.what, r.node, r.at.Format("15:04:05.000"), r.took.Round(time.Millisecond), steps.at(r.at), r.err)
		}
		what := r.what + " of a pod on " + r.node + " " + steps.at(r.at)
		where[what] = append(where[what], r.err)
		k := fmt.Sprintf("%s #%d", what, steps.index(r.at))
		o, ok := spans[k]
		if !ok {
			o = &outage{what: what, first: r.at}
			spans[k] = o
		}
		o.last, o.n = r.at, o.n+1
	}
	t.Logf("logs and exec through the kubelets: %d asked, %d failed", served, failed)
	for _, k := range slices.Sorted(maps.Keys(where)) {
		t.Logf("  %d %s, first: %s", len(where[k]), k, where[k][0])
	}
	var longest time.Duration
	for _, o := range spans {
		gap := o.last.Sub(o.first)
		longest = max(longest, gap)
		if gap > 3*time.Second {
			t.Errorf("%s failed for %s (%d requests, from %s): longer than a restart", o.what, gap.Round(100*time.Millisecond), o.n, o.first.Format("15:04:05.000"))
		}
	}
	t.Logf("logs and exec: longest outage in one step %s", longest.Round(100*time.Millisecond))
	if served < 40 {
		t.Errorf("logs and exec were asked %d times: the prober did not run", served)
	}
	// The pod's client: its token and trust hold throughout; a request
	// fails (three tries, a second apart) only while an API server or
	// its etcd restarts, or the pods restart.
	asked, podFailed := 0, 0
	path := steps.of("api server", "etcd", change.KindPods)
	for _, r := range results {
		asked++
		if r.err == "" {
			continue
		}
		podFailed++
		if trustFailure(r.err) || !within(path, r.at, r.took) {
			t.Errorf("a pod's client at %s, %s: %s", r.at.Format("15:04:05.000"), steps.at(r.at), r.err)
		}
	}
	t.Logf("a pod's client through the rotation: %d asked, %d failed", asked, podFailed)
	if asked < 40 {
		t.Errorf("a pod's client was asked %d times: the prober did not run", asked)
	}

	if data, err = os.ReadFile(secrets); err != nil {
		t.Fatal(err)
	}
	if e.b, err = pki.Parse(data); err != nil {
		t.Fatal(err)
	}
	e.secrets = secrets
	if e.b.Stage() != 0 || len(e.b.Rotating()) != 0 {
		t.Errorf("the bundle apply --to-end left is at stage %d, rotating %v", e.b.Stage(), e.b.Rotating())
	}
	out.Reset()
	if err := kcompile(&out, io.Discard, "apply", dir, "--work", e.work, "-s", secrets, "--to-end"); err != nil || !strings.Contains(out.String(), "nothing to apply") {
		t.Errorf("a second apply: %v\n%s", err, out.String())
	}
	// The admin kubeconfig up named is the rotated cluster's.
	k, tree := stageAdmin(t, e, dir)
	if f, _ := tree.Get(layout.ClusterTree("admin.conf")); !bytes.Equal(must(os.ReadFile(e.c.Kubeconfig())), f.Data) {
		t.Errorf("%s is not the rotated cluster's admin kubeconfig", e.c.Kubeconfig())
	}
	eventually(t, time.Minute, "every node Ready", func() error {
		nodes, err := k.nodes(ctx)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if !nodeReady(n) {
				return fmt.Errorf("%s not Ready", n.Name)
			}
		}
		return nil
	})
	// No node's file holds a certificate of an old CA, an old CA, or
	// the old service-account key.
	files := 0
	st := e.c.Status(ctx)
	// up's status reads etcd with the credentials the nodes have now,
	// not the boot's, which no member trusts any more.
	if st.EtcdLeader == "" {
		t.Error("after the rotation, up's status names no etcd leader")
	}
	for _, ns := range st.Nodes {
		at := machineAccess{name: ns.Name, pid: firstChild(ns.PID)}
		prefix := layout.NodeTree(ns.Name, "")
		for _, f := range tree.Files() {
			rel, ok := strings.CutPrefix(f.Path, prefix)
			if !ok {
				continue
			}
			data, err := at.read(ctx, rel)
			if err != nil {
				t.Fatalf("%s: %v", ns.Name, err)
			}
			files++
			for _, bad := range oldTrust(t, data, b0) {
				t.Errorf("%s's /%s holds %s", ns.Name, rel, bad)
			}
		}
	}
	t.Logf("%d files of %d nodes read: none holds an old CA, its certificates or the old service-account key", files, len(st.Nodes))
	var ns corev1.Namespace
	if err := old.get(ctx, "/api/v1/namespaces/default", &ns); err == nil {
		t.Error("the old admin credentials are still accepted")
	}
	return k
}

// must is v, for an error the test has no use for: a read that fails
// gives nil, which compares unequal to anything a test wants.
func must(v []byte, _ error) []byte { return v }

// oldTrust names what of b0 (the bundle before a rotation) data holds:
// a certificate, as PEM or as a kubeconfig's base64 data, that is an old
// CA or one it signed; a public key that is the old service-account
// key's.
func oldTrust(t *testing.T, data []byte, b0 *pki.Bundle) []string {
	t.Helper()
	blobs := [][]byte{data}
	for _, m := range regexp.MustCompile(`(?m)(?:certificate-authority|client-certificate)-data: *"?([A-Za-z0-9+/=]+)`).FindAllSubmatch(data, -1) {
		if d, err := base64.StdEncoding.DecodeString(string(m[1])); err == nil {
			blobs = append(blobs, d)
		}
	}
	saPub := b0.ServiceAccountKey.Public().(interface{ Equal(crypto.PublicKey) bool })
	var found []string
	for _, blob := range blobs {
		for rest := blob; ; {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				break
			}
			switch block.Type {
			case "CERTIFICATE":
				cert, err := x509.ParseCertificate(block.Bytes)
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range pki.Authorities() {
					ca := b0.CAs[a].Cert
					if cert.Equal(ca) {
						found = append(found, "the old "+string(a))
					} else if cert.CheckSignatureFrom(ca) == nil {
						found = append(found, fmt.Sprintf("%q of the old %s", cert.Subject.CommonName, a))
					}
				}
			case "PUBLIC KEY":
				pub, err := x509.ParsePKIXPublicKey(block.Bytes)
				if err != nil {
					t.Fatal(err)
				}
				if saPub.Equal(pub) {
					found = append(found, "the old service-account key")
				}
			}
		}
	}
	return found
}

// trustFailure says an error is a refusal of trust: a certificate or a
// token refused, which no restart excuses.
func trustFailure(err string) bool {
	return regexp.MustCompile(`(?i)x509|certificate|tls:|unauthorized|forbidden|\b40[13]\b`).MatchString(err)
}

// stepTimes are the steps of apply, from its log, with when each began
// and ended.
type stepTimes struct {
	nodes []string
	mu    sync.Mutex
	steps []stepTime
}

type stepTime struct {
	kind     string
	nodes    []string
	from, to time.Time
}

// line takes one line of apply's log.
func (s *stepTimes) line(l string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	rest, ok := strings.CutPrefix(l, "step ")
	if !ok {
		return
	}
	_, rest, ok = strings.Cut(rest, "/")
	if !ok {
		return
	}
	if strings.Contains(rest, " done in ") {
		if n := len(s.steps); n > 0 && s.steps[n-1].to.IsZero() {
			s.steps[n-1].to = now
		}
		return
	}
	_, what, ok := strings.Cut(rest, ": ")
	if !ok {
		return
	}
	f := strings.Fields(what)
	var on []string
	for len(f) > 0 && slices.Contains(s.nodes, f[len(f)-1]) {
		on = append([]string{f[len(f)-1]}, on...)
		f = f[:len(f)-1]
	}
	s.steps = append(s.steps, stepTime{kind: strings.Join(f, " "), nodes: on, from: now})
}

// String is the steps' timeline.
func (s *stepTimes) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, st := range s.steps {
		fmt.Fprintf(&b, "\n%s-%s %s %s", st.from.Format("15:04:05.0"), st.to.Format("15:04:05.0"), st.kind, strings.Join(st.nodes, " "))
	}
	return b.String()
}

// of are the steps of the kinds.
func (s *stepTimes) of(kinds ...string) []stepTime {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []stepTime
	for _, st := range s.steps {
		if slices.Contains(kinds, st.kind) {
			out = append(out, st)
		}
	}
	return out
}

// on are the steps of the kinds that touch node.
func (s *stepTimes) on(node string, kinds ...string) []stepTime {
	var out []stepTime
	for _, st := range s.of(kinds...) {
		if slices.Contains(st.nodes, node) {
			out = append(out, st)
		}
	}
	return out
}

// at names the step under way at t.
func (s *stepTimes) at(t time.Time) string {
	if i := s.index(t); i >= 0 {
		s.mu.Lock()
		defer s.mu.Unlock()
		st := s.steps[i]
		return "during " + strings.TrimSpace(st.kind+" "+strings.Join(st.nodes, " "))
	}
	return "between steps"
}

// index is the place in the run of the step under way at t, -1 when
// none is: steps of the same name come once a stage.
func (s *stepTimes) index(t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, st := range s.steps {
		if !t.Before(st.from) && (st.to.IsZero() || !t.After(st.to)) {
			return i
		}
	}
	return -1
}

// within says whether a request made at at, taking took, overlapped one
// of the steps (a step's restart settles within 5 s of its end: an API
// server's endpoint returns to kube-proxy's rules, HAProxy's check finds
// it up).
func within(steps []stepTime, at time.Time, took time.Duration) bool {
	return slices.ContainsFunc(steps, func(st stepTime) bool {
		end := st.to
		if end.IsZero() {
			end = time.Now()
		}
		return !at.Add(took).Before(st.from) && !at.After(end.Add(5*time.Second))
	})
}

// kubeletProbe asks, every second, for a web pod's last log line and
// for an exec in it (the echo's -h, which prints its usage), through
// the API server, which reaches the pod's kubelet: the API server's
// kubelet client certificate against the kubelet's client CA, the
// kubelet's serving certificate against the API server's trust.
type kubeletProbe struct {
	mu      sync.Mutex
	results []kubeletResult
	cancel  context.CancelFunc
	done    chan struct{}
}

type kubeletResult struct {
	what, node string
	// at is when the request was sent, took how long it was in flight:
	// one sent just before a step fails while the step restarts what it
	// passes through.
	at   time.Time
	took time.Duration
	err  string
}

// startKubeletProbe probes with the kubeconfig at path, read again at
// each round.
func startKubeletProbe(ctx context.Context, path string) *kubeletProbe {
	ctx, cancel := context.WithCancel(ctx)
	p := &kubeletProbe{cancel: cancel, done: make(chan struct{})}
	file := &kubeconfigFile{path: path}
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			p.round(ctx, file)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return p
}

func (p *kubeletProbe) round(ctx context.Context, file *kubeconfigFile) {
	k, data, err := file.kube()
	if err != nil {
		p.add(kubeletResult{what: "reading the kubeconfig", at: time.Now(), err: err.Error()})
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var pods corev1.PodList
	if err := k.get(rctx, "/api/v1/namespaces/default/pods?labelSelector="+url.QueryEscape("app=web"), &pods); err != nil {
		return
	}
	// A pod that runs, ready, and is not going.
	var pod *corev1.Pod
	for i, pd := range pods.Items {
		if pd.DeletionTimestamp == nil && pd.Status.Phase == corev1.PodRunning && podReady(pd) {
			pod = &pods.Items[i]
			break
		}
	}
	if pod == nil {
		return
	}
	gone := func() bool {
		var now corev1.Pod
		err := k.get(rctx, "/api/v1/namespaces/default/pods/"+pod.Name, &now)
		return err != nil || now.DeletionTimestamp != nil || now.UID != pod.UID
	}
	at := time.Now()
	_, err = k.do(rctx, http.MethodGet, "/api/v1/namespaces/default/pods/"+pod.Name+"/log?container=echo&tailLines=1", "", nil)
	if err == nil || !gone() {
		p.add(kubeletResult{what: "logs", node: pod.Spec.NodeName, at: at, took: time.Since(at), err: errText(err)})
	}
	at = time.Now()
	err = kubectlExec(rctx, data, pod.Name)
	if err == nil || !gone() {
		p.add(kubeletResult{what: "exec", node: pod.Spec.NodeName, at: at, took: time.Since(at), err: errText(err)})
	}
}

func (p *kubeletProbe) add(r kubeletResult) {
	p.mu.Lock()
	p.results = append(p.results, r)
	p.mu.Unlock()
}

func (p *kubeletProbe) stop() []kubeletResult {
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.results)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// kubectlExec runs the echo's -h in pod's echo container as kubectl exec
// does (client-go's WebSocket executor, the kubeconfig's credentials),
// and holds it to its usage on stderr.
func kubectlExec(ctx context.Context, kubeconfig []byte, pod string) error {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	q := url.Values{"container": {"echo"}, "command": {"/echo", "-h"}, "stdout": {"true"}, "stderr": {"true"}}
	ex, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/api/v1/namespaces/default/pods/"+pod+"/exec?"+q.Encode())
	if err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return err
	}
	if !strings.Contains(stderr.String(), "-listen") {
		return fmt.Errorf("the exec printed %q and %q, not the echo's usage", stdout.String(), stderr.String())
	}
	return nil
}

// kubeconfigFile is a kubeconfig read again at each use, as kubectl
// reads it at each run: a client of its latest content.
type kubeconfigFile struct {
	path string
	mu   sync.Mutex
	data []byte
	k    *kube
}

func (f *kubeconfigFile) kube() (*kube, []byte, error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return nil, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.k == nil || !bytes.Equal(data, f.data) {
		k, err := newKube(data)
		if err != nil {
			return nil, nil, err
		}
		f.data, f.k = data, k
	}
	return f.k, f.data, nil
}

// stageAdmin is a client with the admin kubeconfig dir builds with e.b,
// and the build.
func stageAdmin(t *testing.T, e *applyEnv, dir string) (*kube, *targets.Tree) {
	t.Helper()
	data, diags := compiler.Concrete(compiler.Source{Dir: dir})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	src, err := compiler.StateSource(compiler.Source{Dir: dir}, data)
	if err != nil {
		t.Fatal(err)
	}
	_, tree, err := e.build(src)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := tree.Get(layout.ClusterTree("admin.conf"))
	if !ok {
		t.Fatal("the build has no admin.conf")
	}
	k, err := newKube(f.Data)
	if err != nil {
		t.Fatal(err)
	}
	return k, tree
}

// podAsksAPI has a web pod ask the API (the echo's /api) at u and holds
// it to an answer of 200 from the API server. The connection is made on
// the calling thread, in its network namespace (net/http would dial from
// another thread, in another namespace).
func podAsksAPI(u string) error {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	conn, err := net.DialTimeout("tcp", req.URL.Host, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(6 * time.Second)); err != nil {
		return err
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return err
	}
	var r struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
		Error  string `json:"error"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("the pod answered %s: %v: %.200q", resp.Status, err, body)
	}
	if r.Error != "" {
		return fmt.Errorf("the pod's request: %s", r.Error)
	}
	if r.Status != http.StatusOK {
		return fmt.Errorf("the API server answered the pod %d: %.200s", r.Status, r.Body)
	}
	return nil
}

// kcompileBinary builds kcompile, as its users run it, once per test.
func kcompileBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kcompile")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/kcompile")
	cmd.Dir = fixture.Path(".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kcompile: %v\n%s", err, out)
	}
	return bin
}
