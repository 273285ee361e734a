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
	CodeSANCoverage  = "KC1101"
	CodeIdentity     = "KC1102"
	CodeCASeparation = "KC1103"
	CodeLeafAfterCA  = "KC1104"
	CodeAlgorithmMix = "KC1105"
	CodeCAExpiring   = "KC1106"
)

// Rule describes one PKI check, for the README's table.
type Rule struct {
	Code     string
	Severity diag.Severity
	Summary  string
}

// Rules lists the PKI checks.
func Rules() []Rule {
	return []Rule{
		{CodeSANCoverage, diag.Error, "a server certificate does not cover a name or address its clients dial"},
		{CodeIdentity, diag.Error, "a client certificate's CN/O is not the identity RBAC and the Node authorizer expect"},
		{CodeCASeparation, diag.Error, "two CAs of the bundle share a key: etcd, the API and the front proxy must be separate"},
		{CodeLeafAfterCA, diag.Error, "leaf certificates would outlive the CA that signs them"},
		{CodeAlgorithmMix, diag.Warning, "the bundle's CA keys use another algorithm than pki.keyAlgorithm"},
		{CodeCAExpiring, diag.Warning, "a CA expires within a year"},
	}
}

// Check holds the cluster's catalogue to its flows and, when a bundle is
// given, the bundle to the spec. Diagnostics are placed at the spec
// positions recorded in the cluster's settings; now is the caller's clock.
func Check(c *ir.Cluster, b *Bundle, now time.Time) diag.List {
	var out diag.List
	sev := map[string]diag.Severity{}
	for _, r := range Rules() {
		sev[r.Code] = r.Severity
	}
	report := func(code, path, msg, hint string) {
		out.Add(diag.Diagnostic{Code: code, Severity: sev[code], Path: path, Message: msg, Positions: positions(c, path), Hint: hint})
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
				report(CodeSANCoverage, f.Setting, fmt.Sprintf("%s certificate %s does not cover %s, which %s dials", srv.Name, f.Server, f.ServerName, f.Kind),
					"give the endpoint a DNS name or address, or add it to controlPlane.apiServer.extraSANs")
			}
		}
		if cl, ok := certs[f.Client]; ok && f.User != "" {
			if cl.CommonName != f.User || !slices.Equal(cl.Organization, f.Groups) {
				key := f.Client + "|identity"
				if !seen[key] {
					seen[key] = true
					report(CodeIdentity, f.Setting, fmt.Sprintf("%s presents CN=%q O=%q but %s needs user %q in groups %q",
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
				report(CodeCASeparation, "pki", fmt.Sprintf("the bundle's %s and %s share one key: a certificate for one could be used against the other", a, o),
					"create separate CAs: `kcompile secrets init` does, and `secrets import-kubeadm` needs a kubeadm PKI with its own etcd and front-proxy CAs")
			}
		}
	}
	leafEnd := b.Epoch.Add(c.PKI.LeafValidity)
	var outlived []string
	var firstEnd time.Time
	for _, a := range Authorities() {
		ca := b.CAs[a].Cert
		switch {
		case leafEnd.After(ca.NotAfter):
			outlived = append(outlived, string(a))
			if firstEnd.IsZero() || ca.NotAfter.Before(firstEnd) {
				firstEnd = ca.NotAfter
			}
		case ca.NotAfter.Before(now.AddDate(1, 0, 0)):
			report(CodeCAExpiring, "pki", fmt.Sprintf("%s expires on %s", a, ca.NotAfter.Format(time.DateOnly)),
				"plan the CA rotation now: every certificate of the cluster depends on it")
		}
	}
	if len(outlived) > 0 {
		report(CodeLeafAfterCA, "pki.leafValidity", fmt.Sprintf("leaves issued at %s for %s would be valid until %s, after %s expire(s) on %s",
			b.Epoch.Format(time.DateOnly), days(c.PKI.LeafValidity), leafEnd.Format(time.DateOnly), strings.Join(outlived, ", "), firstEnd.Format(time.DateOnly)),
			"shorten pki.leafValidity, or rotate the CAs (a new bundle) before renewing")
	}
	for _, a := range Authorities() {
		if got := keyAlgorithm(b.CAs[a].Cert.PublicKey); got != c.PKI.KeyAlgorithm {
			report(CodeAlgorithmMix, "pki.keyAlgorithm", fmt.Sprintf("the bundle's %s has a %s key but the spec asks for %s keys", a, got, c.PKI.KeyAlgorithm),
				"leaves are issued as the spec asks and signed by the CA as it is; create the bundle with --key-algorithm "+c.PKI.KeyAlgorithm+" for one algorithm throughout")
			break
		}
	}
	return out.Sorted()
}

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

// positions finds where the spec wrote path, for diagnostics.
func positions(c *ir.Cluster, path string) []diag.Pos {
	p, ok := c.Position(path)
	if !ok {
		return nil
	}
	return []diag.Pos{{File: p.File, Line: p.Line, Column: p.Column}}
}
