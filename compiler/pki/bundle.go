// Package pki holds the secrets bundle, the certificate catalogue of a
// cluster (after kubeadm's certlist), deterministic issuance, kubeconfigs,
// the TLS flows the certificates serve, and verification of written trees.
//
// Issuance is a pure function of an ir.Cluster and a Bundle: the bundle
// carries every secret and the issuance epoch; nothing here reads the clock
// or a random source.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
)

// Authority names a certificate authority of the cluster.
type Authority string

const (
	// ClusterCA signs the API server, kubelets and every client of the API.
	ClusterCA Authority = "ca"
	// EtcdCA signs etcd's server, peer and client certificates, so that
	// nothing signed for the API can talk to etcd.
	EtcdCA Authority = "etcd-ca"
	// FrontProxyCA signs the API server's client certificate for
	// aggregated API servers.
	FrontProxyCA Authority = "front-proxy-ca"
)

// Authorities lists the CAs in catalogue order.
func Authorities() []Authority { return []Authority{ClusterCA, EtcdCA, FrontProxyCA} }

// commonName is the CA's subject, as kubeadm names them.
func (a Authority) commonName() string {
	switch a {
	case EtcdCA:
		return "etcd-ca"
	case FrontProxyCA:
		return "front-proxy-ca"
	}
	return "kubernetes"
}

// CA is a certificate authority: its certificate and signing key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// Bundle is every secret of a cluster. It is the only input of issuance
// besides the spec, and is written to disk 0600 by the CLI.
type Bundle struct {
	// Epoch is when every leaf is issued: its notBefore, backdated by the
	// spec's pki.clockSkew but never before its CA's. `pki renew` moves
	// it, which re-keys and re-issues every leaf.
	Epoch time.Time
	// Seed is what leaf keys are derived from.
	Seed []byte
	CAs  map[Authority]CA
	// ServiceAccountKey signs service-account tokens.
	ServiceAccountKey crypto.Signer
	// EncryptionKey is the 32-byte key for encryption of Secrets at rest.
	EncryptionKey []byte
	// BootstrapToken is a kubeadm-style token "abcdef.0123456789abcdef".
	BootstrapToken string
	// Rotation is the replacement of CAs under way, nil when none is.
	Rotation *Rotation
	// Source is the file the bundle was read from, where diagnostics
	// about it point; empty for a bundle made in memory. It is not part
	// of the bundle's contents.
	Source string
}

// Format keeps secrets out of logs and error messages whatever the verb.
// Its receiver is a value so that a Bundle printed by value, or as a field
// of another value, is redacted too; fmt prints a nil *Bundle as "<nil>".
func (b Bundle) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "pki.Bundle{epoch %s, secrets redacted}", b.Epoch.UTC().Format(time.RFC3339))
}

// NewOptions are the choices made when a bundle is created.
type NewOptions struct {
	// Algorithm of the CA and service-account keys.
	Algorithm Algorithm
	// CAValidity is how long the CAs are valid from now: positive and at
	// most MaxCAValidity.
	CAValidity time.Duration
	// ClockSkew backdates the CAs' notBefore, as the spec's pki.clockSkew
	// backdates leaves (which never start before their CA): a node whose
	// clock runs a little behind the machine that made the bundle must
	// still accept a fresh tree. At most ir.MaxClockSkew.
	ClockSkew time.Duration
}

// MaxCAValidity bounds the validity of the CAs New creates, as the spec's
// pki.caValidity is bounded: a time.Duration holds only about 292 years,
// and longer values wrap around into the past.
const MaxCAValidity = 200 * 365 * 24 * time.Hour

