package pki

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/layout"
)

// rotationStages are a full rotation of every CA and the
// service-account key from the test bundle: stage 0 (none), 1, 2 and
// the end.
func rotationStages(t testing.TB) []*Bundle {
	t.Helper()
	return rotateAll(t, newTestBundle(t))
}

// rotateAll rotates every CA and the service-account key of b0: a day
// after the test epoch, stage 2 a day later, the end a day after that.
func rotateAll(t testing.TB, b0 *Bundle) []*Bundle {
	t.Helper()
	b1, err := b0.Rotate(bytes.NewReader(bytes.Repeat([]byte{7}, 32)), testEpoch.Add(24*time.Hour),
		RotateOptions{Authorities: Authorities(), ServiceAccount: true})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := b1.Advance(testEpoch.Add(48 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	b3, err := b2.Advance(testEpoch.Add(72 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return []*Bundle{b0, b1, b2, b3}
}

// Each stage of a rotation keeps every flow of the cluster working with
// the stage before: real handshakes both ways round, and tokens.
func TestRotationStagesProve(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	stages := rotationStages(t)
	now := testEpoch.Add(96 * time.Hour)
	for i := 1; i < len(stages); i++ {
		if err := ProveTransition(c, stages[i-1], stages[i], now, rand.Reader); err != nil {
			t.Errorf("stage %d → %d: %v", i-1, i, err)
		}
	}
	if got := []int{stages[0].Stage(), stages[1].Stage(), stages[2].Stage(), stages[3].Stage()}; got[1] != 1 || got[2] != 2 || got[0] != 0 || got[3] != 0 {
		t.Errorf("stages %v", got)
	}
	// At the end the old CAs sign nothing and are trusted nowhere.
	for _, a := range Authorities() {
		if stages[3].CAs[a].Cert.Equal(stages[0].CAs[a].Cert) || len(stages[3].Trusted(a)) != 1 {
			t.Errorf("%s after the rotation: %d trusted, the old one kept: %t", a, len(stages[3].Trusted(a)), stages[3].CAs[a].Cert.Equal(stages[0].CAs[a].Cert))
		}
	}
}

// Skipping a stage is refused, naming the first flow it breaks: leaves
// of the new CA before every trust store has it (0 → 2), or the old CA
// dropped while leaves are still the old one's (1 → end).
func TestRotationSkippingAStageBreaksAFlow(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	stages := rotationStages(t)
	now := testEpoch.Add(96 * time.Hour)
	for _, skip := range [][2]int{{0, 2}, {1, 3}, {0, 3}} {
		err := ProveTransition(c, stages[skip[0]], stages[skip[1]], now, rand.Reader)
		var broken *BrokenFlow
		if !errors.As(err, &broken) {
			t.Errorf("stage %d → %d: %v, want a broken flow", skip[0], skip[1], err)
			continue
		}
		// Flows' first flow is a kubelet's to an API server.
		if broken.Flow.Kind != "kubelet→apiserver" || !strings.Contains(err.Error(), "unknown authority") {
			t.Errorf("stage %d → %d: %v", skip[0], skip[1], err)
		}
	}
	// Only the service-account key rotating, skipped: tokens break.
	b1, err := stages[0].Rotate(bytes.NewReader(bytes.Repeat([]byte{9}, 32)), testEpoch.Add(time.Hour), RotateOptions{ServiceAccount: true})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := b1.Advance(testEpoch.Add(2 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var broken *BrokenFlow
	if err := ProveTransition(c, stages[0], b2, now, rand.Reader); !errors.As(err, &broken) || broken.Flow.Kind != "service-account-token" {
		t.Errorf("a token key rotation skipping stage 1: %v", err)
	}
}

// A stage's files: each CA file holds the authority's trust store, the
// signer first, and chains of every leaf verify; the controller-manager's
// signing certificate is the signer alone, a key pair with ca.key (its
// CSR signer refuses a file of two); sa.pub holds both public keys while
// the key rotates.
func TestRotationFiles(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	for i, b := range rotationStages(t) {
		m, err := Issue(c, b)
		if err != nil {
			t.Fatal(err)
		}
		files, err := Files(m)
		if err != nil {
			t.Fatal(err)
		}
		get := func(path string) []byte {
			for _, f := range files {
				if f.Node == "cp1" && f.Path == path {
					return f.Data
				}
			}
			t.Fatalf("stage %d: cp1 has no %s", i, path)
			return nil
		}
		want := 1
		if b.Stage() > 0 {
			want = 2
		}
		if n := bytes.Count(get(layout.ClusterCACert), []byte("BEGIN CERTIFICATE")); n != want {
			t.Errorf("stage %d: ca.crt holds %d certificates, want %d", i, n, want)
		}
		if n := bytes.Count(get(layout.ServiceAccountPubKey), []byte("BEGIN PUBLIC KEY")); n != want {
			t.Errorf("stage %d: sa.pub holds %d keys, want %d", i, n, want)
		}
		if n := bytes.Count(get(layout.ClusterSigningCACert), []byte("BEGIN CERTIFICATE")); n != 1 {
			t.Errorf("stage %d: the controller-manager's signing certificate file holds %d certificates, want 1", i, n)
		}
		pair, err := tls.X509KeyPair(get(layout.ClusterSigningCACert), get(layout.ClusterCAKey))
		if err != nil {
			t.Errorf("stage %d: cluster-signing-ca.crt and ca.key: %v", i, err)
			continue
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(get(layout.ClusterCACert))
		block, _ := pem.Decode(get(layout.CertFile(layout.APIServerStem)))
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: testEpoch.Add(96 * time.Hour)}); err != nil {
			t.Errorf("stage %d: the API server's certificate: %v", i, err)
		}
		signer, _ := x509.ParseCertificate(pair.Certificate[0])
		if !bytes.Equal(leaf.RawIssuer, signer.RawSubject) || leaf.CheckSignatureFrom(signer) != nil {
			t.Errorf("stage %d: the API server's certificate is not signed by the signing certificate", i)
		}
	}
}

// A rotating bundle is written and read back as it was, and rotations
// are deterministic: the same bundle, clock and seed give the same
// bytes.
func TestRotationRoundTrip(t *testing.T) {
	a, b := rotationStages(t), rotationStages(t)
	for i := range a {
		da, err := a[i].Marshal()
		if err != nil {
			t.Fatal(err)
		}
		db, err := b[i].Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(da, db) {
			t.Errorf("stage %d: two rotations from the same inputs differ", i)
		}
		back, err := Parse(da)
		if err != nil {
			t.Fatalf("stage %d: %v", i, err)
		}
		again, err := back.Marshal()
		if err != nil || !bytes.Equal(again, da) {
			t.Errorf("stage %d: read back and written again, the bundle differs (%v)", i, err)
		}
		if back.Stage() != a[i].Stage() || strings.Join(back.Rotating(), ",") != strings.Join(a[i].Rotating(), ",") {
			t.Errorf("stage %d read back as stage %d of %v", i, back.Stage(), back.Rotating())
		}
	}
	// A rotation cannot start over one under way, nor go on from none.
	if _, err := a[1].Rotate(rand.Reader, testEpoch, RotateOptions{ServiceAccount: true}); err == nil || !strings.Contains(err.Error(), "stage 1") {
		t.Errorf("a rotation over one at stage 1: %v", err)
	}
	if _, err := a[0].Advance(testEpoch); err == nil {
		t.Error("a bundle without a rotation advanced")
	}
	// A damaged rotation is refused.
	data, _ := a[1].Marshal()
	for _, bad := range []struct{ from, to, want string }{
		{`"stage": 1`, `"stage": 4`, "stage 4"},
		{`"nextSeed"`, `"nextSeedX"`, "unknown field"},
	} {
		if _, err := Parse(bytes.Replace(data, []byte(bad.from), []byte(bad.to), 1)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s → %s: %v, want %q", bad.from, bad.to, err, bad.want)
		}
	}
}
