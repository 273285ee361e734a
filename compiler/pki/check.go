package pki

import (
	"crypto/x509"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

// Codes of the checks that need the certificate catalogue or the bundle.
const (
	CodeSANCoverage     = "KC1101"
	CodeIdentity        = "KC1102"
	CodeCASeparation    = "KC1103"
	CodeLeafAfterCA     = "KC1104"
	CodeAlgorithmMix    = "KC1105"
	CodeCAExpiring      = "KC1106"
	CodeCAExpired       = "KC1107"
	CodeEpochOutsideCA  = "KC1108"
	CodeLeavesNotYet    = "KC1109"
	CodeBundleMode      = "KC1110"
	CodeBundleMalformed = "KC1111"
)

// Rules lists the PKI checks. KC1110 and KC1111 are raised by the CLI,
// which reads the bundle's file; they are here so that every code of the
// family has one table.
func Rules() []diag.Rule {
	const family = "PKI catalogue and bundle"
	return []diag.Rule{
		{Code: CodeSANCoverage, Severity: diag.Error, Family: family, Summary: "a server certificate does not cover a name or address its clients dial"},
		{Code: CodeIdentity, Severity: diag.Error, Family: family, Summary: "a client certificate's CN/O is not the identity RBAC and the Node authorizer expect"},
		{Code: CodeCASeparation, Severity: diag.Error, Family: family, Summary: "two CAs of the bundle share a key: etcd, the API and the front proxy must be separate"},
		{Code: CodeLeafAfterCA, Severity: diag.Error, Family: family, Summary: "leaf certificates would outlive the CA that signs them"},
		{Code: CodeAlgorithmMix, Severity: diag.Warning, Family: family, Summary: "the bundle's CA keys use another algorithm than pki.keyAlgorithm"},
		{Code: CodeCAExpiring, Severity: diag.Warning, Family: family, Summary: "a CA expires within a year"},
		{Code: CodeCAExpired, Severity: diag.Error, Family: family, Summary: "a CA of the bundle has expired: nothing it signed verifies any more"},
		{Code: CodeEpochOutsideCA, Severity: diag.Error, Family: family, Summary: "the bundle's issuance epoch lies before a CA's notBefore or after its notAfter"},
		{Code: CodeLeavesNotYet, Severity: diag.Warning, Family: family, Summary: "the leaves' notBefore lies in the future: nodes refuse them until then"},
		{Code: CodeBundleMode, Severity: diag.Error, Family: family, Summary: "the secrets bundle's file is readable or writable by group or others"},
		{Code: CodeBundleMalformed, Severity: diag.Error, Family: family, Summary: "the secrets bundle is damaged or not a kcompile secrets bundle"},
	}
}

// Severity is the severity of a code of Rules.
func Severity(code string) diag.Severity {
	for _, r := range Rules() {
		if r.Code == code {
			return r.Severity
		}
	}
	panic("kcompile bug: diagnostic code " + code + " is not in the PKI rule table")
}

// Check holds the cluster's catalogue to its flows and, when a bundle is
// given, the bundle to the spec and to now, the caller's clock.
//
// Diagnostics about the bundle point at its file (b.Source); those about
// a spec value point at the value where the user wrote it, and at the
// bundle's file otherwise: a schema default's position names a file the
// user does not have.
func Check(c *ir.Cluster, b *Bundle, now time.Time) diag.List {
	var out diag.List
	var bundlePos []diag.Pos
	if b != nil && b.Source != "" {
		bundlePos = []diag.Pos{{File: b.Source}}
	}
	report := func(code, path string, ps []diag.Pos, msg, hint string) {
		out.Add(diag.Diagnostic{Code: code, Severity: Severity(code), Path: path, Message: msg, Positions: ps, Hint: hint})
	}
	// specOrBundle places a diagnostic about a spec value that the bundle
	// takes part in.
	specOrBundle := func(path string) []diag.Pos {
		return append(userPositions(c, path), bundlePos...)
	}
	certs := map[string]Cert{}
	for _, cert := range Catalogue(c) {
		certs[cert.ID] = cert
	}
	seen := map[string]bool{}
	for _, f := range Flows(c) {
		if srv, ok := certs[f.Server]; ok && !covers(srv, f.ServerName) {
			key := f.Server + "|" + f.ServerName
			if !seen[key] {
				seen[key] = true
				report(CodeSANCoverage, f.Setting, userPositions(c, f.Setting), fmt.Sprintf("%s certificate %s does not cover %s, which %s dials", srv.Name, f.Server, f.ServerName, f.Kind),
					"give the endpoint a DNS name or address, or add it to controlPlane.apiServer.extraSANs")
			}
		}
		if cl, ok := certs[f.Client]; ok && f.User != "" {
			if cl.CommonName != f.User || !slices.Equal(cl.Organization, f.Groups) {
				key := f.Client + "|identity"
				if !seen[key] {
					seen[key] = true
					report(CodeIdentity, f.Setting, userPositions(c, f.Setting), fmt.Sprintf("%s presents CN=%q O=%q but %s needs user %q in groups %q",
						f.Client, cl.CommonName, cl.Organization, f.Kind, f.User, f.Groups), "this is a kcompile bug; please report it")
				}
			}
		}
	}
	if b == nil {
		return out.Sorted()
	}
	for i, a := range Authorities() {
		for _, o := range Authorities()[i+1:] {
			if publicKeysEqual(b.CAs[a].Cert.PublicKey, b.CAs[o].Cert.PublicKey) {
				report(CodeCASeparation, "pki", bundlePos, fmt.Sprintf("the bundle's %s and %s share one key: a certificate for one could be used against the other", a, o),
					"create separate CAs: `kcompile secrets init` does, and `secrets import-kubeadm` needs a kubeadm PKI with its own etcd and front-proxy CAs")
			}
		}
	}

	// The CAs' lifetimes against now and the epoch. CAs made together
	// share one validity, so each finding names every CA it concerns at
	// once rather than repeating itself per CA.
	expired := groupCAs(b, func(ca *x509.Certificate) bool { return now.After(ca.NotAfter) })
	for _, g := range expired {
		report(CodeCAExpired, "pki", bundlePos, fmt.Sprintf("%s expired on %s (valid from %s), and it is now %s: no certificate %s signed verifies any more",
			g.names(), stamp(g.notAfter), stamp(g.notBefore), stamp(now), g.pronoun()),
			"create new CAs with `kcompile secrets init` (or take renewed ones over with `kcompile secrets import-kubeadm`), then rebuild and redeploy every node: the cluster must trust the new CAs")
	}
	before := groupCAs(b, func(ca *x509.Certificate) bool { return b.Epoch.Before(ca.NotBefore) })
	for _, g := range before {
		report(CodeEpochOutsideCA, "pki", bundlePos, fmt.Sprintf("the issuance epoch %s is before %s %s valid (%s to %s): leaves issued then would predate their issuer",
			stamp(b.Epoch), g.names(), g.verb(), stamp(g.notBefore), stamp(g.notAfter)),
			fmt.Sprintf("move the epoch inside the CAs' validity: `kcompile pki renew --epoch %s` or later", stamp(g.notBefore)))
	}
	after := groupCAs(b, func(ca *x509.Certificate) bool { return b.Epoch.After(ca.NotAfter) })
	for _, g := range after {
		report(CodeEpochOutsideCA, "pki", bundlePos, fmt.Sprintf("the issuance epoch %s is after %s expired (valid %s to %s): leaves issued then would never verify",
			stamp(b.Epoch), g.names(), stamp(g.notBefore), stamp(g.notAfter)),
			"create new CAs with `kcompile secrets init`, or move the epoch back inside the CAs' validity with `kcompile pki renew --epoch ...`")
	}
	for _, a := range Authorities() {
		if ca := b.Signer(a).Cert; !now.After(ca.NotAfter) && ca.NotAfter.Before(now.AddDate(1, 0, 0)) {
			report(CodeCAExpiring, "pki", bundlePos, fmt.Sprintf("%s expires on %s", a, ca.NotAfter.Format(time.DateOnly)),
				"plan the CA rotation now: every certificate of the cluster depends on it; `kcompile secrets rotate --ca "+string(a)+"` replaces it in stages, without downtime")
		}
	}

	// The leaves, with the times Issue gives them.
	var outlived []string
	var firstEnd, leafEnd, latestStart time.Time
	for _, a := range Authorities() {
		ca := b.Signer(a).Cert
		start, end := leafWindow(c, b, ca)
		leafEnd = end
		if start.After(latestStart) {
			latestStart = start
		}
		if end.After(ca.NotAfter) {
			outlived = append(outlived, string(a))
			if firstEnd.IsZero() || ca.NotAfter.Before(firstEnd) {
				firstEnd = ca.NotAfter
			}
		}
	}
	if len(outlived) > 0 {
		report(CodeLeafAfterCA, "pki.leafValidity", specOrBundle("pki.leafValidity"), fmt.Sprintf("leaves issued at %s for %s would be valid until %s, after %s expire(s) on %s",
			b.Epoch.Format(time.DateOnly), days(c.PKI.LeafValidity), leafEnd.Format(time.DateOnly), strings.Join(outlived, ", "), firstEnd.Format(time.DateOnly)),
			"shorten pki.leafValidity, renew at an earlier epoch (`kcompile pki renew --epoch ...`), or rotate the CAs (`kcompile secrets init`) before renewing")
	}
	// A bundle renewed ahead of time is legitimate, but until its leaves
	// start nothing built from it works.
	if len(before) == 0 && now.Before(latestStart) {
		report(CodeLeavesNotYet, "pki", bundlePos, fmt.Sprintf("the leaves are not valid before %s (epoch %s), and it is now %s: nodes refuse them until then",
			stamp(latestStart), stamp(b.Epoch), stamp(now)),
			"deploy them after that time, or renew at the current time with `kcompile pki renew` (the epoch defaults to now); check the clock and SOURCE_DATE_EPOCH")
	}
	for _, a := range Authorities() {
		if got := keyAlgorithm(b.CAs[a].Cert.PublicKey); got != c.PKI.KeyAlgorithm {
			report(CodeAlgorithmMix, "pki.keyAlgorithm", specOrBundle("pki.keyAlgorithm"), fmt.Sprintf("the bundle's %s has a %s key but the spec asks for %s keys", a, got, c.PKI.KeyAlgorithm),
				"leaves are issued as the spec asks and signed by the CA as it is; create the bundle with --key-algorithm "+c.PKI.KeyAlgorithm+" for one algorithm throughout")
			break
		}
	}
	return out.Sorted()
}

// caGroup is CAs of the bundle with one validity.
type caGroup struct {
	cas                 []Authority
	notBefore, notAfter time.Time
}

func (g caGroup) names() string {
	s := make([]string, len(g.cas))
	for i, a := range g.cas {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}

func (g caGroup) verb() string {
	if len(g.cas) == 1 {
		return "is"
	}
	return "are"
}

func (g caGroup) pronoun() string {
	if len(g.cas) == 1 {
		return "it"
	}
	return "they"
}

// groupCAs groups the CAs that sign leaves (the old ones while a
// rotation is at its first stage) for which match holds by validity, in
// catalogue order.
func groupCAs(b *Bundle, match func(*x509.Certificate) bool) []caGroup {
	var out []caGroup
next:
	for _, a := range Authorities() {
		ca := b.Signer(a).Cert
		if !match(ca) {
			continue
		}
		for i := range out {
			if out[i].notBefore.Equal(ca.NotBefore) && out[i].notAfter.Equal(ca.NotAfter) {
				out[i].cas = append(out[i].cas, a)
				continue next
			}
		}
		out = append(out, caGroup{cas: []Authority{a}, notBefore: ca.NotBefore, notAfter: ca.NotAfter})
	}
	return out
}

// stamp renders an instant for messages.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// days renders a validity as the spec writes it.
func days(d time.Duration) string {
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// covers reports whether a catalogue entry's SANs include host, the way
// crypto/x509 verifies a server name.
func covers(c Cert, host string) bool {
	if ip, err := netip.ParseAddr(host); err == nil {
		return slices.Contains(c.IPs, ip)
	}
	tmpl := &x509.Certificate{DNSNames: c.DNSNames}
	return tmpl.VerifyHostname(host) == nil
}

// userPositions finds where the user wrote path, or the setting it was
// derived from: never a schema default's position, which names a file of
// kcompile's and not the user's.
func userPositions(c *ir.Cluster, path string) []diag.Pos {
	for _, s := range c.Settings {
		if s.Path != path && !strings.HasPrefix(s.Path, path+".") {
			continue
		}
		if s.Origin.Kind == ir.FromDefault || s.Origin.Pos.File == "" {
			continue
		}
		p := s.Origin.Pos
		return []diag.Pos{{File: p.File, Line: p.Line, Column: p.Column}}
	}
	return nil
}

// RenewFor renews the bundle for a cluster: a copy with the new epoch
// (Renew), and what Check says of it with the caller's clock, so that an
// epoch outside a CA's validity, or leaves that would outlive a CA
// (KC1108, KC1104), are reported before anything is written. With an
// error among the diagnostics the copy is not to be kept.
func (b *Bundle) RenewFor(c *ir.Cluster, epoch, now time.Time) (*Bundle, diag.List) {
	renewed := b.Renew(epoch)
	return renewed, Check(c, renewed, now)
}
