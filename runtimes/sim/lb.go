package sim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
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
	// to holds the connections to each backend, which are closed when it
	// is marked down (HAProxy's on-marked-down shutdown-sessions): an
	// HTTP/2 client keeps one connection and would wait on a backend that
	// lost its etcd member.
	to map[string]map[net.Conn]bool
	wg sync.WaitGroup
	// vip is set in endpoint mode vip: the address is served only while
	// a control-plane node holds it.
	vip *vip
}

// vip follows the compiled keepalived configuration: the control-plane
// nodes are backups of equal priority without preemption, so the first
// node up holds the VIP until it stops; then, after the master-down
// interval (three adverts and the skew of priority 100), the first
// surviving node takes it. A node that comes back does not take it again.
type vip struct {
	candidates []string
	failover   time.Duration
	down       map[string]bool
	holder     string
	// moves records every change of holder, for the scenario report.
	moves []vipMove
	// pending says a backup is about to take the VIP.
	pending bool
}

// vipMove is one change of the VIP's holder ("" for none).
type vipMove struct {
	from, to string
	at       time.Time
}

// withVIP makes the balancer serve only while a node holds the VIP.
// advert is keepalived's advert_int.
func (b *balancer) withVIP(candidates []string, advert time.Duration, now time.Time) {
	skew := advert * (256 - 100) / 256
	b.mu.Lock()
	defer b.mu.Unlock()
	b.vip = &vip{candidates: candidates, failover: 3*advert + skew, down: map[string]bool{}}
	b.elect(now)
}

// elect gives the VIP to the first candidate that is up; b.mu is held.
func (b *balancer) elect(now time.Time) {
	v := b.vip
	for _, c := range v.candidates {
		if !v.down[c] {
			v.moves = append(v.moves, vipMove{from: v.holder, to: c, at: now})
			v.holder = c
			return
		}
	}
}

// nodeDown tells the balancer a node stopped: the VIP leaves it at once
// and reaches another node after the failover interval.
func (b *balancer) nodeDown(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.vip
	if v == nil {
		return
	}
	v.down[name] = true
	if v.holder != name {
		return
	}
	v.moves = append(v.moves, vipMove{from: name, at: time.Now()})
	v.holder = ""
	v.pending = true
	time.AfterFunc(v.failover, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.vip.pending = false
		if b.vip.holder == "" {
			b.elect(time.Now())
		}
	})
	// The holder's connections end with it (closed without b.mu, which
	// a backend connection's Close takes).
	shut := make([]net.Conn, 0, len(b.conns))
	for c := range b.conns {
		shut = append(shut, c)
	}
	go func() {
		for _, c := range shut {
			c.Close()
		}
	}()
}

// nodeUp tells the balancer a node started again: it takes the VIP only
// when no node holds it and none is about to.
func (b *balancer) nodeUp(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.vip
	if v == nil {
		return
	}
	delete(v.down, name)
	if v.holder == "" && !v.pending {
		b.elect(time.Now())
	}
}

// Holder is the node holding the VIP, "" when none does or the
// endpoint is no VIP of the cluster's.
func (b *balancer) Holder() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.vip == nil {
		return ""
	}
	return b.vip.holder
}

// lastMove describes the VIP's latest complete move, for the report.
func (b *balancer) lastMove() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.vip == nil || len(b.vip.moves) < 2 {
		return ""
	}
	to := b.vip.moves[len(b.vip.moves)-1]
	from := b.vip.moves[len(b.vip.moves)-2]
	if from.to != "" || to.from != "" || from.from == "" {
		return ""
	}
	return fmt.Sprintf("the VIP moved from %s to %s in %s", from.from, to.to, to.at.Sub(from.at).Round(100*time.Millisecond))
}

// newBalancer listens on addr; check is a client with credentials that
// /readyz accepts.
func newBalancer(addr string, backends []string, tlsConfig *tls.Config) (*balancer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &balancer{ln: ln, backends: backends, healthy: map[string]bool{}, fails: map[string]int{}, conns: map[net.Conn]bool{}, to: map[string]map[net.Conn]bool{},
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
	shut := make([]net.Conn, 0, len(b.conns))
	for c := range b.conns {
		shut = append(shut, c)
	}
	b.mu.Unlock()
	for _, c := range shut {
		c.Close()
	}
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
			was := b.healthy[be]
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
			var shut []net.Conn
			if was && !b.healthy[be] {
				for c := range b.to[be] {
					shut = append(shut, c)
				}
			}
			b.mu.Unlock()
			for _, c := range shut {
				c.Close()
			}
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

// pickExcept picks a healthy backend not in tried: the next in turn
// (round robin) when client is "", else the first healthy one from the
// client's own place in the list, so that a client keeps its backend.
func (b *balancer) pickExcept(tried map[string]bool, client string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := b.next
	if client != "" {
		h := fnv.New32a()
		h.Write([]byte(client))
		start = int(h.Sum32() % uint32(len(b.backends)))
	}
	for i := range b.backends {
		be := b.backends[(start+i)%len(b.backends)]
		if b.healthy[be] && !tried[be] {
			if client == "" {
				b.next = (start + i + 1) % len(b.backends)
			}
			return be, nil
		}
	}
	return "", errors.New("no healthy API server")
}

// DialerFor connects one client (a simulated kubelet, by node name) to
// an API server the balancer would pick, hashing the client to its
// backend as HAProxy's "balance source" does, as long as that backend is
// healthy. The simulated kubelets dial through it: the same choice of
// healthy backend without a socket pair through the listener per kubelet
// (5,000 kubelets would otherwise need 20,000 descriptors). A real
// kubelet keeps one connection, and so one API server, for hours; the
// simulated ones close theirs when idle, and coming back to the same
// server resumes their TLS session (a session ticket is only good with
// the server that issued it) where round robin would cost a full
// handshake four times in five with five API servers.
func (b *balancer) DialerFor(client string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		return b.dial(ctx, network, client)
	}
}

// dial connects to a healthy backend (see pickExcept), trying another
// one when a connection is refused (HAProxy's "option redispatch").
func (b *balancer) dial(ctx context.Context, network, client string) (net.Conn, error) {
	if b.vip != nil && b.Holder() == "" {
		return nil, errors.New("no node holds the API endpoint's VIP")
	}
	tried := map[string]bool{}
	for {
		be, err := b.pickExcept(tried, client)
		if err != nil {
			return nil, err
		}
		d := net.Dialer{Timeout: 2 * time.Second}
		c, err := d.DialContext(ctx, network, be)
		if err == nil {
			return &backendConn{Conn: c, b: b, be: b.toBackend(be, c)}, nil
		}
		tried[be] = true
	}
}

// toBackend records c as a connection to be.
func (b *balancer) toBackend(be string, c net.Conn) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.to[be] == nil {
		b.to[be] = map[net.Conn]bool{}
	}
	b.to[be][c] = true
	return be
}

// backendConn is a connection to a backend that forgets itself when
// closed.
type backendConn struct {
	net.Conn
	b    *balancer
	be   string
	once sync.Once
}

func (c *backendConn) Close() error {
	c.once.Do(func() {
		c.b.mu.Lock()
		delete(c.b.to[c.be], c.Conn)
		c.b.mu.Unlock()
	})
	return c.Conn.Close()
}

// CloseWrite half-closes the TCP connection beneath.
func (c *backendConn) CloseWrite() error {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return nil
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
	up, err := b.dial(context.Background(), "tcp", "")
	if err != nil {
		return
	}
	b.track(up, true)
	defer func() {
		up.Close()
		b.track(up, false)
	}()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); up.(*backendConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}
