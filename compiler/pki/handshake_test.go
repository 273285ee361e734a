package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
)

// testVerifyTime is the clock of every verification in the tests: a day into
// the test bundle's epoch, so that the tests do not depend on today's date.
var testVerifyTime = testEpoch.Add(24 * time.Hour)

// handshakeFlowKinds are the flows the handshake test knows how to run. A kind
// Flows returns that is not listed fails the test, so that a new flow gets
// a handshake.
var handshakeFlowKinds = []string{
	"kubelet→apiserver", "apiserver→kubelet", "apiserver→etcd", "etcd-peer→etcd-peer",
	"etcd-healthcheck→etcd", "controller-manager→apiserver", "scheduler→apiserver",
	"kube-proxy→apiserver", "calico-cni→apiserver", "admin→apiserver", "super-admin→apiserver",
	"pod→apiserver", "front-proxy→aggregated-apiserver", "endpoint-health→apiserver",
}

// handshakeResult is the outcome of one handshake, seen from both ends.
type handshakeResult struct {
	clientErr, serverErr error
	// server is the server's view of the connection (the client's
	// certificate in PeerCertificates).
	server tls.ConnectionState
	// client is the client's view (the server's certificate).
	client tls.ConnectionState
}

// loopbackHandshake runs a TLS handshake between a server and a client configured
// by srv and cli over a loopback TCP connection. After the handshake the
// server writes a byte and the client reads it, so that a client
// certificate the server rejects after the client's Finished (TLS 1.3)
// surfaces as an error on both ends.
func loopbackHandshake(t *testing.T, srv, cli *tls.Config) handshakeResult {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	type serverSide struct {
		state tls.ConnectionState
		err   error
	}
	done := make(chan serverSide, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- serverSide{err: fmt.Errorf("accept: %w", err)}
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		s := tls.Server(conn, srv)
		err = s.Handshake()
		if err == nil {
			_, err = s.Write([]byte{42})
		}
		done <- serverSide{state: s.ConnectionState(), err: err}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	c := tls.Client(conn, cli)
	var r handshakeResult
	r.clientErr = c.Handshake()
	if r.clientErr == nil {
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			r.clientErr = err
		} else if b[0] != 42 {
			r.clientErr = fmt.Errorf("read %d from the server, want 42", b[0])
		}
	}
	r.client = c.ConnectionState()
	c.Close()
	s := <-done
	r.server, r.serverErr = s.state, s.err
	return r
}

// flowServerConfig is a server presenting cert that requires (or, when
// clientCAs is nil, does not ask for) a client certificate signed by
// clientCAs.
func flowServerConfig(cert tls.Certificate, clientCAs *x509.CertPool) *tls.Config {
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		Time:         func() time.Time { return testVerifyTime },
	}
	if clientCAs != nil {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = clientCAs
	}
	return cfg
}

// flowClientConfig is a client that trusts roots, dials serverName and, when
// cert is not nil, presents it whatever CAs the server asks for (so that a
// server can be shown a certificate of the wrong CA).
func flowClientConfig(roots *x509.CertPool, serverName string, cert *tls.Certificate) *tls.Config {
	cfg := &tls.Config{
		RootCAs:    roots,
		ServerName: serverName,
		MinVersion: tls.VersionTLS12,
		Time:       func() time.Time { return testVerifyTime },
	}
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return cfg
}

// wrapsErr reports whether err wraps an error of type T.
func wrapsErr[T error](err error) bool {
	var target T
	return err != nil && errors.As(err, &target)
}

// wrongCAFor is a CA of the bundle that must not verify what a signs.
func wrongCAFor(a Authority) Authority {
	if a == ClusterCA {
		return EtcdCA
	}
	return ClusterCA
}

// aggregatedStandIn is a stand-in aggregated API server (metrics-server,
// say): a serving certificate from its own CA, as an APIService's caBundle
// carries it, and the front proxy's CA and allowed names for clients, as
// --requestheader-client-ca-file and --requestheader-allowed-names set them.
type aggregatedStandIn struct {
	roots        *x509.CertPool
	cert         tls.Certificate
	name         string
	allowedNames []string
}

