package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
)

// Issued is a catalogue entry with its key and signed certificate.
type Issued struct {
	Cert
	X509    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// Format keeps the private key out of logs whatever the verb.
func (i Issued) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "pki.Issued{%s, key redacted}", i.ID)
}

// Material is the issued PKI of a cluster.
type Material struct {
	Cluster *ir.Cluster
	Bundle  *Bundle
	// Leaves follow the catalogue's order.
	Leaves []Issued
}

// Format keeps private keys out of logs whatever the verb.
func (m *Material) Format(f fmt.State, _ rune) {
	if m == nil {
		fmt.Fprint(f, "<nil>")
		return
	}
	fmt.Fprintf(f, "pki.Material{%d leaves, keys redacted}", len(m.Leaves))
}

// Leaf finds an issued certificate by ID.
func (m *Material) Leaf(id string) (Issued, bool) {
	for _, l := range m.Leaves {
		if l.ID == id {
			return l, true
		}
	}
	return Issued{}, false
}

// Issue signs every certificate of the cluster's catalogue. It is a pure
// function of its arguments: keys are derived from the bundle's seed and
// each certificate's identity, serials from the certificate's contents,
// and ECDSA signatures are deterministic (RFC 6979) as RSA PKCS #1 v1.5
// signatures are. It refuses to issue a leaf outside its CA's validity;
// Check says why in terms of the spec and the bundle.
func Issue(c *ir.Cluster, b *Bundle) (*Material, error) {
	return IssueCerts(c, b, Catalogue(c))
}

// IssueCerts signs the given entries of the cluster's catalogue, in
// their order: each is the same certificate Issue would sign, because an
// entry depends only on the cluster-wide settings and its own node. The
// simulator issues its simulated kubelets' client certificates alone.
// Certificates are signed on every core; the result does not depend on
// their number.
func IssueCerts(c *ir.Cluster, b *Bundle, certs []Cert) (*Material, error) {
	alg, err := ParseAlgorithm(c.PKI.KeyAlgorithm)
	if err != nil {
		return nil, err
	}
	leaves := make([]Issued, len(certs))
	errs := make([]error, len(certs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(certs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(certs); i = int(next.Add(1) - 1) {
				leaves[i], errs[i] = issue(c, b, alg, certs[i])
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("issuing %s: %w", certs[i].ID, err)
		}
	}
	return &Material{Cluster: c, Bundle: b, Leaves: leaves}, nil
}

// identity is what a leaf's key is derived from. The epoch is part of it
// so that renewal re-keys.
func identity(c *ir.Cluster, b *Bundle, cert Cert) string {
	return "leaf|" + c.Name + "|" + cert.ID + "|" + b.Epoch.UTC().Format("2006-01-02T15:04:05Z")
}

func issue(c *ir.Cluster, b *Bundle, alg Algorithm, cert Cert) (Issued, error) {
	if _, ok := b.CAs[cert.CA]; !ok {
		return Issued{}, fmt.Errorf("the secrets bundle has no %s", cert.CA)
	}
	ca := b.Signer(cert.CA)
	notBefore, notAfter := leafWindow(c, b, ca.Cert)
	if b.Epoch.Before(ca.Cert.NotBefore) || notAfter.After(ca.Cert.NotAfter) {
		return Issued{}, fmt.Errorf("a leaf issued at %s valid until %s would not lie inside %s's validity (%s to %s)",
			b.Epoch.Format(time.RFC3339), notAfter.Format(time.RFC3339), cert.CA,
			ca.Cert.NotBefore.UTC().Format(time.RFC3339), ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := deriveKey(b.Seed, alg, identity(c, b, cert))
	if err != nil {
		return Issued{}, err
	}
	usage := x509.KeyUsageDigitalSignature
	if _, isRSA := key.(*rsa.PrivateKey); isRSA {
		// RSA key exchange in TLS 1.2 encrypts with the key.
		usage |= x509.KeyUsageKeyEncipherment
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: cert.CommonName, Organization: cert.Organization},
		DNSNames:              cert.DNSNames,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              usage,
		ExtKeyUsage:           cert.ExtKeyUsages(),
		BasicConstraintsValid: true,
	}
	for _, ip := range cert.IPs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	if tmpl.SerialNumber, err = deriveSerial(tmpl, key.Public(), ca.Cert); err != nil {
		return Issued{}, err
	}
	// A nil random source makes ECDSA signing deterministic; RSA PKCS #1
	// v1.5 needs none.
	der, err := x509.CreateCertificate(nil, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return Issued{}, err
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return Issued{}, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return Issued{}, err
	}
	return Issued{Cert: cert, X509: parsed, Key: key, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// leafWindow is when a leaf signed by ca is valid. It starts at the epoch
// backdated by the spec's clock skew, as kubeadm backdates by five
// minutes, so that a node whose clock runs a little behind accepts a
// certificate issued just now; but never before the CA's own notBefore,
// which no verifier would accept either. Both ends derive from the bundle
// and the spec alone, so issuance stays deterministic.
func leafWindow(c *ir.Cluster, b *Bundle, ca *x509.Certificate) (notBefore, notAfter time.Time) {
	notBefore = b.Epoch.Add(-c.PKI.ClockSkew)
	if notBefore.Before(ca.NotBefore) {
		notBefore = ca.NotBefore.UTC()
	}
	return notBefore, b.Epoch.Add(c.PKI.LeafValidity)
}

// keyAlgorithm names a public key's algorithm for listings.
func keyAlgorithm(k crypto.PublicKey) string {
	switch key := k.(type) {
	case *ecdsa.PublicKey:
		return "ECDSA-" + strings.ReplaceAll(key.Curve.Params().Name, "-", "")
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA-%d", key.N.BitLen())
	}
	return fmt.Sprintf("%T", k)
}
