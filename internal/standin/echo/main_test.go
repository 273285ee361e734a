package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
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
	srv := httptest.NewServer(handler())
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
	srv := httptest.NewServer(handler())
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
	srv := httptest.NewServer(handler())
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
