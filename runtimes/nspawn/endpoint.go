package nspawn

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

// balancer serves the API endpoint when no node holds its address: a TCP
// proxy on the bridge that hands each connection to the first API server
// that accepts, starting from the next one each time (TLS passes through:
// clients see the API servers' certificates).
type balancer struct {
	ln       net.Listener
	backends []netip.AddrPort
	mu       sync.Mutex
	next     int
}

func serveBalancer(at netip.AddrPort, backends []netip.AddrPort) (*balancer, error) {
	ln, err := net.Listen("tcp", at.String())
	if err != nil {
		return nil, err
	}
	b := &balancer{ln: ln, backends: backends}
	go b.serve()
	return b, nil
}

func (b *balancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		go b.relay(c)
	}
}

func (b *balancer) relay(c net.Conn) {
	defer c.Close()
	b.mu.Lock()
	backends := b.backends
	start := b.next
	if len(backends) > 0 {
		b.next = (b.next + 1) % len(backends)
	}
	b.mu.Unlock()
	var up net.Conn
	for i := range backends {
		be := backends[(start+i)%len(backends)]
		conn, err := net.DialTimeout("tcp", be.String(), 2*time.Second)
		if err == nil {
			up = conn
			break
		}
	}
	if up == nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

// set replaces the API servers: connections open to a removed one end
// with it.
func (b *balancer) set(backends []netip.AddrPort) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = backends
	b.next = 0
}

// close stops accepting; open connections end with the API servers.
func (b *balancer) close() { b.ln.Close() }
