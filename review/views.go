package review

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/layout"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kind is how a file is shown in a diff.
type Kind string

const (
	// KindText files are shown as a unified diff.
	KindText Kind = "text"
	// KindUnit files (systemd units) are shown by directive, and as a
	// unified diff.
	KindUnit Kind = "unit"
	// KindCertificate files are shown by field: subject, issuer, SANs,
	// validity, algorithm, usages, whether the key changed.
	KindCertificate Kind = "certificate"
	// KindKubeconfig files are shown by cluster, user and context, their
	// credentials as certificate fields and hashes.
	KindKubeconfig Kind = "kubeconfig"
	// KindSecret files (private keys, encryption configurations) are
	// shown as a content hash.
	KindSecret Kind = "secret"
	// KindUserData files (cloud-init user-data) are shown as the files
	// they write, each in its own kind, and the rest of the config.
	KindUserData Kind = "user-data"
	// KindIgnition files (Ignition configs) are shown as the files they
	// write, each in its own kind, and the rest of the config.
	KindIgnition Kind = "ignition"
	// KindBinary files are shown as a content hash.
	KindBinary Kind = "binary"
)

// classify says how a file is shown. A file is a secret when either side
// is: what the secrets bundle puts in a tree, a private key (at a path
// where the PKI catalogue puts keys, whatever it holds, or anywhere its
// PEM says so) or an encryption configuration; kinds that carry secrets
// themselves (kubeconfigs, user-data, Ignition configs) redact them in
// their own views. A file's mode says nothing: a NetworkManager keyfile
// or a unit is owner-only because its reader or the CIS benchmark asks
// it, and a reviewer must see it.
func classify(path string, data []byte) Kind {
	switch {
	case keyPath(path):
		return KindSecret
	case isUserData(data):
		return KindUserData
	case isIgnition(path, data):
		return KindIgnition
	case isKubeconfig(data):
		return KindKubeconfig
	case bytes.Contains(data, []byte("PRIVATE KEY-----")), bytes.Contains(data, []byte("kind: EncryptionConfiguration")):
		return KindSecret
	case bytes.HasPrefix(data, []byte("-----BEGIN CERTIFICATE-----")):
		return KindCertificate
	case !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0:
		return KindBinary
	case strings.HasSuffix(path, ".service") || strings.HasSuffix(path, ".socket") ||
		strings.HasSuffix(path, ".timer") || strings.HasSuffix(path, ".mount") ||
		(strings.Contains(path, "/systemd/system/") && strings.HasSuffix(path, ".conf")):
		return KindUnit
	}
	return KindText
}

// keyPath says whether a tree path is one where the PKI catalogue puts a
// private key: a ".key" file in a node's PKI directories (kubeadm's, the
// kubelet's), in a tree (under any target's directory) or on a node (a
// path a node config writes).
func keyPath(p string) bool {
	rel := p
	if _, r := splitNode(p); r != "" {
		rel = r
	}
	rel = strings.TrimPrefix(rel, "/")
	if !strings.HasSuffix(rel, ".key") {
		return false
	}
	for _, dir := range []string{layout.PKIDir, path.Dir(layout.KubeletServingStem) + "/"} {
		if strings.HasPrefix(rel, dir) {
			return true
		}
	}
	return false
}

func isKubeconfig(data []byte) bool {
	return bytes.Contains(data, []byte("kind: Config")) && bytes.Contains(data, []byte("clusters:"))
}

func isUserData(data []byte) bool { return bytes.HasPrefix(data, []byte("#cloud-config\n")) }

// isIgnition: a JSON object with an ignition.version, as every Ignition
// config has.
func isIgnition(path string, data []byte) bool {
	if !strings.HasSuffix(path, ".ign") || !bytes.HasPrefix(data, []byte("{")) {
		return false
	}
	var head struct {
		Ignition struct {
			Version string `json:"version"`
		} `json:"ignition"`
	}
	return json.Unmarshal(data, &head) == nil && head.Ignition.Version != ""
}

// Hash names content without revealing it: a short sha256, as the
// review shows secrets and as the diff names CAs by.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:6])
}

// change writes "old → new", or the one side that exists.
func change(old, new string) string {
	switch {
	case old == "":
		return new
	case new == "":
		return old + " → (none)"
	}
	return old + " → " + new
}