// New creates a bundle. random supplies the 32-byte seed every secret is
// derived from; now is the first epoch, and the CAs' notBefore less
// opts.ClockSkew. Both come from the caller so that tests are
// reproducible.
func New(random io.Reader, now time.Time, opts NewOptions) (*Bundle, error) {
	if opts.CAValidity <= 0 || opts.CAValidity > MaxCAValidity {
		return nil, fmt.Errorf("a CA validity of %s is not between 1 second and 200 years", opts.CAValidity)
	}
	if opts.ClockSkew < 0 || opts.ClockSkew > ir.MaxClockSkew {
		return nil, fmt.Errorf("a clock skew of %s is not between 0 and 24 hours", opts.ClockSkew)
	}
	seed := make([]byte, 32)
	if _, err := io.ReadFull(random, seed); err != nil {
		return nil, fmt.Errorf("reading the random seed: %w", err)
	}
	now = now.UTC().Truncate(time.Second)
	b := &Bundle{Epoch: now, Seed: seed, CAs: map[Authority]CA{}}
	for _, a := range Authorities() {
		ca, err := newCA(seed, a, opts.Algorithm, now, opts.CAValidity, opts.ClockSkew)
		if err != nil {
			return nil, err
		}
		b.CAs[a] = ca
	}
	var err error
	if b.ServiceAccountKey, err = deriveKey(seed, opts.Algorithm, "service-account"); err != nil {
		return nil, err
	}
	if b.EncryptionKey, err = deriveBytes(seed, "encryption-at-rest", 32); err != nil {
		return nil, err
	}
	raw, err := deriveBytes(seed, "bootstrap-token", 22)
	if err != nil {
		return nil, err
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	token := make([]byte, 23)
	for i, j := 0, 0; i < 23; i++ {
		if i == 6 {
			token[i] = '.'
			continue
		}
		token[i] = alphabet[int(raw[j])%len(alphabet)]
		j++
	}
	b.BootstrapToken = string(token)
	return b, nil
}

// newCA creates a self-signed CA valid from now.
func newCA(seed []byte, a Authority, alg Algorithm, now time.Time, validity, skew time.Duration) (CA, error) {
	key, err := deriveKey(seed, alg, "ca/"+string(a))
	if err != nil {
		return CA{}, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: a.commonName()},
		NotBefore:             now.Add(-skew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if tmpl.SerialNumber, err = deriveSerial(tmpl, key.Public(), nil); err != nil {
		return CA{}, err
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return CA{}, fmt.Errorf("creating %s: %w", a, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return CA{}, err
	}
	return CA{Cert: cert, Key: key}, nil
}

// Renew returns a copy of the bundle with a new epoch: every leaf is
// re-keyed and re-issued; CAs and other secrets are untouched.
func (b *Bundle) Renew(epoch time.Time) *Bundle {
	c := *b
	c.Epoch = epoch.UTC().Truncate(time.Second)
	c.CAs = maps.Clone(b.CAs)
	return &c
}

// bundleFile is the on-disk form of a bundle.
type bundleFile struct {
	APIVersion        string               `json:"apiVersion"`
	Kind              string               `json:"kind"`
	Epoch             time.Time            `json:"epoch"`
	Seed              []byte               `json:"seed"`
	Authorities       map[Authority]caFile `json:"authorities"`
	ServiceAccountKey string               `json:"serviceAccountKey"`
	EncryptionKey     []byte               `json:"encryptionKey"`
	BootstrapToken    string               `json:"bootstrapToken"`
	Rotation          *rotationFile        `json:"rotation,omitempty"`
}

type caFile struct {
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

const (
	bundleAPIVersion = "kcompile.dev/v1alpha1"
	bundleKind       = "SecretsBundle"
)

// Marshal encodes the bundle as JSON with PEM blocks.
func (b *Bundle) Marshal() ([]byte, error) {
	f := bundleFile{APIVersion: bundleAPIVersion, Kind: bundleKind, Epoch: b.Epoch.UTC(), Seed: b.Seed,
		Authorities: map[Authority]caFile{}, EncryptionKey: b.EncryptionKey, BootstrapToken: b.BootstrapToken}
	for a, ca := range b.CAs {
		key, err := encodeKey(ca.Key)
		if err != nil {
			return nil, err
		}
		f.Authorities[a] = caFile{Cert: string(encodeCert(ca.Cert.Raw)), Key: string(key)}
	}
	sa, err := encodeKey(b.ServiceAccountKey)
	if err != nil {
		return nil, err
	}
	f.ServiceAccountKey = string(sa)
	if b.Rotation != nil {
		if f.Rotation, err = b.Rotation.file(); err != nil {
			return nil, err
		}
	}
	out, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// Parse decodes and checks a bundle written by Marshal. Errors never
// quote key material.
func Parse(data []byte) (*Bundle, error) {
	var f bundleFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a kcompile secrets bundle: %v", redactJSONError(err, data))
	}
	// One object and nothing after it: trailing bytes mean two files run
	// together or a damaged one.
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("not a kcompile secrets bundle: data follows the JSON object")
	}
	if f.APIVersion != bundleAPIVersion || f.Kind != bundleKind {
		return nil, fmt.Errorf("not a kcompile secrets bundle (apiVersion %q, kind %q)", f.APIVersion, f.Kind)
	}
	if len(f.Seed) < 32 {
		return nil, errors.New("secrets bundle: seed must be at least 32 bytes")
	}
	if len(f.EncryptionKey) != 32 {
		return nil, errors.New("secrets bundle: encryptionKey must be 32 bytes")
	}
	if f.Epoch.IsZero() {
		return nil, errors.New("secrets bundle: epoch is not set")
	}
	if !bootstrapToken.MatchString(f.BootstrapToken) {
		return nil, errors.New("secrets bundle: bootstrapToken is not of the form [a-z0-9]{6}.[a-z0-9]{16}")
	}
	b := &Bundle{Epoch: f.Epoch.UTC(), Seed: f.Seed, CAs: map[Authority]CA{}, EncryptionKey: f.EncryptionKey, BootstrapToken: f.BootstrapToken}
	// An authority of another name is a typo of one of ours, or a bundle
	// of another tool: either way not something to drop silently.
	for a := range f.Authorities {
		if !slices.Contains(Authorities(), a) {
			return nil, fmt.Errorf("secrets bundle: unknown authority %s (a bundle has ca, etcd-ca and front-proxy-ca)", fieldName(string(a)))
		}
	}
	for _, a := range Authorities() {
		cf, ok := f.Authorities[a]
		if !ok {
			return nil, fmt.Errorf("secrets bundle: authority %s is missing", a)
		}
		ca, err := parseCA(a, []byte(cf.Cert), []byte(cf.Key))
		if err != nil {
			return nil, err
		}
		b.CAs[a] = ca
	}
	sa, err := parseKey([]byte(f.ServiceAccountKey))
	if err != nil {
		return nil, fmt.Errorf("secrets bundle: serviceAccountKey: %w", err)
	}
	b.ServiceAccountKey = sa
	if f.Rotation != nil {
		if b.Rotation, err = parseRotation(f.Rotation, b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// parseCA checks that a CA certificate and key belong together.
func parseCA(a Authority, certPEM, keyPEM []byte) (CA, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return CA{}, fmt.Errorf("%s: certificate is not PEM", a)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return CA{}, fmt.Errorf("%s: %w", a, err)
	}
	if !cert.IsCA {
		return CA{}, fmt.Errorf("%s: certificate %q is not a CA", a, cert.Subject.CommonName)
	}
	// A self-signed CA (every CA New creates, and kubeadm's) carries its
	// own signature: a damaged certificate fails it. A CA signed by
	// another names that CA's key in its authority key ID (RFC 5280
	// 4.2.1.1); anything else claims to be self-signed.
	if bytes.Equal(cert.RawIssuer, cert.RawSubject) || len(cert.AuthorityKeyId) == 0 || bytes.Equal(cert.AuthorityKeyId, cert.SubjectKeyId) {
		if err := cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature); err != nil {
			return CA{}, fmt.Errorf("%s: the certificate's self-signature does not verify: it is damaged", a)
		}
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return CA{}, fmt.Errorf("%s: key: %w", a, err)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return CA{}, fmt.Errorf("%s: the key does not belong to the certificate", a)
	}
	return CA{Cert: cert, Key: key}, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// encodeCert PEM-encodes a DER certificate.
func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// encodeKey PEM-encodes a private key in the form its consumers expect:
// SEC 1 for ECDSA and PKCS #1 for RSA, as kubeadm writes them.
func encodeKey(k crypto.Signer) ([]byte, error) {
	switch key := k.(type) {
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
	case *rsa.PrivateKey:
		return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), nil
	}
	return nil, fmt.Errorf("unsupported key type %T", k)
}

// encodePublicKey PEM-encodes a public key (sa.pub).
func encodePublicKey(k crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// parseKey reads a PEM private key in SEC 1, PKCS #1 or PKCS #8 form.
func parseKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("not PEM")
	}
	switch block.Type {
	case "EC PRIVATE KEY":
		k, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		// crypto/x509 ignores the public key SEC 1 stores beside the
		// private scalar; a damaged scalar would go unnoticed and yield
		// another key. Hold the two to each other.
		var sec1 struct {
			Version    int
			PrivateKey []byte
			Curve      asn1.ObjectIdentifier `asn1:"optional,explicit,tag:0"`
			PublicKey  asn1.BitString        `asn1:"optional,explicit,tag:1"`
		}
		if _, err := asn1.Unmarshal(block.Bytes, &sec1); err != nil {
			return nil, errors.New("malformed EC private key")
		}
		if len(sec1.PublicKey.Bytes) > 0 {
			pub, err := k.PublicKey.Bytes()
			if err != nil || !bytes.Equal(pub, sec1.PublicKey.Bytes) {
				return nil, errors.New("the EC private key does not match the public key stored with it: it is damaged")
			}
		}
		return k, nil
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported key type %T", k)
		}
		return s, nil
	}
	return nil, fmt.Errorf("unsupported PEM block %q", block.Type)
}

// redactJSONError keeps only the shape of a JSON error: a syntax error's
// offset, a type error's field, or the name of an unknown field (names
// are the bundle's structure, not its secrets), never the offending
// value.
func redactJSONError(err error, data []byte) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("JSON syntax error at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %s has the wrong type", typ.Field)
	}
	// encoding/json reports an unknown field by name only, in an error
	// of no type of its own; find where it is in the bundle.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if path := unknownField(data); path != "" {
			return "unknown field " + path
		}
		if u, err := strconv.Unquote(name); err == nil {
			name = u
		}
		return "unknown field " + fieldName(name)
	}
	return "malformed JSON"
}

