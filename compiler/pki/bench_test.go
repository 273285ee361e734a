package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"
)

// BenchmarkIssueLarge issues the PKI of examples/large (5,005 nodes,
// ECDSA-P256) and, in the same iteration, generates and signs as many
// ECDSA-P256 certificates in a plain loop: the ratio of the two is the
// overhead of deterministic issuance over the cryptography it cannot avoid.
// The target is issue/plain <= 1.5.
func BenchmarkIssueLarge(b *testing.B) {
	c := compileExample(b, "large")
	if c.PKI.KeyAlgorithm != string(ECDSAP256) {
		b.Fatalf("examples/large uses %s, want %s", c.PKI.KeyAlgorithm, ECDSAP256)
	}
	bundle := newTestBundle(b)
	n := len(Catalogue(c))
	ca := bundle.CAs[ClusterCA]
	var issueTime, plainTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		m, err := Issue(c, bundle)
		if err != nil {
			b.Fatal(err)
		}
		issueTime += time.Since(start)
		if len(m.Leaves) != n {
			b.Fatalf("issued %d leaves, want %d", len(m.Leaves), n)
		}

		start = time.Now()
		for j := 0; j < n; j++ {
			key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				b.Fatal(err)
			}
			tmpl := &x509.Certificate{
				SerialNumber: big.NewInt(int64(j + 1)),
				Subject:      pkix.Name{CommonName: "plain"},
				NotBefore:    testEpoch,
				NotAfter:     testEpoch.Add(365 * 24 * time.Hour),
				KeyUsage:     x509.KeyUsageDigitalSignature,
				ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			}
			if _, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key); err != nil {
				b.Fatal(err)
			}
		}
		plainTime += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "certs/op")
	b.ReportMetric(issueTime.Seconds()/float64(b.N), "issue-s/op")
	b.ReportMetric(plainTime.Seconds()/float64(b.N), "plain-s/op")
	b.ReportMetric(issueTime.Seconds()/plainTime.Seconds(), "issue/plain")
}

// BenchmarkRotateLarge computes and proves a rotation of every CA and the
// service-account key of examples/large: the three stages' bundles, the
// PKI stage 2 issues (every leaf re-keyed and signed by the new CAs;
// stage 1's leaves are stage 0's, the end's stage 2's) and the proof of
// each stage against the one before; in the same iteration it issues the
// cluster's PKI plainly. The target is rotate/issue <= 1.5.
func BenchmarkRotateLarge(b *testing.B) {
	c := compileExample(b, "large")
	b0 := newTestBundle(b)
	var rotateTime, issueTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := Issue(c, b0); err != nil {
			b.Fatal(err)
		}
		issueTime += time.Since(start)

		start = time.Now()
		stages := rotateAll(b, b0)
		if _, err := Issue(c, stages[2]); err != nil {
			b.Fatal(err)
		}
		for i := 1; i < len(stages); i++ {
			if err := ProveTransition(c, stages[i-1], stages[i], testEpoch.Add(96*time.Hour), rand.Reader); err != nil {
				b.Fatal(err)
			}
		}
		rotateTime += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(rotateTime.Seconds()/float64(b.N), "rotate-s/op")
	b.ReportMetric(issueTime.Seconds()/float64(b.N), "issue-s/op")
	b.ReportMetric(rotateTime.Seconds()/issueTime.Seconds(), "rotate/issue")
}
