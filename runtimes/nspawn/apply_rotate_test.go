package nspawn

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
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

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/layout"
	change "github.com/kcompile/kcompile/plan"
)

// rotation rotates every CA and the service-account key of TestUpApply's
// running cluster (the spec in dir) as a user does: kcompile secrets
// rotate --ca all writes stage 1 to the bundle, and one kcompile apply
// --to-end rolls it out, writes and rolls out stage 2 (its apply restarts
// every pod once the API server signs tokens with the new key), then the
// end. Stage 1 restarts every pod too, once every namespace's
// kube-root-ca.crt holds both CAs: a client that loaded its CA bundle
// when it started (as client-go's does) trusts the API server's new
// certificate of stage 2. A pod's such client asks the API throughout.
// At the end every node is Ready, a second apply finds nothing to do, no
// node holds a certificate of an old CA or trusts one, and the old admin
// credentials are refused.
func rotation(t *testing.T, e *applyEnv, dir string) {
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
	kcompile := func(stderr io.Writer, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, stderr
		err := cmd.Run()
		return out.String(), err
	}
	var said strings.Builder
	if out, err := kcompile(&said, "secrets", "rotate", dir, "-s", secrets, "--ca", "all"); err != nil || !strings.Contains(out, "stage 1 of the rotation") {
		t.Fatalf("kcompile secrets rotate: %v\n%s%s", err, out, said.String())
	}
	old := admin(t, e.c)
	// A pod's client, as client-go's in-cluster one (its CA bundle read
	// when it starts, its token at each request), asks the API through
	// the web Service from w1, throughout the rotation. It may fail only
	// while the API server or its etcd restarts. /api is open to any
	// authenticated client: an answer proves the pod's trust of the API
	// server's certificate and the API server's of the pod's token.
	var web corev1.Service
	if err := old.get(ctx, "/api/v1/namespaces/default/services/web", &web); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := old.get(ctx, "/api/v1/namespaces/default/pods?labelSelector="+url.QueryEscape("app=web"), &pods); err != nil || len(pods.Items) == 0 {
		t.Fatalf("web's pods: %v", err)
	}
	// Before the rotation a web pod reaches the API. What the API's
	// kubernetes Service and its endpoints are at each refusal is
	// logged.
	eventually(t, time.Minute, "before the rotation, a web pod asking the API", func() error {
		r, err := viaPod(ctx, old, pods.Items[0].Name, "/api", url.Values{"path": {"/api"}})
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
	webURL := "http://" + net.JoinHostPort(web.Spec.ClusterIP, "80") + "/api?path=" + url.QueryEscape("/api")
	pr := startNetChecks(t, e.c.machine("w1").leader(), []probeCheck{{"a pod's client", true, func() error { return podAsksAPI(webURL) }}})
	var mu sync.Mutex
	var restarts [][2]time.Time
	each := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasPrefix(line, "step ") && (strings.Contains(line, ": api server ") || strings.Contains(line, ": etcd ")):
			restarts = append(restarts, [2]time.Time{time.Now(), time.Now().Add(time.Hour)})
		case strings.HasPrefix(line, "step ") && strings.Contains(line, " done in ") && len(restarts) > 0 && restarts[len(restarts)-1][1].After(time.Now()):
			// Ready, the API server publishes its endpoint again and
			// kube-proxy follows.
			restarts[len(restarts)-1][1] = time.Now().Add(5 * time.Second)
		}
	}
	log := &stopAt{each: each}
	began := time.Now()
	out, err := kcompile(log, "apply", dir, "--work", e.work, "-s", secrets, "--to-end")
	if err != nil {
		for _, u := range []string{"kube-controller-manager", "kube-apiserver"} {
			out, _ := e.c.Exec(ctx, "cp1", "journalctl", "-u", u, "-n", "30", "--no-pager", "-q")
			t.Logf("cp1's %s:\n%s", u, out)
		}
		t.Fatalf("kcompile apply --to-end: %v\n%s\n%s", err, out, log)
	}
	t.Logf("the rotation took %s:\n%s\n%s", time.Since(began).Round(time.Second), out, log)
	if n := strings.Count(out, "every gate held"); n != 3 {
		t.Errorf("apply --to-end rolled out %d stages, want 3", n)
	}
	// Stage 1 restarts every pod to load the new CA bundle, stage 2 for
	// tokens of the new key.
	if n := len(regexp.MustCompile(`(?m)^step \d+/\d+: `+change.KindPods+` $`).FindAllString(log.String(), -1)); n != 2 {
		t.Errorf("apply --to-end restarted every pod %d times, want twice (stages 1 and 2)", n)
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
	if out, err := kcompile(io.Discard, "apply", dir, "--work", e.work, "-s", secrets, "--to-end"); err != nil || !strings.Contains(out, "nothing to apply") {
		t.Errorf("a second apply: %v\n%s", err, out)
	}
	k := stageAdmin(t, e, dir)
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
	results := pr.stop()
	asked, failed := 0, 0
	for _, r := range results {
		if slices.ContainsFunc(restarts, func(rs [2]time.Time) bool { return !r.at.Add(r.took).Before(rs[0]) && !r.at.After(rs[1]) }) {
			continue
		}
		asked++
		if r.err != "" {
			failed++
			t.Errorf("a pod's client at %s: %s", r.at.Format("15:04:05.000"), r.err)
		}
	}
	t.Logf("a pod's client through the rotation: %d asked outside the API server's and etcd's restarts, %d failed", asked, failed)
	if asked < 10 {
		t.Errorf("a pod's client was asked %d times: the prober did not run", asked)
	}
	// No node holds a certificate of an old CA, or trusts one.
	for _, n := range e.c.cfg.Cluster.Nodes {
		files := []string{layout.ClusterCACert, layout.CertFile(layout.KubeletServingStem)}
		if n.Name == "cp1" {
			files = append(files, layout.CertFile(layout.APIServerStem), layout.EtcdCACert)
		}
		for _, f := range files {
			out, err := e.c.Exec(ctx, n.Name, "cat", layout.Abs(f))
			if err != nil {
				t.Fatalf("%s: %v", n.Name, err)
			}
			for rest := out; ; {
				var block *pem.Block
				if block, rest = pem.Decode(rest); block == nil {
					break
				}
				cert, err := x509.ParseCertificate(block.Bytes)
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range pki.Authorities() {
					ca := b0.CAs[a].Cert
					if cert.Equal(ca) || cert.CheckSignatureFrom(ca) == nil {
						t.Errorf("%s's %s holds %q of the old %s", n.Name, f, cert.Subject.CommonName, a)
					}
				}
			}
		}
	}
	var ns corev1.Namespace
	if err := old.get(ctx, "/api/v1/namespaces/default", &ns); err == nil {
		t.Error("the old admin credentials are still accepted")
	}
}

// stageAdmin is a client with the admin kubeconfig dir builds with e.b.
func stageAdmin(t *testing.T, e *applyEnv, dir string) *kube {
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
	return k
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
