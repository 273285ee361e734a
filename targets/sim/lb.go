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
	// fails counts consecutive failed checks per backend: as HAProxy's
	// "fall 3", a busy server is not dropped for one slow answer.
	fails map[string]int
	next  int
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// newBalancer listens on addr; check is a client with credentials that
// /readyz accepts.
func newBalancer(addr string, backends []string, tlsConfig *tls.Config) (*balancer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &balancer{ln: ln, backends: backends, healthy: map[string]bool{}, fails: map[string]int{}, conns: map[net.Conn]bool{},
		check: &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true}}}, nil
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
			ok, down := false, false
			resp, err := b.check.Get("https://" + be + "/readyz")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok = resp.StatusCode == http.StatusOK
			} else {
				// A refused connection is a server gone, not a slow one.
				var op *net.OpError
				down = errors.As(err, &op) && op.Op == "dial"
			}
			b.mu.Lock()
			switch {
			case ok:
				b.fails[be] = 0
				b.healthy[be] = true
			case down:
				b.healthy[be] = false
			default:
				if b.fails[be]++; b.fails[be] >= 3 {
					b.healthy[be] = false
				}
			}
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

// pickExcept picks the next healthy backend not in tried.
func (b *balancer) pickExcept(tried map[string]bool) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.backends {
		be := b.backends[(b.next+i)%len(b.backends)]
		if b.healthy[be] && !tried[be] {
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
	return b.dial(ctx, network)
}

// dial connects to a healthy backend, trying the next one when a
// connection is refused (HAProxy's "option redispatch").
func (b *balancer) dial(ctx context.Context, network string) (net.Conn, error) {
	tried := map[string]bool{}
	for {
		be, err := b.pickExcept(tried)
		if err != nil {
			return nil, err
		}
		d := net.Dialer{Timeout: 2 * time.Second}
		c, err := d.DialContext(ctx, network, be)
		if err == nil {
			return c, nil
		}
		tried[be] = true
	}
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
	up, err := b.dial(context.Background(), "tcp")
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
