package pki

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
)

// BrokenFlow is a flow of the cluster that fails between two states of a
// rotation: a client of one state against a server of the other, as
// happens while nodes move from one to the next.
type BrokenFlow struct {
	Flow Flow
	// ClientState and ServerState say which state each end is in:
	// "before" or "after".
	ClientState, ServerState string
	Err                      error
}

func (e *BrokenFlow) Error() string {
	client, server := e.Flow.Client, e.Flow.Server
	if client == "" {
		client = "a client without a certificate"
	}
	if server == "" {
		server = "a server outside the catalogue"
	}
	return fmt.Sprintf("flow %s breaks: %s %s the change against %s %s it: %v", e.Flow.Kind, client, e.ClientState, server, e.ServerState, e.Err)
}

// ProveTransition holds every flow of c to work while the cluster moves
// from the PKI of bundle before to that of after: for each flow, a real
// TLS handshake of its client in one state against its server in the
// other, both ways round, each end with its own state's certificate and
// trust store; and a service-account token signed in either state
// verifies in the other. A change of bundle changes issuers and trust
// stores only (names and addresses are c's in both), which are the same
// for every flow of a kind: one flow of each kind is shaken hands. It
// returns the first broken flow, in Flows' order (a *BrokenFlow). now is
// the clock of the verifications, random the handshakes' randomness.
func ProveTransition(c *ir.Cluster, before, after *Bundle, now time.Time, random io.Reader) error {
	var flows []Flow
	seen := map[string]bool{}
	for _, f := range Flows(c) {
		if !seen[f.Kind] {
			seen[f.Kind] = true
			flows = append(flows, f)
		}
	}
	var certs []Cert
	wanted := map[string]bool{}
	for _, f := range flows {
		wanted[f.Client], wanted[f.Server] = true, true
	}
	for _, cert := range Catalogue(c) {
		if wanted[cert.ID] {
			certs = append(certs, cert)
		}
	}
	states := [2]*Material{}
	for i, b := range []*Bundle{before, after} {
		m, err := IssueCerts(c, b, certs)
		if err != nil {
			return err
		}
		states[i] = m
	}
	names := [2]string{"before", "after"}
	for _, f := range flows {
		for _, way := range [][2]int{{0, 1}, {1, 0}} {
			if err := shake(f, states[way[0]], states[way[1]], now, random); err != nil {
				return &BrokenFlow{Flow: f, ClientState: names[way[0]], ServerState: names[way[1]], Err: err}
			}
		}
	}
	for _, way := range [][2]int{{0, 1}, {1, 0}} {
		signer := states[way[0]].Bundle.ServiceAccountSigner().Public()
		if !slices.ContainsFunc(states[way[1]].Bundle.ServiceAccountPublicKeys(), func(k crypto.PublicKey) bool { return publicKeysEqual(signer, k) }) {
			return &BrokenFlow{Flow: Flow{Kind: "service-account-token", Server: "kube-apiserver"}, ClientState: names[way[0]], ServerState: names[way[1]],
				Err: errors.New("the token's signing key is not among the API server's service-account public keys")}
		}
	}
	return nil
}

