package systemd

import (
	"bytes"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/internal/writer"
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
		if _, err := writer.Write(dir+"/out", tree, writer.Options{}); err != nil {
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
		if _, err := writer.Write(dir+"/plain", plain, writer.Options{}); err != nil {
			b.Fatal(err)
		}
		floor += nowSeconds() - start
	}
	b.ReportMetric(build/float64(b.N), "build-s/op")
	b.ReportMetric(floor/float64(b.N), "floor-s/op")
	b.ReportMetric(build/floor, "build/floor")
}

func nowSeconds() float64 { return float64(time.Now().UnixNano()) / 1e9 }
