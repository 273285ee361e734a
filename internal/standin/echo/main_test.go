package main

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// get asks the echo handler for path and decodes its JSON answer.
func get(t *testing.T, srv *httptest.Server, path string, wantStatus int) map[string]any {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != wantStatus {
		t.Fatalf("%s: status %d, want %d", path, resp.StatusCode, wantStatus)
	}
	var out map[string]any
	if wantStatus < 400 || wantStatus == http.StatusBadGateway {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return out
}

func TestRoot(t *testing.T) {
	srv := httptest.NewServer(handler(t.TempDir()))
	defer srv.Close()
	t.Setenv("POD_IP", "10.244.0.7")
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	got := get(t, srv, "/", http.StatusOK)
	if got["hostname"] != host || got["podIP"] != "10.244.0.7" {
		t.Errorf("/ says %v", got)
	}
	get(t, srv, "/nothing", http.StatusNotFound)
}

func TestResolve(t *testing.T) {
	srv := httptest.NewServer(handler(t.TempDir()))
	defer srv.Close()
	got := get(t, srv, "/resolve?name=localhost", http.StatusOK)
	addrs, _ := got["addresses"].([]any)
	if got["name"] != "localhost" || !slices.Contains(addrs, any("127.0.0.1")) && !slices.Contains(addrs, any("::1")) {
		t.Errorf("/resolve says %v", got)
	}
	if got := get(t, srv, "/resolve?name=no-such-name.invalid", http.StatusBadGateway); got["error"] == "" {
		t.Errorf("an unresolvable name says %v", got)
	}
	get(t, srv, "/resolve", http.StatusBadRequest)
}

func TestFetch(t *testing.T) {
	srv := httptest.NewServer(handler(t.TempDir()))
	defer srv.Close()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte("from the other pod"))
	}))
	defer target.Close()
	got := get(t, srv, "/fetch?url="+url.QueryEscape(target.URL), http.StatusOK)
	if got["status"] != float64(http.StatusTeapot) || got["body"] != "from the other pod" {
		t.Errorf("/fetch says %v", got)
	}
	target.Close()
	if got := get(t, srv, "/fetch?url="+url.QueryEscape(target.URL), http.StatusBadGateway); got["error"] == "" {
		t.Errorf("a closed server says %v", got)
	}
	get(t, srv, "/fetch", http.StatusBadRequest)
}

// /api asks the API server as client-go's in-cluster client does: the
// CA bundle of the service-account volume as it was when the process
// started, its token as it is at each request.
func TestAPI(t *testing.T) {
	var tokens []string
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokens = append(tokens, r.Header.Get("Authorization"))
		_, _ = w.Write([]byte(`{"kind":"APIVersions"}`))
	}))
	defer api.Close()
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", u.Hostname())
	t.Setenv("KUBERNETES_SERVICE_PORT", u.Port())
	srv := httptest.NewServer(handler(dir))
	defer srv.Close()
	out := get(t, srv, "/api?path=%2Fapi", http.StatusOK)
	if out["status"] != float64(200) || out["body"] != `{"kind":"APIVersions"}` {
		t.Errorf("/api: %v", out)
	}
	// The kubelet refreshes the token, and the volume's CA bundle.
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := get(t, srv, "/api?path=%2Fapi", http.StatusOK); out["status"] != float64(200) {
		t.Errorf("/api once the volume changed: %v", out)
	}
	if !slices.Equal(tokens, []string{"Bearer one", "Bearer two"}) {
		t.Errorf("the API server was given %q, want each request's token as the volume held it", tokens)
	}
	// A pod without a service-account volume says so.
	bare := httptest.NewServer(handler(t.TempDir()))
	defer bare.Close()
	if out := get(t, bare, "/api?path=%2Fapi", http.StatusBadGateway); out["error"] == nil {
		t.Errorf("/api without a volume: %v", out)
	}
}
