package sim

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// balancer is a TCP load balancer in front of the API servers, as a
// hardware or keepalived/HAProxy pair would be: it passes connections
// through untouched (TLS ends at the API server) to the backends whose
// /readyz answers.
type balancer struct {
	ln       net.Listener
	backends []string
	check    *http.Client

	mu      sync.Mutex
	healthy map[string]bool
	next    int
	conns   map[net.Conn]bool
	wg      sync.WaitGroup
}

// newBalancer listens on addr; check is a client with credentials that
// /readyz accepts.
func newBalancer(addr string, backends []string, tlsConfig *tls.Config) (*balancer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &balancer{ln: ln, backends: backends, healthy: map[string]bool{}, conns: map[net.Conn]bool{},
		check: &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true}}}, nil
}

// run serves until ctx ends, then closes every connection.
func (b *balancer) run(ctx context.Context) {
	b.wg.Add(2)
	go func() {
		defer b.wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			b.probe()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	go func() {
		defer b.wg.Done()
		for {
			c, err := b.ln.Accept()
			if err != nil {
				return
			}
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				b.serve(c)
			}()
		}
	}()
	<-ctx.Done()
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
	b.check.CloseIdleConnections()
}

func (b *balancer) probe() {
	var wg sync.WaitGroup
	for _, be := range b.backends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := false
			if resp, err := b.check.Get("https://" + be + "/readyz"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok = resp.StatusCode == http.StatusOK
			}
			b.mu.Lock()
			b.healthy[be] = ok
			b.mu.Unlock()
		}()
	}
	wg.Wait()
}

// Healthy counts the backends that answer /readyz.
func (b *balancer) Healthy() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, ok := range b.healthy {
		if ok {
			n++
		}
	}
	return n
}

func (b *balancer) pick() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.backends {
		be := b.backends[(b.next+i)%len(b.backends)]
		if b.healthy[be] {
			b.next = (b.next + i + 1) % len(b.backends)
			return be, nil
		}
	}
	return "", errors.New("no healthy API server")
}

// DialContext connects to an API server the balancer would pick. The
// simulated kubelets dial through it: the same choice of healthy
// backend, without a socket pair through the listener per kubelet (5,000
// kubelets would otherwise need 20,000 descriptors).
func (b *balancer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	be, err := b.pick()
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, network, be)
}

func (b *balancer) track(c net.Conn, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if on {
		b.conns[c] = true
	} else {
		delete(b.conns, c)
	}
}

func (b *balancer) serve(c net.Conn) {
	b.track(c, true)
	defer func() {
		c.Close()
		b.track(c, false)
	}()
	be, err := b.pick()
	if err != nil {
		return
	}
	up, err := net.DialTimeout("tcp", be, 2*time.Second)
	if err != nil {
		return
	}
	b.track(up, true)
	defer func() {
		up.Close()
		b.track(up, false)
	}()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}
