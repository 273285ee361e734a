package nspawn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	change "github.com/kcompile/kcompile/plan"
)

// serviceMove moves the service CIDR of TestUpApply's running cluster
// from 10.96.0.0/12 to 10.112.0.0/16 with apply, while a Deployment
// behind a Service runs and a prober on w1 (in its network namespace,
// through kube-proxy's rules as a pod's packets go) asks CoreDNS at the
// old and the new DNS address and connects to the kubernetes Service's
// old and new address every 250 ms. CoreDNS must answer at the old
// address until every pod has restarted and at the new one from the
// step that opens it to the end (a lookup is asked up to three times, a
// second apart, as a resolver does); the API server must be reached at
// the old address until the pods have restarted (through the bridge
// once the kubernetes Service has moved) and at the new one once it
// has, but while it restarts itself. At the end every Service is in the
// new range, the workload's pods resolve and reach theirs, and nothing
// of the move's is left.
func serviceMove(t *testing.T, e *applyEnv, k *kube, newDir string, extra map[string]string) (movedDir string) {
	ctx := context.Background()
	if _, err := k.apply(ctx, "web", []byte(workloadHA)); err != nil {
		t.Fatal(err)
	}
	webAvailable(t, k)
	extra = withFile(extra, "services.cue", "package cluster\n\nnetwork: serviceCIDR: \"10.112.0.0/16\"\n")
	movedDir = specDir(t, newDir, nil, extra)
	p := e.plan(movedDir)
	got := steps(p)
	end := slices.Index(got, change.KindServiceMove+" [] []")
	if len(got) == 0 || got[0] != change.KindServiceRange+" [] []" || end < 0 {
		t.Fatalf("plan %q: want the range opened first and the move ended", got)
	}
	for _, s := range got[end+1:] {
		if !strings.HasPrefix(s, "api server [cp1]") && !strings.HasPrefix(s, "addons ") {
			t.Errorf("after the move ends the plan takes %q: only the API server (its certificate) and the addons may follow", s)
		}
	}

	domain := e.c.cfg.Cluster.Network.Domain
	oldDNS, newDNS, oldAPI, newAPI := "10.96.0.10", "10.112.0.10", "10.96.0.1", "10.112.0.1"
	// Each name is asked of each DNS address and the address answered
	// is connected to: an answer must name an address that works.
	names := []probeName{{"kubernetes.default.svc." + domain + ".", "443", true}, {"web.default.svc." + domain + ".", "80", false}}
	pr := startNetProbe(t, e.c.machine("w1").leader(), names, []string{oldDNS, newDNS}, []string{oldAPI, newAPI})
	var mu sync.Mutex
	at := map[string]time.Time{}
	marks := map[string]string{
		"dns open":       "gate: CoreDNS's pods ready behind " + change.DNSBridgeName,
		"api moved":      "Service default/kubernetes moved from " + oldAPI + " to " + newAPI,
		"pods restarted": "gate: no pod started before the restarts",
	}
	// The API server's own restarts: from its step's start until it is
	// ready again, a connection to it is refused whatever the path; and
	// through the Service until w1's kube-proxy has the endpoint back:
	// the stopping server took it out, and kube-proxy's watch, which the
	// restart broke, reconnects with client-go's backoff (a refusal 9 s
	// after the server was ready has been seen). Each restart ends, for
	// each target, at its first answer after the server is ready, and at
	// the latest settle after that.
	const settle = 30 * time.Second
	var restarts [][2]time.Time
	var timeline []string
	log := &stopAt{each: func(line string) {
		mu.Lock()
		defer mu.Unlock()
		timeline = append(timeline, time.Now().Format("15:04:05.000")+" "+line)
		switch {
		case strings.Contains(line, ": api server cp1"):
			restarts = append(restarts, [2]time.Time{time.Now(), time.Now().Add(time.Hour)})
		case strings.HasPrefix(line, "gate: kube-apiserver of cp1") && len(restarts) > 0:
			restarts[len(restarts)-1][1] = time.Now()
		}
		for mark, text := range marks {
			if _, seen := at[mark]; !seen && strings.Contains(line, text) {
				at[mark] = time.Now()
			}
		}
	}}
	began := time.Now()
	err := e.apply(ctx, p, movedDir, log, "", false, false)
	results := pr.stop()
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, log)
	}
	t.Logf("the service CIDR move took %s", time.Since(began).Round(time.Second))
	e.detail("the service CIDR move's apply, its lines as they came:\n%s", strings.Join(timeline, "\n"))
	for mark := range marks {
		if at[mark].IsZero() {
			t.Fatalf("the apply never said %q", marks[mark])
		}
	}
	// Each address is held to the window in which it is promised.
	windows := map[string][2]time.Time{
		oldDNS: {began, at["pods restarted"]},
		newDNS: {at["dns open"], time.Now()},
		oldAPI: {began, at["pods restarted"]},
		newAPI: {at["api moved"], time.Now()},
	}
	var targets []string
	for _, server := range []string{oldDNS, newDNS} {
		for _, n := range names {
			targets = append(targets, server+" "+n.name)
		}
	}
	targets = append(targets, oldAPI, newAPI)
	for _, target := range targets {
		w := windows[strings.Fields(target)[0]]
		asked, retried, failed := 0, 0, 0
		var longest time.Duration
		var outages [][2]time.Time
		for _, rs := range restarts {
			end := rs[1].Add(settle)
			for _, r := range results {
				if r.target == target && r.err == "" && !r.at.Before(rs[1]) && r.at.Before(end) {
					end = r.at
				}
			}
			outages = append(outages, [2]time.Time{rs[0], end})
		}
		if target == oldAPI || target == newAPI {
			var took []string
			for i, o := range outages {
				took = append(took, fmt.Sprintf("%s after it was ready", o[1].Sub(restarts[i][1]).Round(time.Millisecond)))
			}
			t.Logf("%s after each restart of the API server answered %s", target, strings.Join(took, ", "))
		}
		for _, r := range results {
			if r.target != target || r.at.Before(w[0]) || r.at.After(w[1]) {
				continue
			}
			if r.api && slices.ContainsFunc(outages, func(o [2]time.Time) bool {
				return !r.at.Add(r.took).Before(o[0]) && r.at.Before(o[1])
			}) {
				continue
			}
			asked++
			longest = max(longest, r.took)
			if r.tries > 1 {
				retried++
			}
			if r.err != "" {
				failed++
				t.Errorf("%s at %s: %s", target, r.at.Format("15:04:05.000"), r.err)
			}
		}
		t.Logf("%s from %s to %s: %d asked, %d asked again, %d failed, the longest %s", target, w[0].Format("15:04:05"), w[1].Format("15:04:05"), asked, retried, failed, longest.Round(time.Millisecond))
		if asked < 5 {
			t.Errorf("%s was asked %d times in its window: the prober did not run", target, asked)
		}
	}

	// Every Service in the new range; the workload's pods resolve
	// their Service through CoreDNS and reach it.
	for svc, want := range map[string]string{"default/kubernetes": newAPI, "kube-system/kube-dns": newDNS} {
		ns, name, _ := strings.Cut(svc, "/")
		var s corev1.Service
		if err := k.get(ctx, "/api/v1/namespaces/"+ns+"/services/"+name, &s); err != nil || s.Spec.ClusterIP != want {
			t.Errorf("%s: %v at %s, want %s", svc, err, s.Spec.ClusterIP, want)
		}
	}
	var services corev1.ServiceList
	if err := k.get(ctx, "/api/v1/services", &services); err != nil {
		t.Fatal(err)
	}
	for _, s := range services.Items {
		if s.Spec.ClusterIP != corev1.ClusterIPNone && !strings.HasPrefix(s.Spec.ClusterIP, "10.112.") {
			t.Errorf("Service %s/%s is at %s, outside 10.112.0.0/16", s.Namespace, s.Name, s.Spec.ClusterIP)
		}
		if strings.HasPrefix(s.Name, "kcompile-") {
			t.Errorf("the move's Service %s/%s is left", s.Namespace, s.Name)
		}
	}
	var cidrs networkingv1.ServiceCIDRList
	if err := k.get(ctx, "/apis/networking.k8s.io/v1/servicecidrs", &cidrs); err != nil {
		t.Fatal(err)
	}
	if len(cidrs.Items) != 1 || cidrs.Items[0].Name != "kubernetes" || !slices.Equal(cidrs.Items[0].Spec.CIDRs, []string{"10.112.0.0/16"}) {
		var have []string
		for _, c := range cidrs.Items {
			have = append(have, c.Name+" "+strings.Join(c.Spec.CIDRs, ","))
		}
		t.Errorf("ServiceCIDRs %q, want kubernetes of 10.112.0.0/16 alone", have)
	}
	var pods corev1.PodList
	if err := k.get(ctx, "/api/v1/namespaces/default/pods?labelSelector="+url.QueryEscape("app=web"), &pods); err != nil || len(pods.Items) == 0 {
		t.Fatalf("web's pods: %v", err)
	}
	eventually(t, time.Minute, "a web pod fetching its Service by name", func() error {
		r, err := viaPod(ctx, k, pods.Items[0].Name, "/fetch", url.Values{"url": {"http://web.default.svc." + domain + "/"}})
		if err != nil {
			return err
		}
		if r.Status != 200 {
			return fmt.Errorf("status %d: %s", r.Status, r.Body)
		}
		return nil
	})
	again := &stopAt{}
	if err := e.apply(ctx, e.plan(movedDir), movedDir, again, "", false, false); err != nil || !strings.Contains(again.String(), "nothing to apply") {
		t.Errorf("a second apply: %v\n%s", err, again)
	}
	if _, err := os.Stat(e.work + "/" + movedServices); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the moved Services' directory stayed: %v", err)
	}
	return movedDir
}

