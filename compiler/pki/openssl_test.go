package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestOpenSSLVerify has OpenSSL, an implementation independent of
// crypto/x509, verify every leaf of the HA examples against its CA for
// each purpose it serves and each name its clients dial, and crypto/x509
// do the same; and checks that the wrong CA, the wrong purpose and the
// wrong name fail in both.
func TestOpenSSLVerify(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("openssl is needed to cross-check the certificates: %v", err)
	}
	for _, ex := range []string{"ha-stacked", "external-etcd"} {
		t.Run(ex, func(t *testing.T) {
			testOpenSSLVerify(t, openssl, issueExample(t, ex))
		})
	}
}

// dialledNames maps each server certificate's ID to the names its clients
// dial, from the flows.
func dialledNames(c []Flow) map[string][]string {
	out := map[string][]string{}
	for _, f := range c {
		if f.Server != "" && !slices.Contains(out[f.Server], f.ServerName) {
			out[f.Server] = append(out[f.Server], f.ServerName)
		}
	}
	return out
}

func testOpenSSLVerify(t *testing.T, openssl string, m *Material) {
	b := m.Bundle
	dir := t.TempDir()
	caFile := map[Authority]string{}
	for _, a := range Authorities() {
		caFile[a] = filepath.Join(dir, string(a)+".crt")
		if err := os.WriteFile(caFile[a], encodeCert(b.CAs[a].Cert.Raw), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	leafFile := map[string]string{}
	for i, l := range m.Leaves {
		leafFile[l.ID] = filepath.Join(dir, fmt.Sprintf("leaf-%03d.crt", i))
		if err := os.WriteFile(leafFile[l.ID], l.CertPEM, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	attime := fmt.Sprint(testVerifyTime.Unix())

	// expect runs `openssl verify` with args on the certificates of ids
	// and checks that each verifies (want == "") or fails with the OpenSSL
	// error want (e.g. "error 20 at 0 depth"), not with another one.
	expect := func(what string, want string, args []string, ids []string) {
		t.Helper()
		if len(ids) == 0 {
			return
		}
		files := make([]string, len(ids))
		for i, id := range ids {
			files[i] = leafFile[id]
		}
		args = append([]string{"verify", "-attime", attime, "-x509_strict"}, args...)
		out, _ := exec.Command(openssl, append(args, files...)...).CombinedOutput()
		// openssl prints, per file, its errors and then "FILE: OK" or
		// "error FILE: verification failed".
		result := map[string]string{}
		var block []string
		for _, line := range strings.Split(string(out), "\n") {
			if f, ok := strings.CutSuffix(line, ": OK"); ok {
				result[f], block = "", nil
				continue
			}
			if f, ok := strings.CutPrefix(line, "error "); ok {
				if f, ok := strings.CutSuffix(f, ": verification failed"); ok {
					result[f], block = strings.Join(block, "\n"), nil
					continue
				}
			}
			block = append(block, line)
		}
		for i, id := range ids {
			got, ok := result[files[i]]
			switch {
			case !ok:
				t.Errorf("%s: %s: openssl %s: no verdict; output:\n%s", what, id, strings.Join(args, " "), out)
			case want == "" && got != "":
				t.Errorf("%s: %s: openssl %s: failed:\n%s", what, id, strings.Join(args, " "), got)
			case want != "" && !strings.Contains(got, want):
				t.Errorf("%s: %s: openssl %s: got %q, want a failure with %q", what, id, strings.Join(args, " "), got, want)
			}
		}
	}

	// OpenSSL's verification errors.
	const (
		verified          = ""
		unknownIssuer     = "error 20 at 0 depth" // X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY
		invalidPurpose    = "error 26 at 0 depth" // X509_V_ERR_INVALID_PURPOSE
		hostnameMismatch  = "error 62 at 0 depth" // X509_V_ERR_HOSTNAME_MISMATCH
		ipAddressMismatch = "error 64 at 0 depth" // X509_V_ERR_IP_ADDRESS_MISMATCH
	)

	// Group the leaves by CA and purpose, so that one openssl run verifies
	// many.
	type group struct {
		ca      Authority
		purpose string
	}
	right := map[group][]string{}
	wrongPurpose := map[group][]string{}
	for _, l := range m.Leaves {
		for _, p := range []struct {
			name string
			has  bool
		}{{"sslserver", l.Server}, {"sslclient", l.Client}} {
			if p.has {
				right[group{l.CA, p.name}] = append(right[group{l.CA, p.name}], l.ID)
			} else {
				wrongPurpose[group{l.CA, p.name}] = append(wrongPurpose[group{l.CA, p.name}], l.ID)
			}
		}
		if !l.Server && !l.Client {
			t.Errorf("%s is neither a server nor a client certificate", l.ID)
		}
	}
	for g, ids := range right {
		expect("right CA", verified, []string{"-CAfile", caFile[g.ca], "-purpose", g.purpose}, ids)
		// The wrong CA: each other CA of the bundle.
		for _, a := range Authorities() {
			if a != g.ca {
				expect("wrong CA "+string(a), unknownIssuer, []string{"-CAfile", caFile[a], "-purpose", g.purpose}, ids)
			}
		}
	}
	// A client certificate is no server certificate, and vice versa.
	for g, ids := range wrongPurpose {
		expect("wrong purpose", invalidPurpose, []string{"-CAfile", caFile[g.ca], "-purpose", g.purpose}, ids)
	}

	// Server certificates cover each name their clients dial.
	names := dialledNames(Flows(m.Cluster))
	type caName struct {
		ca   Authority
		name string
	}
	byName := map[caName][]string{}
	for id, ns := range names {
		for _, n := range ns {
			k := caName{mustLeaf(t, m, id).CA, n}
			byName[k] = append(byName[k], id)
		}
	}
	hostArgs := func(name string) ([]string, string) {
		if net.ParseIP(name) != nil {
			return []string{"-verify_ip", name}, ipAddressMismatch
		}
		return []string{"-verify_hostname", name}, hostnameMismatch
	}
	for k, ids := range byName {
		slices.Sort(ids)
		host, _ := hostArgs(k.name)
		expect("server name "+k.name, verified, append([]string{"-CAfile", caFile[k.ca], "-purpose", "sslserver"}, host...), ids)
	}
	// And not a name they do not carry.
	var servers []string
	for id := range names {
		servers = append(servers, id)
	}
	slices.Sort(servers)
	for _, wrong := range []string{"wrong.example.com", "192.0.2.1"} {
		for _, a := range Authorities() {
			var ids []string
			for _, id := range servers {
				if mustLeaf(t, m, id).CA == a {
					ids = append(ids, id)
				}
			}
			host, mismatch := hostArgs(wrong)
			expect("wrong server name "+wrong, mismatch, append([]string{"-CAfile", caFile[a], "-purpose", "sslserver"}, host...), ids)
		}
	}

	// crypto/x509 agrees.
	for _, l := range m.Leaves {
		for _, u := range []struct {
			usage x509.ExtKeyUsage
			has   bool
		}{{x509.ExtKeyUsageServerAuth, l.Server}, {x509.ExtKeyUsageClientAuth, l.Client}} {
			opts := x509.VerifyOptions{Roots: caPool(b, l.CA), CurrentTime: testVerifyTime, KeyUsages: []x509.ExtKeyUsage{u.usage}}
			_, err := l.X509.Verify(opts)
			if u.has && err != nil {
				t.Errorf("%s: x509 verify for %v: %v", l.ID, u.usage, err)
			}
			if !u.has {
				var inv x509.CertificateInvalidError
				if !errors.As(err, &inv) || inv.Reason != x509.IncompatibleUsage {
					t.Errorf("%s: x509 verify for %v: got %v, want an incompatible-usage error", l.ID, u.usage, err)
				}
			}
			opts.Roots = caPool(b, wrongCAFor(l.CA))
			if _, err := l.X509.Verify(opts); !wrapsErr[x509.UnknownAuthorityError](err) {
				t.Errorf("%s: x509 verify against %s: got %v, want an unknown-authority error", l.ID, wrongCAFor(l.CA), err)
			}
		}
		for _, name := range names[l.ID] {
			opts := x509.VerifyOptions{Roots: caPool(b, l.CA), CurrentTime: testVerifyTime, DNSName: name,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			if _, err := l.X509.Verify(opts); err != nil {
				t.Errorf("%s: x509 verify for %s: %v", l.ID, name, err)
			}
		}
		if l.Server {
			opts := x509.VerifyOptions{Roots: caPool(b, l.CA), CurrentTime: testVerifyTime, DNSName: "wrong.example.com"}
			if _, err := l.X509.Verify(opts); !wrapsErr[x509.HostnameError](err) {
				t.Errorf("%s: x509 verify for wrong.example.com: got %v, want a hostname error", l.ID, err)
			}
		}
		// The key in the PEM is the certificate's.
		if !publicKeysEqual(l.X509.PublicKey, l.Key.Public()) {
			t.Errorf("%s: the key does not belong to the certificate", l.ID)
		}
	}
}