// notCompared replaces what a comparison with throwaway keys cannot say.
const notCompared = "not compared (no --secrets)"

// secretLines describes a secret file: its kind of key, never its bytes;
// with throwaway keys not even their hash, which would name a key no
// cluster has.
func (v viewer) secretLines(old, new []byte) []string {
	if v.throwaway {
		kind := func(b []byte) string {
			if b == nil {
				return ""
			}
			if what := keyKind(b); what != "" {
				return what
			}
			return "secret"
		}
		what := kind(old)
		if ka, kb := kind(old), kind(new); ka == "" || kb == "" {
			what = ka + kb
		} else if ka != kb {
			what = ka + " → " + kb
		}
		return []string{"content: " + what + ", " + notCompared}
	}
	desc := func(b []byte) string {
		if b == nil {
			return ""
		}
		if what := keyKind(b); what != "" {
			return what + " " + Hash(b)
		}
		return Hash(b)
	}
	return []string{"content: " + change(desc(old), desc(new)) + " (secret, not shown)"}
}

// keyKind names the algorithm of a PEM private key, or "".
func keyKind(b []byte) string {
	block, _ := pem.Decode(b)
	if block == nil || !strings.Contains(block.Type, "PRIVATE KEY") {
		return ""
	}
	var k any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return "private key"
	}
	switch k := k.(type) {
	case *rsa.PrivateKey:
		return fmt.Sprintf("RSA-%d private key", k.N.BitLen())
	case *ecdsa.PrivateKey:
		return "ECDSA-" + strings.ReplaceAll(k.Curve.Params().Name, "-", "") + " private key"
	case ed25519.PrivateKey:
		return "Ed25519 private key"
	}
	return "private key"
}

// parseCert reads the first certificate of a PEM file.
func parseCert(b []byte) *x509.Certificate {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil
	}
	return c
}

