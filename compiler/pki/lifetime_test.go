package pki

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

// testBundleFile is where the bundles of these tests claim to come from.
const testBundleFile = "secrets.json"

// withSource is b as the CLI loads it from testBundleFile.
func withSource(b *Bundle) *Bundle {
	c := *b
	c.Source = testBundleFile
	return &c
}

// withSkew is a copy of c with another pki.clockSkew.
func withSkew(c *ir.Cluster, skew time.Duration) *ir.Cluster {
	cc := *c
	cc.PKI.ClockSkew = skew
	return &cc
}

// findCode returns the diagnostics of a code.
func findCode(l diag.List, code string) []diag.Diagnostic {
	var out []diag.Diagnostic
	for _, d := range l {
		if d.Code == code {
			out = append(out, d)
		}
	}
	return out
}

// mustOne returns the single diagnostic of a code, failing otherwise.
func mustOne(t *testing.T, l diag.List, code string, sev diag.Severity) diag.Diagnostic {
	t.Helper()
	ds := findCode(l, code)
	if len(ds) != 1 {
		t.Fatalf("want one %s, got %d in:\n%s", code, len(ds), render(l))
	}
	if ds[0].Severity != sev {
		t.Errorf("%s has severity %s, want %s", code, ds[0].Severity, sev)
	}
	if ds[0].Hint == "" {
		t.Errorf("%s has no hint", code)
	}
	return ds[0]
}

func render(l diag.List) string {
	var b bytes.Buffer
	_ = l.WriteText(&b)
	return b.String()
}

// atBundle checks that a diagnostic points at the bundle's file and
// nowhere else.
func atBundle(t *testing.T, d diag.Diagnostic) {
	t.Helper()
	if want := []diag.Pos{{File: testBundleFile}}; !slices.Equal(d.Positions, want) {
		t.Errorf("%s is placed at %v, want the bundle file only", d.Code, d.Positions)
	}
}

// noSchemaPositions checks that no diagnostic points at kcompile's own
// schema, a file the user does not have.
func noSchemaPositions(t *testing.T, l diag.List) {
	t.Helper()
	for _, d := range l {
		for _, p := range d.Positions {
			if strings.Contains(filepath.ToSlash(p.File), "schema/") {
				t.Errorf("%s points at the schema file %s", d.Code, p)
			}
		}
	}
}

var checkNow = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