// unknownField is the path of the first field of data that a bundle does
// not have, e.g. "comment" or "authorities.ca.comment"; "" when there is
// none or data is not a JSON object.
func unknownField(data []byte) string {
	known := func(v any) map[string]bool {
		m := map[string]bool{}
		t := reflect.TypeOf(v)
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			m[name] = true
		}
		return m
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return ""
	}
	topKnown, caKnown := known(bundleFile{}), known(caFile{})
	for _, k := range slices.Sorted(maps.Keys(top)) {
		if !topKnown[k] {
			return fieldName(k)
		}
	}
	var auths map[string]map[string]json.RawMessage
	if json.Unmarshal(top["authorities"], &auths) != nil {
		return ""
	}
	for _, a := range slices.Sorted(maps.Keys(auths)) {
		for _, k := range slices.Sorted(maps.Keys(auths[a])) {
			if !caKnown[k] {
				return "authorities." + fieldName(a) + "." + fieldName(k)
			}
		}
	}
	return ""
}

// fieldName renders a field name read from a bundle for a message: quoted
// when it is not a plain identifier, and cut short, so that a "name" that
// is really a pasted key does not end up whole in a log.
func fieldName(s string) string {
	const max = 32
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "..."
	}
	if plainName.MatchString(s) {
		return s
	}
	return strconv.Quote(s)
}