func certAlgorithm(c *x509.Certificate) string {
	switch k := c.PublicKey.(type) {
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA-%d", k.N.BitLen())
	case *ecdsa.PublicKey:
		return "ECDSA-" + strings.ReplaceAll(k.Curve.Params().Name, "-", "")
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return c.PublicKeyAlgorithm.String()
}

func certSANs(c *x509.Certificate) []string {
	var out []string
	for _, d := range c.DNSNames {
		out = append(out, "DNS:"+d)
	}
	for _, ip := range c.IPAddresses {
		out = append(out, "IP:"+ip.String())
	}
	for _, u := range c.URIs {
		out = append(out, "URI:"+u.String())
	}
	return out
}

func certUsages(c *x509.Certificate) []string {
	var out []string
	for _, u := range []struct {
		bit  x509.KeyUsage
		name string
	}{{x509.KeyUsageDigitalSignature, "digitalSignature"}, {x509.KeyUsageKeyEncipherment, "keyEncipherment"},
		{x509.KeyUsageCertSign, "certSign"}, {x509.KeyUsageCRLSign, "crlSign"}} {
		if c.KeyUsage&u.bit != 0 {
			out = append(out, u.name)
		}
	}
	for _, u := range c.ExtKeyUsage {
		switch u {
		case x509.ExtKeyUsageServerAuth:
			out = append(out, "serverAuth")
		case x509.ExtKeyUsageClientAuth:
			out = append(out, "clientAuth")
		default:
			out = append(out, fmt.Sprintf("extKeyUsage(%d)", u))
		}
	}
	return out
}

// certLines describes how a certificate changed, field by field; for an
// added or removed one, what it is. With throwaway keys it is compared by
// identity: subject, issuer, SANs, usages, algorithm and how long it is
// valid, never its key, serial, signature or dates.
func (v viewer) certLines(old, new []byte) []string {
	a, b := parseCert(old), parseCert(new)
	switch {
	case a == nil && b == nil:
		if old == nil || new == nil {
			return []string{"content: " + change(hashOrEmpty(old), hashOrEmpty(new)) + " (not a parseable certificate)"}
		}
		return []string{"content: " + Hash(old) + " → " + Hash(new) + " (not a parseable certificate)"}
	case a == nil || b == nil:
		c := a
		if c == nil {
			c = b
		}
		return []string{
			"subject: " + c.Subject.String(),
			"issuer: " + c.Issuer.String(),
			"SANs: " + orNone(strings.Join(certSANs(c), ", ")),
			"validity: " + v.validity(c),
			"algorithm: " + certAlgorithm(c),
			"usages: " + strings.Join(certUsages(c), ", "),
		}
	}
	var out []string
	if a.Subject.String() != b.Subject.String() {
		out = append(out, "subject: "+change(a.Subject.String(), b.Subject.String()))
	}
	if a.Issuer.String() != b.Issuer.String() {
		out = append(out, "issuer: "+change(a.Issuer.String(), b.Issuer.String()))
	}
	added, removed := setDiff(certSANs(a), certSANs(b))
	for _, s := range added {
		out = append(out, "SAN added: "+s)
	}
	for _, s := range removed {
		out = append(out, "SAN removed: "+s)
	}
	if v.validity(a) != v.validity(b) {
		out = append(out, "validity: "+change(v.validity(a), v.validity(b)))
	}
	if certAlgorithm(a) != certAlgorithm(b) {
		out = append(out, "algorithm: "+change(certAlgorithm(a), certAlgorithm(b)))
	}
	if ua, ub := strings.Join(certUsages(a), ", "), strings.Join(certUsages(b), ", "); ua != ub {
		out = append(out, "usages: "+change(ua, ub))
	}
	if a.IsCA != b.IsCA {
		out = append(out, fmt.Sprintf("CA: %v → %v", a.IsCA, b.IsCA))
	}
	if v.throwaway {
		if len(out) == 0 {
			out = append(out, "identity unchanged (subject, issuer, SANs, usages, validity length); key, serial and signature "+notCompared)
		}
		return out
	}
	if bytes.Equal(a.RawSubjectPublicKeyInfo, b.RawSubjectPublicKeyInfo) {
		out = append(out, "key: same key")
	} else {
		out = append(out, "key: re-keyed")
	}
	if a.SerialNumber.Cmp(b.SerialNumber) != 0 {
		out = append(out, "serial: "+change(a.SerialNumber.Text(16), b.SerialNumber.Text(16)))
	}
	if !bytes.Equal(a.Raw, b.Raw) && len(out) == 1 {
		// Only the key line: the signature or an extension differs.
		out = append(out, "content: "+Hash(a.Raw)+" → "+Hash(b.Raw))
	}
	return out
}

func hashOrEmpty(b []byte) string {
	if b == nil {
		return ""
	}
	return Hash(b)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// validity is a certificate's window; with throwaway keys its length
// only, as the dates come from the throwaway bundle's epoch.
func (v viewer) validity(c *x509.Certificate) string {
	if v.throwaway {
		d := c.NotAfter.Sub(c.NotBefore)
		if d%(24*time.Hour) == 0 {
			return fmt.Sprintf("%d days", d/(24*time.Hour))
		}
		return d.String()
	}
	return c.NotBefore.UTC().Format(time.RFC3339) + " to " + c.NotAfter.UTC().Format(time.RFC3339)
}

// setDiff is what b has that a lacks, and what a has that b lacks.
func setDiff(a, b []string) (added, removed []string) {
	for _, x := range b {
		if !slices.Contains(a, x) {
			added = append(added, x)
		}
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			removed = append(removed, x)
		}
	}
	return added, removed
}

// kubeconfigLines describes a kubeconfig by cluster, user and context.
// Credentials are described as certificates and hashes.
func (v viewer) kubeconfigLines(old, new []byte) []string {
	load := func(b []byte) (*clientcmdapi.Config, error) {
		if b == nil {
			return clientcmdapi.NewConfig(), nil
		}
		return pki.LoadKubeconfig(b)
	}
	a, errA := load(old)
	b, errB := load(new)
	if errA != nil || errB != nil {
		if v.throwaway {
			return []string{"content: " + notCompared + " (not a loadable kubeconfig)"}
		}
		return []string{"content: " + change(hashOrEmpty(old), hashOrEmpty(new)) + " (not a loadable kubeconfig; secret, not shown)"}
	}
	var out []string
	for _, name := range unionKeys(a.Clusters, b.Clusters) {
		ca, cb := a.Clusters[name], b.Clusters[name]
		p := "cluster " + name + ": "
		switch {
		case ca == nil:
			out = append(out, p+"added, server "+cb.Server+", CA "+v.certRef(cb.CertificateAuthorityData, cb.CertificateAuthority))
			continue
		case cb == nil:
			out = append(out, p+"removed")
			continue
		}
		if ca.Server != cb.Server {
			out = append(out, p+"server "+change(ca.Server, cb.Server))
		}
		if r1, r2 := v.certRef(ca.CertificateAuthorityData, ca.CertificateAuthority), v.certRef(cb.CertificateAuthorityData, cb.CertificateAuthority); r1 != r2 {
			out = append(out, p+"CA "+change(r1, r2))
		}
		if ca.TLSServerName != cb.TLSServerName {
			out = append(out, p+"TLS server name "+change(ca.TLSServerName, cb.TLSServerName))
		}
	}
	for _, name := range unionKeys(a.AuthInfos, b.AuthInfos) {
		ua, ub := a.AuthInfos[name], b.AuthInfos[name]
		p := "user " + name + ": "
		switch {
		case ua == nil:
			out = append(out, p+"added, client certificate "+v.certRef(ub.ClientCertificateData, ub.ClientCertificate))
			continue
		case ub == nil:
			out = append(out, p+"removed")
			continue
		}
		if !bytes.Equal(ua.ClientCertificateData, ub.ClientCertificateData) || ua.ClientCertificate != ub.ClientCertificate {
			if ua.ClientCertificateData != nil && ub.ClientCertificateData != nil {
				for _, l := range v.certLines(ua.ClientCertificateData, ub.ClientCertificateData) {
					out = append(out, p+"client certificate "+l)
				}
			} else {
				out = append(out, p+"client certificate "+change(v.certRef(ua.ClientCertificateData, ua.ClientCertificate), v.certRef(ub.ClientCertificateData, ub.ClientCertificate)))
			}
		}
		if !bytes.Equal(ua.ClientKeyData, ub.ClientKeyData) || ua.ClientKey != ub.ClientKey {
			out = append(out, p+"client key "+v.secretChange(ua.ClientKeyData, ua.ClientKey, ub.ClientKeyData, ub.ClientKey))
		}
		if ua.Token != ub.Token || ua.TokenFile != ub.TokenFile {
			out = append(out, p+"token "+v.secretChange([]byte(ua.Token), ua.TokenFile, []byte(ub.Token), ub.TokenFile))
		}
	}
	for _, name := range unionKeys(a.Contexts, b.Contexts) {
		ca, cb := a.Contexts[name], b.Contexts[name]
		desc := func(c *clientcmdapi.Context) string {
			if c == nil {
				return ""
			}
			s := "cluster " + c.Cluster + ", user " + c.AuthInfo
			if c.Namespace != "" {
				s += ", namespace " + c.Namespace
			}
			return s
		}
		if d1, d2 := desc(ca), desc(cb); d1 != d2 {
			out = append(out, "context "+name+": "+change(d1, d2))
		}
	}
	if a.CurrentContext != b.CurrentContext {
		out = append(out, "current context: "+change(a.CurrentContext, b.CurrentContext))
	}
	if len(out) == 0 {
		if v.throwaway {
			return []string{"no change by cluster, user or context; key material " + notCompared}
		}
		out = append(out, "content: "+change(hashOrEmpty(old), hashOrEmpty(new))+" (no change by cluster, user or context)")
	}
	return out
}

// certRef names an embedded certificate by subject and fingerprint, or a
// referenced file by path.
func (v viewer) certRef(data []byte, file string) string {
	if file != "" {
		return file
	}
	if c := parseCert(data); c != nil {
		if v.throwaway {
			return fmt.Sprintf("%q", c.Subject.String())
		}
		return fmt.Sprintf("%q %s", c.Subject.String(), Hash(c.Raw))
	}
	if len(data) == 0 {
		return "(none)"
	}
	return Hash(data)
}

// secretChange describes a changed credential of a kubeconfig user: the
// files it names, or hashes of what it embeds.
func (v viewer) secretChange(dataA []byte, fileA string, dataB []byte, fileB string) string {
	if v.throwaway && (len(dataA) > 0 || len(dataB) > 0) {
		return notCompared
	}
	return change(v.secretRef(dataA, fileA), v.secretRef(dataB, fileB)) + " (secret, not shown)"
}

func (v viewer) secretRef(data []byte, file string) string {
	if file != "" {
		return file
	}
	if len(data) == 0 {
		return "(none)"
	}
	return Hash(data)
}

func unionKeys[V any](a, b map[string]V) []string {
	var out []string
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
