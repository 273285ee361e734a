package pki

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
)

// testSeed is the fixed seed of the test bundle: 32 bytes that look
// random, so that a leak of them cannot be mistaken for anything else.
var testSeed = func() []byte {
	sum := sha256.Sum256([]byte("kcompile pki test seed"))
	return sum[:]
}()

// testEpoch is the test bundle's creation time and first epoch.
var testEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newTestBundle creates the fixed test bundle: ECDSA-P256 CAs valid ten
// years from 2026-01-01, derived from testSeed.
func newTestBundle(t testing.TB) *Bundle {
	t.Helper()
	if len(testSeed) != 32 {
		t.Fatalf("test seed is %d bytes, want 32", len(testSeed))
	}
	b, err := New(bytes.NewReader(testSeed), testEpoch, NewOptions{Algorithm: ECDSAP256, CAValidity: 10 * 365 * 24 * time.Hour})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

var (
	clusterMu    sync.Mutex
	clusterCache = map[string]*ir.Cluster{}
)

// compileDir compiles a spec directory and fails the test on errors.
func compileDir(t testing.TB, dir string) *ir.Cluster {
	t.Helper()
	c, diags := compiler.Compile(compiler.Source{Dir: dir})
	if diags.HasErrors() || c == nil {
		t.Fatalf("compiling %s: %v", dir, diags)
	}
	return c
}

// compileExample compiles examples/<name> once per test binary. Callers
// must not modify the returned cluster.
func compileExample(t testing.TB, name string) *ir.Cluster {
	t.Helper()
	clusterMu.Lock()
	defer clusterMu.Unlock()
	if c, ok := clusterCache[name]; ok {
		return c
	}
	c := compileDir(t, filepath.Join("..", "..", "examples", name))
	clusterCache[name] = c
	return c
}

// copyExample copies examples/<name>'s files into a temporary directory
// and adds extra files, so that a variant of an example can be compiled.
func copyExample(t testing.TB, name string, extra map[string]string) string {
	t.Helper()
	src := filepath.Join("..", "..", "examples", name)
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range extra {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// issueExample issues the test bundle's PKI for an example.
func issueExample(t testing.TB, name string) *Material {
	t.Helper()
	m, err := Issue(compileExample(t, name), newTestBundle(t))
	if err != nil {
		t.Fatalf("Issue(%s): %v", name, err)
	}
	return m
}

// mustLeaf finds an issued leaf or fails.
func mustLeaf(t testing.TB, m *Material, id string) Issued {
	t.Helper()
	l, ok := m.Leaf(id)
	if !ok {
		t.Fatalf("no leaf %q in the material", id)
	}
	return l
}

// tlsCert is an issued leaf as a tls.Certificate.
func tlsCert(t testing.TB, l Issued) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatalf("%s: X509KeyPair: %v", l.ID, err)
	}
	return c
}

// caPool is a pool holding one CA of the bundle.
func caPool(b *Bundle, a Authority) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(b.CAs[a].Cert)
	return p
}