var plainName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)

// bootstrapToken is the form kubeadm and the API server accept.
var bootstrapToken = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)

// KubeadmFiles are the PEM files of a kubeadm PKI directory that a bundle
// takes over.
type KubeadmFiles struct {
	CACert, CAKey                     []byte
	EtcdCACert, EtcdCAKey             []byte
	FrontProxyCACert, FrontProxyCAKey []byte
	ServiceAccountKey                 []byte
}

// Import builds a bundle around an existing kubeadm PKI: its CAs and
// service-account key are kept, so running clusters keep trusting what is
// issued; the seed, encryption key and token are new, from random.
func Import(random io.Reader, now time.Time, f KubeadmFiles) (*Bundle, error) {
	b, err := New(random, now, NewOptions{Algorithm: ECDSAP256, CAValidity: time.Hour})
	if err != nil {
		return nil, err
	}
	for _, x := range []struct {
		a         Authority
		cert, key []byte
	}{{ClusterCA, f.CACert, f.CAKey}, {EtcdCA, f.EtcdCACert, f.EtcdCAKey}, {FrontProxyCA, f.FrontProxyCACert, f.FrontProxyCAKey}} {
		ca, err := parseCA(x.a, x.cert, x.key)
		if err != nil {
			return nil, err
		}
		b.CAs[x.a] = ca
	}
	sa, err := parseKey(f.ServiceAccountKey)
	if err != nil {
		return nil, fmt.Errorf("sa.key: %w", err)
	}
	b.ServiceAccountKey = sa
	return b, nil
}
