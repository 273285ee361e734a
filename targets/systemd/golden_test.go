package systemd

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/review"
	"github.com/kcompile/kcompile/targets"
)

func buildExample(t testing.TB, name string) *targets.Tree {
	t.Helper()
	tree, err := Build(fixture.Material(t, name, nil), Options{})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tree
}

// TestGolden compares every example's systemd tree with golden/<example>/
// systemd; KCOMPILE_UPDATE=1 rewrites them and deletes stale files.
func TestGolden(t *testing.T) {
	update := os.Getenv("KCOMPILE_UPDATE") != ""
	for _, name := range fixture.Examples() {
		d, err := review.Golden(fixture.Path("golden/"+name+"/systemd"), buildExample(t, name), update)
		if err != nil {
			t.Fatal(err)
		}
		if d != "" {
			t.Errorf("%s: the systemd tree differs from golden/%s/systemd (KCOMPILE_UPDATE=1 go test ./targets/systemd rewrites it):\n%s", name, name, d)
		}
	}
}

func TestBuildsAreByteIdentical(t *testing.T) {
	a, b := buildExample(t, "ha-stacked").Files(), buildExample(t, "ha-stacked").Files()
	if len(a) != len(b) {
		t.Fatalf("%d files, then %d", len(a), len(b))
	}
	for i := range a {
		if a[i].Path != b[i].Path || !bytes.Equal(a[i].Data, b[i].Data) || a[i].Mode != b[i].Mode {
			t.Errorf("%s differs between two builds", a[i].Path)
		}
	}
}

// BenchmarkBuildLarge measures the whole systemd build of examples/large
// (5,005 nodes) against what it cannot avoid: issuing its certificates and
// writing the same number of files and bytes. It reports the ratio.
func BenchmarkBuildLarge(b *testing.B) {
	c := compileExample(b, "large")
	bundle := fixture.Bundle(b)
	var build, floor float64
	for b.Loop() {
		dir := b.TempDir()
		start := nowSeconds()
		m, err := pki.Issue(c, bundle)
		if err != nil {
			b.Fatal(err)
		}
		tree, err := Build(m, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := targets.Write(dir+"/out", tree, targets.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
		build += nowSeconds() - start

		// The floor: the same certificates, and the same files and bytes
		// written without rendering anything.
		start = nowSeconds()
		if _, err := pki.Issue(c, bundle); err != nil {
			b.Fatal(err)
		}
		plain := targets.NewTree()
		for _, f := range tree.Files() {
			plain.Add(f.Path, f.Data, f.Mode)
		}
		if _, err := targets.Write(dir+"/plain", plain, targets.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
		floor += nowSeconds() - start
	}
	b.ReportMetric(build/float64(b.N), "build-s/op")
	b.ReportMetric(floor/float64(b.N), "floor-s/op")
	b.ReportMetric(build/floor, "build/floor")
}

func nowSeconds() float64 { return float64(time.Now().UnixNano()) / 1e9 }
