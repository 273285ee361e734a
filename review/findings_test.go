package review

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/targets"
)

// TestFindingsPairByCodePathMessage: a diagnostic whose line moved is the
// same finding; one only the head has is introduced, at the head's
// position, one only the base has is fixed, at the base's; introduced
// ones come first, errors before warnings, and a repeat pairs one to one.
func TestFindingsPairByCodePathMessage(t *testing.T) {
	at := func(file string, line int) []diag.Pos { return []diag.Pos{{File: file, Line: line, Column: 3}} }
	moved := diag.Diagnostic{Code: "KC0101", Severity: diag.Warning, Path: "a", Message: "same"}
	base := diag.List{
		{Code: moved.Code, Severity: moved.Severity, Path: moved.Path, Message: moved.Message, Positions: at("base/x.cue", 4)},
		{Code: "KC0200", Severity: diag.Warning, Path: "b", Message: "gone", Positions: at("base/x.cue", 9)},
		{Code: "KC0300", Severity: diag.Warning, Path: "c", Message: "twice", Positions: at("base/x.cue", 12)},
	}
	head := diag.List{
		{Code: moved.Code, Severity: moved.Severity, Path: moved.Path, Message: moved.Message, Positions: at("head/x.cue", 40)},
		{Code: "KC0405", Severity: diag.Warning, Path: "z", Message: "new warning", Positions: at("head/x.cue", 15), Hint: "spread"},
		{Code: "KC0300", Severity: diag.Warning, Path: "c", Message: "twice", Positions: at("head/x.cue", 12)},
		{Code: "KC0300", Severity: diag.Warning, Path: "c", Message: "twice", Positions: at("head/x.cue", 13)},
	}
	policies := diag.List{{Code: "prod-x", Severity: diag.Error, Path: "p", Message: "new violation", Positions: at("head/p.cue", 1)}}
	r := Compare(Side{Label: "base", Tree: targets.NewTree(), Checks: base, Policies: diag.List{}},
		Side{Label: "head", Tree: targets.NewTree(), Checks: head, Policies: policies}, Options{})
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.Change+" "+f.Source+" "+f.Code+" "+strings.Join(f.Positions, ","))
	}
	want := []string{
		"introduces policy prod-x head/p.cue:1:3",
		"introduces check KC0300 head/x.cue:13:3",
		"introduces check KC0405 head/x.cue:15:3",
		"fixes check KC0200 base/x.cue:9:3",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Equal() {
		t.Error("a report with new findings and no changed file is not equal")
	}
	var text, md, js bytes.Buffer
	if err := r.WriteText(&text, false); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"regressions and fixes: 3 introduced (1 error, 2 warnings), 1 fixed (1 warning) (check diagnostics and policy violations)\n",
		"  introduces policy prod-x (error) at p (head/p.cue:1:3): new violation\n",
		"  introduces warning KC0405 at z (head/x.cue:15:3): new warning\n      hint: spread\n",
		"  fixes warning KC0200 at b (base/x.cue:9:3): gone\n",
	} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text lacks %q:\n%s", s, text.String())
		}
	}
	if err := r.WriteMarkdown(&md, MarkdownOptions{}); err != nil {
		t.Fatal(err)
	}
	if s := "- **introduces** warning `KC0405` at z (`head/x.cue:15:3`): new warning\n"; !strings.Contains(md.String(), s) {
		t.Errorf("Markdown lacks %q:\n%s", s, md.String())
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if s := `"change": "fixes",
      "source": "check",
      "code": "KC0200",`; !strings.Contains(js.String(), s) {
		t.Errorf("JSON lacks %q:\n%s", s, js.String())
	}

	// The same findings on both sides: nothing to say, and no section.
	same := Compare(Side{Tree: targets.NewTree(), Checks: base}, Side{Tree: targets.NewTree(), Checks: base}, Options{})
	text.Reset()
	same.WriteText(&text, false)
	if !same.Equal() || strings.Contains(text.String(), "regressions") {
		t.Errorf("equal sides:\n%s", text.String())
	}
}

