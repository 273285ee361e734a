package review

import (
	"bytes"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/targets"
)

func TestGoldenUpdateCompareAndStale(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "golden")
	tree := targets.NewTree()
	tree.Add("nodes/a/etc/x.conf", []byte("one\ntwo\n"), 0o644)
	tree.Add("cluster/y.yaml", []byte("y\n"), 0o644)
	if _, err := Golden(dir, tree, true); err != nil {
		t.Fatal(err)
	}
	if d, err := Golden(dir, tree, false); err != nil || d != "" {
		t.Fatalf("fresh golden differs: %v\n%s", err, d)
	}
	// Drift: a changed file, a new file, a file gone.
	changed := targets.NewTree()
	changed.Add("nodes/a/etc/x.conf", []byte("one\nTWO\n"), 0o644)
	changed.Add("nodes/b/new", []byte("n\n"), 0o644)
	d, err := Golden(dir, changed, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--- a/nodes/a/etc/x.conf\n+++ b/nodes/a/etc/x.conf\n", "-two\n+TWO\n",
		"--- /dev/null\n+++ b/nodes/b/new\n", "--- a/cluster/y.yaml\n+++ /dev/null\n"} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q:\n%s", want, d)
		}
	}
	// Update removes stale files and their empty directories.
	if _, err := Golden(dir, changed, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cluster")); !os.IsNotExist(err) {
		t.Errorf("stale directory kept: %v", err)
	}
	if d, _ := Golden(dir, changed, false); d != "" {
		t.Errorf("updated golden differs:\n%s", d)
	}
}

func TestCertSummaryInGolden(t *testing.T) {
	b, err := pki.New(bytes.NewReader(make([]byte, 32)), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		pki.NewOptions{Algorithm: pki.ECDSAP256, CAValidity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.CAs[pki.ClusterCA].Cert.Raw})
	tree := targets.NewTree()
	tree.Add("nodes/a/etc/kubernetes/pki/ca.crt", ca, 0o644)
	dir := t.TempDir()
	if _, err := Golden(dir, tree, true); err != nil {
		t.Fatal(err)
	}
	s, err := os.ReadFile(filepath.Join(dir, "nodes/a/etc/kubernetes/pki/ca.crt"+SummarySuffix))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"subject: CN=kubernetes\n", "valid: 2026-01-01T00:00:00Z to 2026-01-02T00:00:00Z\n", "key: ECDSA-P256\n", "ca: true\n", "usages: digital signature, cert sign, CRL sign\n"} {
		if !strings.Contains(string(s), want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	if _, err := CertSummary([]byte("junk")); err == nil {
		t.Error("junk summarised")
	}
}