// shake runs flow f's handshake: its client of client's state against
// its server of server's state. A flow whose server is outside the
// catalogue (an aggregated API server, which trusts the front-proxy CA
// the API server publishes) has its client's chain verified against the
// server state's trust store instead.
func shake(f Flow, client, server *Material, now time.Time, random io.Reader) error {
	pool := func(m *Material, a Authority) *x509.CertPool {
		p := x509.NewCertPool()
		for _, c := range m.Bundle.Trusted(a) {
			p.AddCert(c)
		}
		return p
	}
	var clientCert *tls.Certificate
	if f.Client != "" {
		l, ok := client.Leaf(f.Client)
		if !ok {
			return fmt.Errorf("kcompile bug: no certificate %s", f.Client)
		}
		clientCert = &tls.Certificate{Certificate: [][]byte{l.X509.Raw}, PrivateKey: l.Key, Leaf: l.X509}
	}
	if f.Server == "" {
		_, err := clientCert.Leaf.Verify(x509.VerifyOptions{Roots: pool(server, f.ClientCA), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	l, ok := server.Leaf(f.Server)
	if !ok {
		return fmt.Errorf("kcompile bug: no certificate %s", f.Server)
	}
	clock := func() time.Time { return now }
	srvCfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{l.X509.Raw}, PrivateKey: l.Key, Leaf: l.X509}},
		MinVersion: tls.VersionTLS12, Time: clock, Rand: random}
	if clientCert != nil {
		srvCfg.ClientAuth, srvCfg.ClientCAs = tls.RequireAndVerifyClientCert, pool(server, f.ClientCA)
	}
	cliCfg := &tls.Config{RootCAs: pool(client, f.ServerCA), ServerName: f.ServerName, MinVersion: tls.VersionTLS12, Time: clock, Rand: random}
	if clientCert != nil {
		cliCfg.Certificates = []tls.Certificate{*clientCert}
	}
	a, b := bufferedPipe()
	srv, cli := tls.Server(a, srvCfg), tls.Client(b, cliCfg)
	done := make(chan error, 1)
	go func() {
		// The server writes once its side is done, so that a client
		// certificate it refuses after the client's Finished (TLS 1.3)
		// reaches the client as an error.
		err := srv.Handshake()
		if err == nil {
			_, err = srv.Write([]byte{1})
		}
		srv.Close()
		done <- err
	}()
	err := cli.Handshake()
	if err == nil {
		_, err = cli.Read(make([]byte, 1))
	}
	cli.Close()
	serr := <-done
	// The end that refused says why; the other hears only its alert.
	var alert tls.AlertError
	switch {
	case err != nil && (serr == nil || errors.As(serr, &alert) || strings.Contains(serr.Error(), "remote error")):
		return fmt.Errorf("the client: %w", err)
	case serr != nil:
		return fmt.Errorf("the server: %w", serr)
	}
	return nil
}

// bufferedPipe is an in-memory connection whose writes never wait for
// the reader, as a socket's do not until its buffer fills: with
// net.Pipe, an end sending an alert while the other still writes its
// flight would wait for ever.
func bufferedPipe() (net.Conn, net.Conn) {
	ab, ba := newQueue(), newQueue()
	return &pipeEnd{in: ba, out: ab}, &pipeEnd{in: ab, out: ba}
}

type queue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	data   []byte
	closed bool
}

func newQueue() *queue {
	q := &queue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

type pipeEnd struct{ in, out *queue }

func (p *pipeEnd) Read(b []byte) (int, error) {
	q := p.in
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.data) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.data) == 0 {
		return 0, io.EOF
	}
	n := copy(b, q.data)
	q.data = q.data[n:]
	return n, nil
}

func (p *pipeEnd) Write(b []byte) (int, error) {
	q := p.out
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, io.ErrClosedPipe
	}
	q.data = append(q.data, b...)
	q.cond.Broadcast()
	return len(b), nil
}

// Close ends both directions: the other end reads what was written, then
// EOF, and its writes fail.
func (p *pipeEnd) Close() error {
	for _, q := range []*queue{p.in, p.out} {
		q.mu.Lock()
		q.closed = true
		q.cond.Broadcast()
		q.mu.Unlock()
	}
	return nil
}

func (p *pipeEnd) LocalAddr() net.Addr              { return pipeAddr{} }
func (p *pipeEnd) RemoteAddr() net.Addr             { return pipeAddr{} }
func (p *pipeEnd) SetDeadline(time.Time) error      { return nil }
func (p *pipeEnd) SetReadDeadline(time.Time) error  { return nil }
func (p *pipeEnd) SetWriteDeadline(time.Time) error { return nil }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