func newAggregatedStandIn(t *testing.T) *aggregatedStandIn {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "aggregated-test-ca"},
		NotBefore: testEpoch, NotAfter: testEpoch.Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	const name = "metrics-server.kube-system.svc"
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: testEpoch, NotAfter: testEpoch.Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	return &aggregatedStandIn{
		roots:        roots,
		cert:         tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		name:         name,
		allowedNames: []string{frontProxyClientName},
	}
}

// TestHandshakes makes a real TLS handshake for every flow of the HA
// examples with the issued certificates, and checks that the server sees
// the identity authorization needs; then breaks each flow (wrong CA, wrong
// name, wrong client certificate) and checks that verification, not
// something else, fails it.
func TestHandshakes(t *testing.T) {
	for _, ex := range []string{"ha-stacked", "external-etcd"} {
		t.Run(ex, func(t *testing.T) {
			m := issueExample(t, ex)
			testHandshakes(t, m)
		})
	}
}

func testHandshakes(t *testing.T, m *Material) {
	b := m.Bundle
	flows := Flows(m.Cluster)
	agg := newAggregatedStandIn(t)

	seen := map[string]int{}
	for _, f := range flows {
		if !slices.Contains(handshakeFlowKinds, f.Kind) {
			t.Errorf("flow kind %q has no handshake test", f.Kind)
			continue
		}
		seen[f.Kind]++
	}
	for _, k := range handshakeFlowKinds {
		want := true
		switch k {
		case "kube-proxy→apiserver":
			want = m.Cluster.Network.KubeProxyMode != "none"
		case "calico-cni→apiserver":
			want = m.Cluster.Network.CNI.Plugin == "calico"
		case "endpoint-health→apiserver":
			want = m.Cluster.Endpoint.Mode == ir.EndpointVIP || m.Cluster.Endpoint.Mode == ir.EndpointNodeLocal
		}
		if want && seen[k] == 0 {
			t.Errorf("Flows has no %s flow", k)
		}
		if !want && seen[k] > 0 {
			t.Errorf("Flows has %d %s flows, want none", seen[k], k)
		}
	}

	// Certificates of one CA to present to a server of another: the API
	// server's clients to etcd, etcd's and the front proxy's clients to
	// the API server, the API server's client to an aggregated server.
	var firstCP string
	for _, n := range m.Cluster.Nodes {
		if n.Runs(ir.ComponentAPIServer) {
			firstCP = n.Name
			break
		}
	}
	wrongClients := map[Authority][]Issued{
		ClusterCA:    {mustLeaf(t, m, "apiserver-etcd-client@"+firstCP), mustLeaf(t, m, "front-proxy-client@"+firstCP)},
		EtcdCA:       {mustLeaf(t, m, "apiserver-kubelet-client@"+firstCP)},
		FrontProxyCA: {mustLeaf(t, m, "apiserver-kubelet-client@"+firstCP)},
	}

	start := time.Now()
	tls12 := map[string]bool{}
	for _, f := range flows {
		name := fmt.Sprintf("%s %s→%s@%s", f.Kind, f.Client, f.Server, f.ServerName)
		t.Run(name, func(t *testing.T) {
			// The server end of the flow.
			var srvCert tls.Certificate
			var roots *x509.CertPool
			serverName := f.ServerName
			if f.Server == "" {
				if f.Kind != "front-proxy→aggregated-apiserver" {
					t.Fatalf("flow has no server certificate")
				}
				srvCert, roots, serverName = agg.cert, agg.roots, agg.name
			} else {
				srv := mustLeaf(t, m, f.Server)
				if srv.CA != f.ServerCA {
					t.Errorf("server %s is signed by %s but the flow verifies it with %s", f.Server, srv.CA, f.ServerCA)
				}
				srvCert, roots = tlsCert(t, srv), caPool(b, f.ServerCA)
			}
			var clientCAs *x509.CertPool
			var cliCert *tls.Certificate
			if f.Client != "" {
				cl := mustLeaf(t, m, f.Client)
				if cl.CA != f.ClientCA {
					t.Errorf("client %s is signed by %s but the flow verifies it with %s", f.Client, cl.CA, f.ClientCA)
				}
				// The flow dials what the client's kubeconfig says.
				if cl.Kubeconfig != nil {
					u, err := url.Parse(cl.Kubeconfig.Server)
					if err != nil || u.Hostname() != f.ServerName {
						t.Errorf("%s's kubeconfig dials %s, but the flow verifies the server as %s", f.Client, cl.Kubeconfig.Server, f.ServerName)
					}
				}
				c := tlsCert(t, cl)
				cliCert, clientCAs = &c, caPool(b, f.ClientCA)
			} else if f.Kind != "pod→apiserver" {
				t.Fatalf("flow has no client certificate")
			}
			srvCfg := func(clientCAs *x509.CertPool) *tls.Config {
				cfg := flowServerConfig(srvCert, clientCAs)
				if clientCAs == nil {
					// The API server asks for a client certificate but
					// takes service-account tokens without one.
					cfg.ClientAuth = tls.VerifyClientCertIfGiven
					cfg.ClientCAs = caPool(b, ClusterCA)
				}
				return cfg
			}

			// The flow works and the server sees the identity.
			versions := []uint16{0}
			if !tls12[f.Kind] {
				// Once per kind, also with TLS 1.2, the minimum.
				tls12[f.Kind] = true
				versions = append(versions, tls.VersionTLS12)
			}
			for _, v := range versions {
				cli := flowClientConfig(roots, serverName, cliCert)
				cli.MaxVersion = v
				r := loopbackHandshake(t, srvCfg(clientCAs), cli)
				if r.clientErr != nil || r.serverErr != nil {
					t.Fatalf("handshake (max version %#x) failed: client: %v; server: %v", v, r.clientErr, r.serverErr)
				}
				if v == tls.VersionTLS12 && r.client.Version != tls.VersionTLS12 {
					t.Errorf("negotiated %#x, want TLS 1.2", r.client.Version)
				}
				if len(r.client.VerifiedChains) == 0 {
					t.Errorf("the client verified no chain")
				}
				if f.Client == "" {
					if len(r.server.PeerCertificates) != 0 {
						t.Errorf("the server saw a client certificate %q", r.server.PeerCertificates[0].Subject)
					}
					continue
				}
				if len(r.server.PeerCertificates) == 0 || len(r.server.VerifiedChains) == 0 {
					t.Fatalf("the server saw no verified client certificate")
				}
				peer := r.server.PeerCertificates[0]
				if peer.Subject.CommonName != f.User {
					t.Errorf("server saw user %q, want %q", peer.Subject.CommonName, f.User)
				}
				if !slices.Equal(peer.Subject.Organization, f.Groups) {
					t.Errorf("server saw groups %q, want %q", peer.Subject.Organization, f.Groups)
				}
				if f.Kind == "front-proxy→aggregated-apiserver" && !slices.Contains(agg.allowedNames, peer.Subject.CommonName) {
					t.Errorf("the aggregated server would refuse %q: not in --requestheader-allowed-names %q", peer.Subject.CommonName, agg.allowedNames)
				}
			}

			// (a) Wrong CA on the client: it trusts a CA of the bundle that
			// did not sign the server.
			wrongRoots := caPool(b, wrongCAFor(f.ServerCA))
			if f.Server == "" {
				// The aggregated server's certificate is not the front
				// proxy's to vouch for.
				wrongRoots = caPool(b, FrontProxyCA)
			}
			r := loopbackHandshake(t, srvCfg(clientCAs), flowClientConfig(wrongRoots, serverName, cliCert))
			if !wrapsErr[x509.UnknownAuthorityError](r.clientErr) {
				t.Errorf("client trusting the wrong CA: got client error %v, want an unknown-authority error", r.clientErr)
			}
			if r.serverErr == nil {
				t.Errorf("client trusting the wrong CA: the server completed the connection")
			}

			// (a) Wrong CA on the server: it takes clients of another CA.
			if f.Client != "" {
				r := loopbackHandshake(t, srvCfg(caPool(b, wrongCAFor(f.ClientCA))), flowClientConfig(roots, serverName, cliCert))
				if !wrapsErr[x509.UnknownAuthorityError](r.serverErr) {
					t.Errorf("server trusting the wrong client CA: got server error %v, want an unknown-authority error", r.serverErr)
				}
				if r.clientErr == nil {
					t.Errorf("server trusting the wrong client CA: the client completed the connection")
				}
			}

			// (b) Wrong name: the server's certificate does not cover it.
			wrongNames := []string{"wrong.example.com"}
			if net.ParseIP(serverName) != nil {
				wrongNames = append(wrongNames, "192.0.2.1")
			}
			for _, wrong := range wrongNames {
				r := loopbackHandshake(t, srvCfg(clientCAs), flowClientConfig(roots, wrong, cliCert))
				if !wrapsErr[x509.HostnameError](r.clientErr) {
					t.Errorf("dialling %s: got client error %v, want a hostname error", wrong, r.clientErr)
				}
				if r.serverErr == nil {
					t.Errorf("dialling %s: the server completed the connection", wrong)
				}
			}

			// (b) Wrong identity: a client certificate of another CA.
			if f.Client != "" {
				for _, wrong := range wrongClients[f.ClientCA] {
					if wrong.CA == f.ClientCA {
						t.Errorf("%s is signed by %s, the CA of %s's clients: the CAs are not kept apart", wrong.ID, wrong.CA, f.Kind)
						continue
					}
					c := tlsCert(t, wrong)
					r := loopbackHandshake(t, srvCfg(clientCAs), flowClientConfig(roots, serverName, &c))
					if !wrapsErr[x509.UnknownAuthorityError](r.serverErr) {
						t.Errorf("client presenting %s (%s): got server error %v, want an unknown-authority error", wrong.ID, wrong.CA, r.serverErr)
					}
					if r.clientErr == nil {
						t.Errorf("client presenting %s (%s): the client completed the connection", wrong.ID, wrong.CA)
					}
				}
			}
		})
	}

	// A serving-only certificate of the right CA is no client certificate:
	// the kubelet cannot use its serving certificate to call the API.
	for _, f := range flows {
		if f.Kind != "kubelet→apiserver" {
			continue
		}
		node := strings.TrimPrefix(f.Client, "kubelet-client@")
		serving := tlsCert(t, mustLeaf(t, m, "kubelet-serving@"+node))
		r := loopbackHandshake(t, flowServerConfig(tlsCert(t, mustLeaf(t, m, f.Server)), caPool(b, ClusterCA)),
			flowClientConfig(caPool(b, ClusterCA), f.ServerName, &serving))
		var inv x509.CertificateInvalidError
		if !errors.As(r.serverErr, &inv) || inv.Reason != x509.IncompatibleUsage {
			t.Errorf("kubelet-serving@%s as a client certificate: got server error %v, want an incompatible-usage error", node, r.serverErr)
		}
		break
	}

	// The aggregated server's allowed-names check is not vacuous: a client
	// certificate of the front proxy's CA under another name passes TLS
	// but not the check.
	fp := b.CAs[FrontProxyCA]
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "mallory"},
		NotBefore: testEpoch, NotAfter: testEpoch.Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, fp.Cert, &key.PublicKey, fp.Key)
	if err != nil {
		t.Fatal(err)
	}
	mallory := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	r := loopbackHandshake(t, flowServerConfig(agg.cert, caPool(b, FrontProxyCA)), flowClientConfig(agg.roots, agg.name, &mallory))
	if r.serverErr != nil || r.clientErr != nil {
		t.Fatalf("front-proxy CA client: client: %v; server: %v", r.clientErr, r.serverErr)
	}
	if cn := r.server.PeerCertificates[0].Subject.CommonName; slices.Contains(agg.allowedNames, cn) {
		t.Errorf("stand-in check is vacuous: %q is allowed", cn)
	}
	t.Logf("%d flows (%v) in %v", len(flows), seen, time.Since(start).Round(time.Millisecond))
}
