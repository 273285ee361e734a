// Command echo is the test workload of kcompile up's boot tests, served as
// registry.kcompile.test/echo:v1. It stands in for a public test image
// (agnhost's netexec plays this part upstream) that the machines of
// kcompile up cannot pull: an HTTP server on :8080 that the tests reach
// through the API server's pod and service proxies to prove that pods get
// addresses, resolve names through cluster DNS, reach each other and
// reach Services.
//
//	GET /               {"hostname": ..., "podIP": ...}
//	GET /resolve?name=N {"name": N, "addresses": [...]}, by the pod's resolver
//	GET /fetch?url=U    {"url": U, "status": ..., "body": ...}, a GET from the pod
//	GET /api?path=P     {"url": ..., "status": ..., "body": ...}, a GET of the API
//	                    server's path P as a client in the cluster makes it
//
// /api is a client as client-go's in-cluster configuration makes one: the
// API server at KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT, trusted
// through the service-account volume's ca.crt as it was when the process
// started (read once, as client-go reads it), with the volume's token,
// read again at each request (the kubelet refreshes it).
//
// Failures answer 502 with {"error": ...}.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", ":8080", "address to serve on")
	flag.Parse()
	srv := &http.Server{Addr: *listen, Handler: handler(serviceAccountDir), ReadHeaderTimeout: 10 * time.Second}
	// As a container's PID 1 the process gets SIGTERM only if it
	// handles it: without this, stopping the pod (or the node) waits
	// for the kill timeout.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

// The limits of one request: a test asks again rather than waits long.
const (
	timeout  = 5 * time.Second
	maxFetch = 64 << 10
)

// handler serves the echo's paths; saDir is where the pod's
// service-account volume is.
func handler(saDir string) http.Handler {
	// A connection per fetch, so that fetches of a Service are spread
	// over its endpoints as new connections are.
	fetcher := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	api, apiErr := inClusterClient(saDir)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		host, err := os.Hostname()
		if err != nil {
			fail(w, err)
			return
		}
		reply(w, map[string]string{"hostname": host, "podIP": podIP()})
	})
	mux.HandleFunc("GET /resolve", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		if name == "" {
			http.Error(w, "missing name", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, name)
		if err != nil {
			fail(w, err)
			return
		}
		reply(w, map[string]any{"name": name, "addresses": addrs})
	})
	mux.HandleFunc("GET /api", func(w http.ResponseWriter, r *http.Request) {
		if api == nil {
			fail(w, apiErr)
			return
		}
		token, err := os.ReadFile(filepath.Join(saDir, "token"))
		if err != nil {
			fail(w, err)
			return
		}
		u := "https://" + net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")) + r.URL.Query().Get("path")
		forward(w, r, api, u, "Bearer "+strings.TrimSpace(string(token)))
	})
	mux.HandleFunc("GET /fetch", func(w http.ResponseWriter, r *http.Request) {
		url := r.URL.Query().Get("url")
		if url == "" {
			http.Error(w, "missing url", http.StatusBadRequest)
			return
		}
		forward(w, r, fetcher, url, "")
	})
	return mux
}

// forward answers r with c's GET of u (with that Authorization header, where
// given): its status and body.
func forward(w http.ResponseWriter, r *http.Request, c *http.Client, u, authorization string) {
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := c.Do(req)
	if err != nil {
		fail(w, err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxFetch))
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, map[string]any{"url": u, "status": resp.StatusCode, "body": string(body)})
}

// serviceAccountDir is where a pod's service-account volume is mounted.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// inClusterClient trusts the service-account volume's CA bundle as it
// is now; nil with the reason where the pod has none.
func inClusterClient(saDir string) (*http.Client, error) {
	ca, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no certificate", filepath.Join(saDir, "ca.crt"))
	}
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

// podIP is the downward API's POD_IP when the pod sets it, otherwise the
// first global unicast address of the pod's interfaces.
func podIP() string {
	if ip := os.Getenv("POD_IP"); ip != "" {
		return ip
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		log.Printf("reply: %v", err)
	}
}

func fail(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadGateway)
	if err := json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprint(err)}); err != nil {
		log.Printf("reply: %v", err)
	}
}
