package sim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// testCA is a CA with a server certificate for api.example and
// 127.0.0.2.
func testCA(t *testing.T, name string) (caPEM string, roots *x509.CertPool, server *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, ca, ca, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	if ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), DNSNames: []string{"api.example"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.2")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err = x509.CreateCertificate(rand.Reader, leaf, ca, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	if server, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(ca)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})), roots, server
}

// TestChainCache: the kubelets' shared verdict accepts an API server's
// certificate for its names under its CA only, and remembers successes
// alone, each for its own CA and name.
func TestChainCache(t *testing.T) {
	caPEM, roots, server := testCA(t, "cluster-ca")
	otherPEM, otherRoots, _ := testCA(t, "other-ca")
	var c chainCache
	certs := []*x509.Certificate{server}
	for _, name := range []string{"api.example", "127.0.0.2", "api.example"} {
		if err := c.verify(caPEM, roots, name, certs); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(c.ok) != 2 {
		t.Errorf("%d verdicts remembered, want 2 (one per name)", len(c.ok))
	}
	for i := range 2 {
		if err := c.verify(caPEM, roots, "evil.example", certs); err == nil || !strings.Contains(err.Error(), "evil.example") {
			t.Errorf("attempt %d: a certificate for another name verified: %v", i, err)
		}
		if err := c.verify(otherPEM, otherRoots, "api.example", certs); err == nil {
			t.Errorf("attempt %d: a certificate of another CA verified", i)
		}
	}
	if err := c.verify(caPEM, roots, "api.example", nil); err == nil {
		t.Error("no certificate verified")
	}
	if len(c.ok) != 2 {
		t.Errorf("%d verdicts remembered after failures, want 2", len(c.ok))
	}
}

// TestChainCacheRoots: kubelets trusting one CA share one parsed pool;
// a configuration without a CA certificate is refused.
func TestChainCacheRoots(t *testing.T) {
	caPEM, _, server := testCA(t, "cluster-ca")
	otherPEM, _, _ := testCA(t, "other-ca")
	var c chainCache
	ca1, pool1, err1 := c.roots(&rest.Config{Host: "https://127.0.0.2:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte(caPEM)}})
	ca2, pool2, err2 := c.roots(&rest.Config{Host: "https://127.0.0.2:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte(caPEM)}})
	_, pool3, err3 := c.roots(&rest.Config{Host: "https://127.0.0.2:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte(otherPEM)}})
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatal(err1, err2, err3)
	}
	if ca1 != ca2 || pool1 != pool2 || pool1 == pool3 {
		t.Error("one CA is not one pool, or two CAs share one")
	}
	if err := c.verify(ca1, pool1, "api.example", []*x509.Certificate{server}); err != nil {
		t.Errorf("the shared pool does not verify its CA's server: %v", err)
	}
	if _, _, err := c.roots(&rest.Config{Host: "https://127.0.0.2:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("not a certificate")}}); err == nil {
		t.Error("a kubeconfig without a CA certificate was accepted")
	}
}