func withFile(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

// probeResult is one question of the prober: a DNS lookup and a TCP
// connection to the address answered, or a TCP connection.
type probeResult struct {
	target string
	// api: the connection is to the API servers, refused while they
	// restart.
	api   bool
	at    time.Time
	took  time.Duration
	tries int
	err   string
}

// probeName is a name the prober asks for and the port it connects to
// at the address answered.
type probeName struct {
	name, port string
	api        bool
}

type prober struct {
	mu      sync.Mutex
	results []probeResult
	done    chan struct{}
	quit    chan struct{}
}

// startNetProbe asks, from the network namespace of the process pid, each
// DNS server in dns for each name (an A record) and connects to the
// address answered, and connects to each address of api on port 443,
// every 250 ms, until stopped.
func startNetProbe(t *testing.T, pid int, names []probeName, dns, api []string) *prober {
	t.Helper()
	var checks []probeCheck
	for _, s := range dns {
		for _, n := range names {
			checks = append(checks, probeCheck{s + " " + n.name, n.api, func() error {
				addr, err := lookup(s, n.name)
				if err != nil {
					return err
				}
				if err := dial(addr, n.port); err != nil {
					return fmt.Errorf("answered %s: %w", addr, err)
				}
				return nil
			}})
		}
	}
	for _, a := range api {
		checks = append(checks, probeCheck{a, true, func() error { return dial(a, "443") }})
	}
	return startNetChecks(t, pid, checks)
}

// probeCheck is one question a prober asks again and again.
type probeCheck struct {
	target string
	// api: the question needs the API servers, which refuse it while
	// they restart.
	api bool
	f   func() error
}

// startNetChecks asks each check, from the network namespace of the process
// pid (as the node's own programs and its pods' packets reach the
// cluster), every 250 ms, until stopped.
func startNetChecks(t *testing.T, pid int, checks []probeCheck) *prober {
	t.Helper()
	if pid == 0 {
		t.Fatal("the prober's machine is not running")
	}
	p := &prober{done: make(chan struct{}), quit: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		defer close(p.done)
		// The thread enters the machine's network namespace and is never
		// unlocked: it ends with the goroutine, not back in the pool.
		runtime.LockOSThread()
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			ready <- err
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		ready <- err
		if err != nil {
			return
		}
		for {
			for _, c := range checks {
				p.record(c.target, c.api, c.f)
			}
			select {
			case <-p.quit:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("the prober entering the machine's network: %v", err)
	}
	return p
}

// dial connects to addr:port and hangs up.
func dial(addr, port string) error {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, port), time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

// record asks f up to three times, a second apart, as a resolver does.
func (p *prober) record(target string, api bool, f func() error) {
	r := probeResult{target: target, api: api, at: time.Now()}
	var err error
	for r.tries = 1; ; r.tries++ {
		began := time.Now()
		if err = f(); err == nil || r.tries == 3 {
			break
		}
		time.Sleep(time.Second - time.Since(began))
	}
	r.took = time.Since(r.at)
	if err != nil {
		r.err = err.Error()
	}
	p.mu.Lock()
	p.results = append(p.results, r)
	p.mu.Unlock()
}

func (p *prober) stop() []probeResult {
	close(p.quit)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.results)
}

// lookup asks server for name's A records over UDP, with a second's
// wait, and returns the first; no answer, an error code or none is an
// error.
func lookup(server, name string) (string, error) {
	q, err := (&dnsmessage.Message{
		Header:    dnsmessage.Header{ID: uint16(time.Now().UnixNano()), RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
	}).Pack()
	if err != nil {
		return "", err
	}
	c, err := net.DialTimeout("udp", net.JoinHostPort(server, "53"), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return "", err
	}
	if _, err := c.Write(q); err != nil {
		return "", err
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:n]); err != nil {
		return "", err
	}
	for _, a := range m.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok && m.RCode == dnsmessage.RCodeSuccess {
			return netip.AddrFrom4(r.A).String(), nil
		}
	}
	return "", fmt.Errorf("%s answered %s with %d records and no address", server, m.RCode, len(m.Answers))
}