// TestThrowawayKeys: with throwaway keys a certificate is compared by
// identity (a serial, a key, a date or a hash of a throwaway key means
// nothing), a key file and a kubeconfig's key are "not compared", and the
// report says what it left out in every format.
func TestThrowawayKeys(t *testing.T) {
	b, err := pki.New(bytes.NewReader(bytes.Repeat([]byte{7}, 32)), time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC),
		pki.NewOptions{Algorithm: pki.ECDSAP256, CAValidity: 10 * 365 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ca := b.CAs[pki.ClusterCA]
	cert := func(serial int64, days int, sans ...string) []byte {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "kube-apiserver"},
			NotBefore: ca.Cert.NotBefore.Add(time.Duration(serial) * time.Hour), NotAfter: ca.Cert.NotBefore.Add(time.Duration(serial)*time.Hour + time.Duration(days)*24*time.Hour),
			DNSNames: sans, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		// A nil random source signs deterministically.
		der, err := x509.CreateCertificate(nil, tmpl, ca.Cert, ca.Key.Public(), ca.Key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	keyPEM := func(k pki.CA) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k.Key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	base, head := targets.NewTree(), targets.NewTree()
	base.Add("nodes/cp1/etc/kubernetes/pki/apiserver.crt", cert(1, 365, "a.example.com"), 0o644)
	head.Add("nodes/cp1/etc/kubernetes/pki/apiserver.crt", cert(2, 365, "a.example.com", "b.example.com"), 0o644)
	base.Add("nodes/cp1/etc/kubernetes/pki/renewed.crt", cert(1, 365), 0o644)
	head.Add("nodes/cp1/etc/kubernetes/pki/renewed.crt", cert(3, 730), 0o644)
	base.Add("nodes/cp1/etc/kubernetes/pki/apiserver.key", keyPEM(ca), 0o600)
	head.Add("nodes/cp1/etc/kubernetes/pki/apiserver.key", keyPEM(b.CAs[pki.EtcdCA]), 0o600)

	r := Compare(Side{Label: "a", Tree: base}, Side{Label: "b", Tree: head}, Options{ThrowawayKeys: true})
	details := map[string]string{}
	for _, f := range r.Files {
		details[f.Path[strings.LastIndex(f.Path, "/")+1:]] = strings.Join(f.Details, "\n")
	}
	for name, want := range map[string]string{
		"apiserver.crt": "SAN added: DNS:b.example.com",
		"renewed.crt":   "validity: 365 days → 730 days",
		"apiserver.key": "content: ECDSA-P256 private key, not compared (no --secrets)",
	} {
		if details[name] != want {
			t.Errorf("%s: details %q, want %q", name, details[name], want)
		}
	}
	var text, md, js bytes.Buffer
	r.WriteText(&text, false)
	r.WriteMarkdown(&md, MarkdownOptions{})
	r.WriteJSON(&js)
	for format, out := range map[string]string{"text": text.String(), "markdown": md.String(), "json": js.String()} {
		if !strings.Contains(out, "key material (private keys, tokens, encryption keys, every file shown as a secret): both sides were compiled with one throwaway bundle") ||
			!strings.Contains(out, "certificates are compared by identity (subject, issuer, SANs, usages, validity length)") {
			t.Errorf("%s does not say what was not compared:\n%s", format, out)
		}
		for _, s := range []string{"serial: ", "key: same key", "re-keyed", "sha256:", "2026-"} {
			if strings.Contains(out, s) {
				t.Errorf("%s shows %q with throwaway keys:\n%s", format, s, out)
			}
		}
	}
	// Equal sides still say what was not compared.
	eq := Compare(Side{Tree: base}, Side{Tree: base}, Options{ThrowawayKeys: true})
	text.Reset()
	eq.WriteText(&text, false)
	if !strings.HasSuffix(text.String(), "no differences\nnot compared: key material (private keys, tokens, encryption keys, every file shown as a secret): both sides were compiled with one throwaway bundle, not the cluster's (no --secrets)\nnot compared: certificates' keys, serial numbers, signatures and dates: certificates are compared by identity (subject, issuer, SANs, usages, validity length)\n") {
		t.Errorf("equal sides:\n%s", text.String())
	}

	// With the cluster's bundle the same change shows serials and keys.
	r = Compare(Side{Tree: base}, Side{Tree: head}, Options{})
	text.Reset()
	r.WriteText(&text, false)
	if !strings.Contains(text.String(), "serial: 1 → 2") || strings.Contains(text.String(), "not compared") {
		t.Errorf("with --secrets:\n%s", text.String())
	}
}