// TestCheckCAExpired: a bundle whose CAs expired before now is an error,
// not a warning to plan a rotation, and Issue refuses nothing for it
// (the leaves lie inside the CAs' old validity) but the CLI never gets
// there.
func TestCheckCAExpired(t *testing.T) {
	c := compileExample(t, "single-node")
	b, err := New(bytes.NewReader(testSeed), time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), NewOptions{Algorithm: ECDSAP256, CAValidity: 2 * 365 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	diags := Check(c, withSource(b), checkNow)
	d := mustOne(t, diags, CodeCAExpired, diag.Error)
	atBundle(t, d)
	for _, want := range []string{"ca, etcd-ca, front-proxy-ca expired on 2021-12-31T00:00:00Z", "valid from 2020-01-01T00:00:00Z"} {
		if !strings.Contains(d.Message, want) {
			t.Errorf("message %q lacks %q", d.Message, want)
		}
	}
	if len(findCode(diags, CodeCAExpiring)) != 0 {
		t.Errorf("an expired CA is also reported as expiring:\n%s", render(diags))
	}
	if !diags.HasErrors() {
		t.Error("an expired CA is no error")
	}
	// One day before expiry it is the warning to plan the rotation.
	diags = Check(c, withSource(b), time.Date(2021, 12, 30, 0, 0, 0, 0, time.UTC))
	if len(findCode(diags, CodeCAExpired)) != 0 || len(findCode(diags, CodeCAExpiring)) != 3 {
		t.Errorf("the day before expiry, want three KC1106 and no KC1107:\n%s", render(diags))
	}
	noSchemaPositions(t, diags)
}

// TestCheckEpochBeforeCA: an epoch before the CAs' notBefore is an error
// naming their validity, and Issue refuses it.
func TestCheckEpochBeforeCA(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	b := withSource(newTestBundle(t).Renew(testEpoch.AddDate(0, -6, 0)))
	diags := Check(c, b, checkNow)
	d := mustOne(t, diags, CodeEpochOutsideCA, diag.Error)
	atBundle(t, d)
	want := "the issuance epoch 2025-07-01T00:00:00Z is before ca, etcd-ca, front-proxy-ca are valid (2026-01-01T00:00:00Z to 2035-12-30T00:00:00Z)"
	if !strings.Contains(d.Message, want) {
		t.Errorf("message %q lacks %q", d.Message, want)
	}
	if !strings.Contains(d.Hint, "kcompile pki renew --epoch 2026-01-01T00:00:00Z") {
		t.Errorf("hint %q does not say which epoch to renew at", d.Hint)
	}
	if _, err := Issue(c, b); err == nil {
		t.Error("Issue signed leaves whose epoch precedes their CA")
	}
}

// TestCheckRenewAfterCA: an epoch after the CAs expired is an error, and
// so are leaves that would outlive the CAs; both at the bundle's file,
// since the spec does not write pki.leafValidity.
func TestCheckRenewAfterCA(t *testing.T) {
	c := compileExample(t, "single-node")
	b := newTestBundle(t)
	for _, tc := range []struct {
		epoch time.Time
		codes []string
	}{
		{time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), nil},
		{time.Date(2034, 12, 30, 0, 0, 0, 0, time.UTC), nil}, // leaves end on the CAs' last day
		{time.Date(2035, 6, 1, 0, 0, 0, 0, time.UTC), []string{CodeLeafAfterCA}},
		{time.Date(2036, 6, 1, 0, 0, 0, 0, time.UTC), []string{CodeLeafAfterCA, CodeEpochOutsideCA}},
	} {
		t.Run(tc.epoch.Format(time.DateOnly), func(t *testing.T) {
			r := withSource(b.Renew(tc.epoch))
			diags := Check(c, r, checkNow)
			var got []string
			for _, d := range diags {
				if d.Severity == diag.Error {
					got = append(got, d.Code)
					atBundle(t, d)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.codes) {
				t.Errorf("errors %v, want %v:\n%s", got, tc.codes, render(diags))
			}
			m, err := Issue(c, r)
			if (err == nil) != (len(tc.codes) == 0) {
				t.Fatalf("Issue: %v, want an error exactly when Check has one", err)
			}
			if err != nil {
				return
			}
			// The computed times, not the arithmetic of the check, lie
			// inside the CA.
			for _, l := range m.Leaves {
				ca := r.CAs[l.CA].Cert
				if l.X509.NotBefore.Before(ca.NotBefore) || l.X509.NotAfter.After(ca.NotAfter) {
					t.Errorf("%s valid %s–%s, outside %s's %s–%s", l.ID, l.X509.NotBefore, l.X509.NotAfter, l.CA, ca.NotBefore, ca.NotAfter)
				}
			}
		})
	}
	// A spec that writes pki.leafValidity has KC1104 at its value, and
	// the bundle as a related position.
	dir := copyExample(t, "single-node", map[string]string{"validity.cue": "package cluster\n\npki: leafValidity: \"3y\"\n"})
	diags := Check(compileDir(t, dir), withSource(b.Renew(time.Date(2034, 1, 1, 0, 0, 0, 0, time.UTC))), checkNow)
	d := mustOne(t, diags, CodeLeafAfterCA, diag.Error)
	if len(d.Positions) != 2 || filepath.Base(d.Positions[0].File) != "validity.cue" || d.Positions[0].Line != 3 || d.Positions[1] != (diag.Pos{File: testBundleFile}) {
		t.Errorf("KC1104 placed at %v, want validity.cue:3 then the bundle", d.Positions)
	}
}

// TestCheckLeavesNotYetValid: a renewal ahead of time is a warning; a
// few minutes ahead is absorbed by the clock-skew allowance.
func TestCheckLeavesNotYetValid(t *testing.T) {
	c := compileExample(t, "single-node")
	b := newTestBundle(t)
	diags := Check(c, withSource(b.Renew(checkNow.AddDate(0, 1, 0))), checkNow)
	d := mustOne(t, diags, CodeLeavesNotYet, diag.Warning)
	atBundle(t, d)
	if !strings.Contains(d.Message, "not valid before 2026-06-30T23:55:00Z") {
		t.Errorf("message %q does not give the leaves' notBefore", d.Message)
	}
	if diags.HasErrors() {
		t.Errorf("a renewal ahead of time is an error:\n%s", render(diags))
	}
	if ds := findCode(Check(c, withSource(b.Renew(checkNow.Add(4*time.Minute))), checkNow), CodeLeavesNotYet); len(ds) != 0 {
		t.Errorf("leaves valid now thanks to the 5m backdating are reported: %v", ds)
	}
	if ds := findCode(Check(withSkew(c, 0), withSource(b.Renew(checkNow.Add(4*time.Minute))), checkNow), CodeLeavesNotYet); len(ds) != 1 {
		t.Errorf("without backdating, leaves from 4 minutes ahead are not reported: %v", ds)
	}
}

// TestCheckPositionsNeverSchema: the examples write neither
// pki.keyAlgorithm nor pki.leafValidity; diagnostics about them point
// at the bundle, not at schema/v1alpha1/pki.cue.
func TestCheckPositionsNeverSchema(t *testing.T) {
	c := compileExample(t, "single-node")
	b, err := New(bytes.NewReader(testSeed), testEpoch, NewOptions{Algorithm: ECDSAP384, CAValidity: 200 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	diags := Check(c, withSource(b), checkNow)
	for _, code := range []string{CodeAlgorithmMix, CodeLeafAfterCA, CodeCAExpiring} {
		if len(findCode(diags, code)) == 0 {
			t.Errorf("no %s in:\n%s", code, render(diags))
		}
	}
	for _, d := range diags {
		atBundle(t, d)
	}
	noSchemaPositions(t, diags)
}

// TestBackdating: leaves start pki.clockSkew before the epoch, never
// before their CA; OpenSSL agrees on when they become valid.
func TestBackdating(t *testing.T) {
	c := compileExample(t, "single-node")
	if c.PKI.ClockSkew != 5*time.Minute {
		t.Fatalf("default clock skew %s, want 5m", c.PKI.ClockSkew)
	}
	b := newTestBundle(t)
	caStart := b.CAs[ClusterCA].Cert.NotBefore
	for _, tc := range []struct {
		name  string
		skew  time.Duration
		epoch time.Time
		want  time.Time
	}{
		{"at the CA's start, clamped", 5 * time.Minute, testEpoch, caStart},
		{"two minutes in, clamped", 5 * time.Minute, testEpoch.Add(2 * time.Minute), caStart},
		{"a day in, backdated", 5 * time.Minute, testEpoch.AddDate(0, 0, 1), testEpoch.AddDate(0, 0, 1).Add(-5 * time.Minute)},
		{"no skew", 0, testEpoch.AddDate(0, 0, 1), testEpoch.AddDate(0, 0, 1)},
		{"an hour", time.Hour, testEpoch.AddDate(0, 0, 1), testEpoch.AddDate(0, 0, 1).Add(-time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := withSkew(c, tc.skew)
			m, err := Issue(cc, b.Renew(tc.epoch))
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range m.Leaves {
				if !l.X509.NotBefore.Equal(tc.want) {
					t.Errorf("%s notBefore %s, want %s", l.ID, l.X509.NotBefore, tc.want)
				}
				if want := tc.epoch.Add(cc.PKI.LeafValidity); !l.X509.NotAfter.Equal(want) {
					t.Errorf("%s notAfter %s, want %s", l.ID, l.X509.NotAfter, want)
				}
			}
			again, err := Issue(cc, b.Renew(tc.epoch))
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range m.Leaves {
				if !bytes.Equal(l.CertPEM, again.Leaves[i].CertPEM) {
					t.Errorf("%s: backdated issuance is not deterministic", l.ID)
				}
			}
		})
	}

	// OpenSSL: a leaf renewed a day in is valid four minutes before its
	// epoch, and not six minutes before.
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("openssl is needed to cross-check the certificates: %v", err)
	}
	epoch := testEpoch.AddDate(0, 0, 1)
	m, err := Issue(c, b.Renew(epoch))
	if err != nil {
		t.Fatal(err)
	}
	leaf := mustLeaf(t, m, "apiserver@box")
	dir := t.TempDir()
	caFile, leafFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "leaf.crt")
	if err := os.WriteFile(caFile, encodeCert(b.CAs[ClusterCA].Cert.Raw), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(leafFile, leaf.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	verifyAt := func(at time.Time) (string, bool) {
		out, err := exec.Command(openssl, "verify", "-x509_strict", "-attime", fmt.Sprint(at.Unix()), "-CAfile", caFile, leafFile).CombinedOutput()
		return string(out), err == nil
	}
	if out, ok := verifyAt(epoch.Add(-4 * time.Minute)); !ok {
		t.Errorf("openssl: the leaf is not valid 4 minutes before its epoch:\n%s", out)
	}
	if out, ok := verifyAt(epoch.Add(-6 * time.Minute)); ok || !strings.Contains(out, "error 9 at 0 depth") {
		t.Errorf("openssl: 6 minutes before its epoch, want error 9 (not yet valid), got:\n%s", out)
	}
}

// TestSerialFollowsContent: the same certificate gets the same serial;
// any change to what it says gives another.
func TestSerialFollowsContent(t *testing.T) {
	b := newTestBundle(t)
	ca := b.CAs[ClusterCA].Cert
	key, err := deriveKey(testSeed, ECDSAP256, "serial test")
	if err != nil {
		t.Fatal(err)
	}
	other, err := deriveKey(testSeed, ECDSAP256, "serial test 2")
	if err != nil {
		t.Fatal(err)
	}
	base := func() *x509.Certificate {
		return &x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver", Organization: []string{"o"}},
			DNSNames:    []string{"a.example.com", "b.example.com"},
			IPAddresses: []net.IP{net.ParseIP("10.0.0.1")},
			NotBefore:   testEpoch, NotAfter: testEpoch.AddDate(1, 0, 0),
			KeyUsage:              x509.KeyUsageDigitalSignature,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			BasicConstraintsValid: true,
		}
	}
	serial := func(tmpl *x509.Certificate, pub any, issuer *x509.Certificate) *big.Int {
		t.Helper()
		n, err := deriveSerial(tmpl, pub, issuer)
		if err != nil {
			t.Fatal(err)
		}
		if n.Sign() <= 0 || n.BitLen() > 127 {
			t.Errorf("serial %s is not positive or longer than 127 bits", n)
		}
		return n
	}
	want := serial(base(), key.Public(), ca)
	if got := serial(base(), key.Public(), ca); got.Cmp(want) != 0 {
		t.Errorf("the same certificate got serials %s and %s", want, got)
	}
	changes := map[string]func(*x509.Certificate){
		"CN":           func(c *x509.Certificate) { c.Subject.CommonName = "kube-apiserver2" },
		"O":            func(c *x509.Certificate) { c.Subject.Organization = nil },
		"SAN added":    func(c *x509.Certificate) { c.DNSNames = append(c.DNSNames, "c.example.com") },
		"SAN moved":    func(c *x509.Certificate) { c.DNSNames = []string{"a.example.comb.example.com"} },
		"SANs swapped": func(c *x509.Certificate) { c.DNSNames[0], c.DNSNames[1] = c.DNSNames[1], c.DNSNames[0] },
		"IP":           func(c *x509.Certificate) { c.IPAddresses = []net.IP{net.ParseIP("10.0.0.2")} },
		"notBefore":    func(c *x509.Certificate) { c.NotBefore = c.NotBefore.Add(-time.Minute) },
		"notAfter":     func(c *x509.Certificate) { c.NotAfter = c.NotAfter.Add(time.Second) },
		"key usage":    func(c *x509.Certificate) { c.KeyUsage |= x509.KeyUsageKeyEncipherment },
		"ext usage":    func(c *x509.Certificate) { c.ExtKeyUsage = append(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) },
		"CA":           func(c *x509.Certificate) { c.IsCA = true },
	}
	seen := map[string]string{want.String(): "base"}
	for name, change := range changes {
		tmpl := base()
		change(tmpl)
		got := serial(tmpl, key.Public(), ca)
		if prev, dup := seen[got.String()]; dup {
			t.Errorf("%s: serial %s, the same as %s", name, got, prev)
		}
		seen[got.String()] = name
	}
	if got := serial(base(), other.Public(), ca); seen[got.String()] != "" {
		t.Errorf("another public key: serial %s, the same as %s", got, seen[got.String()])
	}
	if got := serial(base(), key.Public(), b.CAs[EtcdCA].Cert); seen[got.String()] != "" {
		t.Errorf("another issuer: serial %s, the same as %s", got, seen[got.String()])
	}
}

// TestSerialChangesWithSAN: at one epoch, adding a SAN to the API server
// gives its certificate a new serial, and certificates that did not
// change keep theirs.
func TestSerialChangesWithSAN(t *testing.T) {
	b := newTestBundle(t)
	before := issueExample(t, "single-node")
	dir := copyExample(t, "single-node", map[string]string{"san.cue": "package cluster\n\ncontrolPlane: apiServer: extraSANs: [\"api.other.example.com\"]\n"})
	after, err := Issue(compileDir(t, dir), b)
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i, l := range before.Leaves {
		o := after.Leaves[i]
		if l.ID != o.ID {
			t.Fatalf("leaf %d is %s then %s", i, l.ID, o.ID)
		}
		sameSerial := l.X509.SerialNumber.Cmp(o.X509.SerialNumber) == 0
		sameCert := bytes.Equal(l.CertPEM, o.CertPEM)
		if sameSerial != sameCert {
			t.Errorf("%s: same serial %v but same certificate %v", l.ID, sameSerial, sameCert)
		}
		if l.Name == "apiserver" {
			if sameSerial {
				t.Errorf("%s: a new SAN kept serial %s", l.ID, l.X509.SerialNumber)
			}
			if !slices.Contains(o.X509.DNSNames, "api.other.example.com") {
				t.Errorf("%s lacks the new SAN", l.ID)
			}
			changed++
		}
	}
	if changed != 1 || len(before.Leaves) < 10 {
		t.Errorf("%d API server certificates changed of %d, want 1", changed, len(before.Leaves))
	}
}

// TestKubeletClientHasNoGroup: the API server's credential towards
// kubelets is in no group, so it is not also a cluster admin; OpenSSL
// reads the subject as CN only.
func TestKubeletClientHasNoGroup(t *testing.T) {
	m := issueExample(t, "ha-stacked")
	l := mustLeaf(t, m, "apiserver-kubelet-client@cp1")
	if l.X509.Subject.CommonName != APIServerKubeletClientUser || len(l.X509.Subject.Organization) != 0 {
		t.Errorf("subject %s, want CN=%s and no O", l.X509.Subject, APIServerKubeletClientUser)
	}
	for _, f := range Flows(m.Cluster) {
		if f.Kind == "apiserver→kubelet" && (f.User != APIServerKubeletClientUser || len(f.Groups) != 0) {
			t.Errorf("flow %s wants %s in %v", f.Kind, f.User, f.Groups)
		}
	}
	if ds := findCode(Check(m.Cluster, nil, checkNow), CodeIdentity); len(ds) != 0 {
		t.Errorf("KC1102: %v", ds)
	}
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("openssl is needed to cross-check the certificates: %v", err)
	}
	file := filepath.Join(t.TempDir(), "client.crt")
	if err := os.WriteFile(file, l.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(openssl, "x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in", file).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "subject=CN=kube-apiserver-kubelet-client" {
		t.Errorf("openssl x509 -subject: %q (%v), want subject=CN=kube-apiserver-kubelet-client", out, err)
	}
}

// TestNewRejectsValidity: a CA valid for no time, negative time or more
// than 200 years is refused.
func TestNewRejectsValidity(t *testing.T) {
	for _, v := range []time.Duration{0, -time.Hour, MaxCAValidity + time.Second} {
		if _, err := New(bytes.NewReader(testSeed), testEpoch, NewOptions{Algorithm: ECDSAP256, CAValidity: v}); err == nil {
			t.Errorf("New accepted a CA validity of %s", v)
		}
	}
	b, err := New(bytes.NewReader(testSeed), testEpoch, NewOptions{Algorithm: ECDSAP256, CAValidity: MaxCAValidity})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.CAs[ClusterCA].Cert.NotAfter; got.Year() != 2225 {
		t.Errorf("a 200-year CA from 2026 ends %s", got)
	}
}

// TestNewBackdatesCAs: a fresh bundle's CAs start ClockSkew before its
// epoch, and so do the leaves issued from it (the spec's clockSkew is
// clamped to the CA's notBefore): with a CA starting at the epoch, a
// fresh tree would be refused by a node whose clock is a minute behind.
// A skew outside 0 to 24 hours is refused.
func TestNewBackdatesCAs(t *testing.T) {
	const skew = 5 * time.Minute
	b, err := New(bytes.NewReader(testSeed), testEpoch, NewOptions{Algorithm: ECDSAP256, CAValidity: time.Hour * 24 * 365, ClockSkew: skew})
	if err != nil {
		t.Fatal(err)
	}
	want := testEpoch.UTC().Truncate(time.Second).Add(-skew)
	for a, ca := range b.CAs {
		if !ca.Cert.NotBefore.Equal(want) {
			t.Errorf("%s starts %s, want %s", a, ca.Cert.NotBefore, want)
		}
	}
	c := compileExample(t, "single-node")
	m, err := Issue(c, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Leaves {
		if !l.X509.NotBefore.Equal(want) {
			t.Errorf("%s starts %s, want %s", l.ID, l.X509.NotBefore, want)
		}
	}
	for _, s := range []time.Duration{-time.Second, ir.MaxClockSkew + time.Second} {
		if _, err := New(bytes.NewReader(testSeed), testEpoch, NewOptions{Algorithm: ECDSAP256, CAValidity: time.Hour, ClockSkew: s}); err == nil {
			t.Errorf("New accepted a clock skew of %s", s)
		}
	}
}

// TestParseNamesUnknownField: an unknown field is named with its place
// in the bundle, and its value never quoted.
func TestParseNamesUnknownField(t *testing.T) {
	data, err := newTestBundle(t).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	const value = "hunter2-not-a-secret-to-print"
	for _, tc := range []struct {
		edit func([]byte) []byte
		want string
	}{
		{func(d []byte) []byte {
			return bytes.Replace(d, []byte(`"kind": "SecretsBundle",`), []byte(`"kind": "SecretsBundle", "comment": "`+value+`",`), 1)
		}, "unknown field comment"},
		{func(d []byte) []byte {
			return bytes.Replace(d, []byte(`"ca": {`), []byte(`"ca": {"note": "`+value+`",`), 1)
		}, "unknown field authorities.ca.note"},
		{func(d []byte) []byte {
			return bytes.Replace(d, []byte(`"kind": "SecretsBundle",`), []byte(`"kind": "SecretsBundle", "a b": 1,`), 1)
		}, `unknown field "a b"`},
		{func(d []byte) []byte {
			return bytes.Replace(d, []byte(`"authorities": {`), []byte(`"authorities": {"etcd": {"cert": "`+value+`", "key": ""},`), 1)
		}, "unknown authority etcd"},
	} {
		_, err := Parse(tc.edit(data))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), value) {
			t.Errorf("Parse: %v, want an error naming %q without the value", err, tc.want)
		}
	}
}

// memTree lays the material out as `kcompile build --target pki` does,
// in memory.
func memTree(t *testing.T, m *Material) fstest.MapFS {
	t.Helper()
	files, err := Files(m)
	if err != nil {
		t.Fatal(err)
	}
	tree := fstest.MapFS{}
	for _, f := range files {
		p := path.Join("cluster", f.Path)
		if f.Node != "" {
			p = path.Join("nodes", f.Node, f.Path)
		}
		tree[p] = &fstest.MapFile{Data: f.Data, Mode: f.Mode}
	}
	return tree
}

// writeTree writes tree to disk, with its modes, and returns its root.
func writeTree(t *testing.T, tree fstest.MapFS) string {
	t.Helper()
	root := t.TempDir()
	for rel, f := range tree {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, f.Mode); err != nil {
			t.Fatal(err)
		}
		// Chmod, because WriteFile's mode passes through the umask.
		if err := os.Chmod(p, f.Mode); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// problemsAt groups Verify's findings by path.
func problemsAt(ps []Problem) map[string][]string {
	out := map[string][]string{}
	for _, p := range ps {
		out[p.Path] = append(out[p.Path], p.Message)
	}
	return out
}

// TestFilesPutKeysWhereKeyFilesSays: Verify's idea of where keys go is
// what Files writes.
func TestFilesPutKeysWhereKeyFilesSays(t *testing.T) {
	for _, ex := range []string{"ha-stacked", "external-etcd", "single-node"} {
		m := issueExample(t, ex)
		files, err := Files(m)
		if err != nil {
			t.Fatal(err)
		}
		want := keyFiles(m.Cluster)
		got := map[[2]string]bool{}
		for _, f := range files {
			if bytes.Contains(f.Data, []byte("PRIVATE KEY-----")) {
				got[[2]string{f.Node, f.Path}] = true
			}
		}
		for k := range want {
			if !got[k] {
				t.Errorf("%s: keyFiles has %s:%s, which Files does not write", ex, k[0], k[1])
			}
		}
		for k := range got {
			if !want[k] {
				t.Errorf("%s: Files writes a key at %s:%s, which keyFiles does not list", ex, k[0], k[1])
			}
		}
	}
}

// TestVerifyStrayKeys: keys where the catalogue puts none are found, by
// content as well as by name, with the spec and without; the messages
// quote no key. The tree is checked in memory and on disk, where modes
// come from the file system; the manifest a build writes at the tree's
// root is no file of the tree, even one that would be a problem.
func TestVerifyStrayKeys(t *testing.T) {
	m := issueExample(t, "ha-stacked")
	b := m.Bundle
	tree := memTree(t, m)
	leafKey := mustLeaf(t, m, "apiserver@cp1").KeyPEM
	tree[".kcompile-manifest.json"] = &fstest.MapFile{Data: leafKey, Mode: 0o666}
	for _, c := range []*ir.Cluster{m.Cluster, nil} {
		if ps, err := Verify(tree, c, testVerifyTime); err != nil || len(ps) != 0 {
			t.Fatalf("the tree as built (spec %v) has problems: %v %v", c != nil, ps, err)
		}
	}
	etcdKey, _ := encodeKey(b.CAs[EtcdCA].Key)
	frontKey, _ := encodeKey(b.CAs[FrontProxyCA].Key)
	caKey, _ := encodeKey(b.CAs[ClusterCA].Key)
	saKey, _ := encodeKey(b.ServiceAccountKey)
	stray := map[string]struct {
		data []byte
		want string
	}{
		"nodes/cp1/etc/kubernetes/pki/etcd/ca.key":        {etcdKey, "is the etcd CA's private key"},
		"nodes/cp2/root/etcd-backup.pem":                  {etcdKey, "is the etcd CA's private key"},
		"nodes/cp1/etc/kubernetes/pki/front-proxy-ca.key": {frontKey, "is the front-proxy CA's private key"},
		"nodes/w01/etc/kubernetes/pki/ca.key":             {caKey, "is the cluster CA's private key"},
		"nodes/w02/etc/kubernetes/pki/sa.key":             {saKey, "is the service-account signing key"},
		"nodes/w03/root/backup.key":                       {leafKey, "holds a private key"},
		"cluster/pki/ca.key":                              {caKey, "is the cluster CA's private key"},
	}
	for rel, s := range stray {
		tree[rel] = &fstest.MapFile{Data: s.data, Mode: ModePrivate}
	}
	secrets := append(bundleSecretRenderings(t, b), string(leafKey[40:72]))
	for where, tree := range map[string]fs.FS{"in memory": tree, "on disk": os.DirFS(writeTree(t, tree))} {
		for _, c := range []*ir.Cluster{m.Cluster, nil} {
			ps, err := Verify(tree, c, testVerifyTime)
			if err != nil {
				t.Fatal(err)
			}
			at := problemsAt(ps)
			for rel, s := range stray {
				if !slices.ContainsFunc(at[rel], func(msg string) bool { return strings.Contains(msg, s.want) }) {
					t.Errorf("%s, spec %v: %s: got %q, want a problem saying %q", where, c != nil, rel, at[rel], s.want)
				}
			}
			if len(at) != len(stray) {
				t.Errorf("%s, spec %v: problems at %d paths, want %d: %v", where, c != nil, len(at), len(stray), ps)
			}
			for _, p := range ps {
				assertNoSecretIn(t, "a verify problem", p.String(), append(secrets, "PRIVATE KEY"))
			}
		}
	}
}

// TestVerifyMisnamedNodeCertificate: a node holding another node's
// kubelet identity, or a certificate naming another node, is found with
// the spec and without.
func TestVerifyMisnamedNodeCertificate(t *testing.T) {
	m := issueExample(t, "ha-stacked")
	tree := memTree(t, m)
	// w01 gets w02's kubelet client kubeconfig, w03 w04's serving pair.
	for to, from := range map[string]string{
		"nodes/w01/etc/kubernetes/kubelet.conf":     "nodes/w02/etc/kubernetes/kubelet.conf",
		"nodes/w03/var/lib/kubelet/pki/kubelet.crt": "nodes/w04/var/lib/kubelet/pki/kubelet.crt",
		"nodes/w03/var/lib/kubelet/pki/kubelet.key": "nodes/w04/var/lib/kubelet/pki/kubelet.key",
	} {
		tree[to] = tree[from]
	}
	for _, c := range []*ir.Cluster{m.Cluster, nil} {
		ps, err := Verify(tree, c, testVerifyTime)
		if err != nil {
			t.Fatal(err)
		}
		at := problemsAt(ps)
		for path, wants := range map[string][]string{
			"nodes/w01/etc/kubernetes/kubelet.conf":     {"is node w02's certificate (CN=system:node:w02), not w01's"},
			"nodes/w03/var/lib/kubelet/pki/kubelet.crt": {"is node w04's certificate (CN=system:node:w04), not w03's", "has SAN w04, which names node w04, not w03"},
		} {
			for _, want := range wants {
				if !slices.ContainsFunc(at[path], func(msg string) bool { return strings.Contains(msg, want) }) {
					t.Errorf("spec %v: %s: got %q, want %q", c != nil, path, at[path], want)
				}
			}
		}
		for path := range at {
			if path != "nodes/w01/etc/kubernetes/kubelet.conf" && path != "nodes/w03/var/lib/kubelet/pki/kubelet.crt" {
				t.Errorf("spec %v: unexpected problems at %s: %q", c != nil, path, at[path])
			}
		}
	}
}

// TestRenewFor renews with the check a renewal needs: the copy carries
// the new epoch, the bundle it came from is unchanged, and an epoch ahead
// of the caller's clock is reported with the copy.
func TestRenewFor(t *testing.T) {
	c := compileExample(t, "single-node")
	b := newTestBundle(t)
	epoch := checkNow.AddDate(0, 1, 0)
	renewed, diags := withSource(b).RenewFor(c, epoch, checkNow)
	if !renewed.Epoch.Equal(epoch) || b.Epoch.Equal(epoch) {
		t.Errorf("renewed epoch %s, original %s; want %s and the original kept", renewed.Epoch, b.Epoch, epoch)
	}
	mustOne(t, diags, CodeLeavesNotYet, diag.Warning)
}
