//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kcompile/kcompile/internal/fixture"
)

// BenchmarkStartup times `kcompile version`, a command that draws
// nothing, each run in a fresh TMPDIR (as on a new machine or in a fresh
// container), against the same command built without pictures: the same
// sources with picture/svg.go, everything that draws an SVG, replaced by
// testdata/nopicture/svg.go (go build -overlay). It reports each build's
// wall and CPU time per run and their ratios; drawing may cost a command
// that draws nothing at most 10% (ratio ≤ 1.10).
func BenchmarkStartup(b *testing.B) {
	dir := b.TempDir()
	withDir, withoutDir := filepath.Join(dir, "with"), filepath.Join(dir, "without")
	for _, d := range []string{withDir, withoutDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	stub, err := filepath.Abs("testdata/nopicture/svg.go")
	if err != nil {
		b.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {fixture.Path("picture/svg.go"): stub}})
	if err != nil {
		b.Fatal(err)
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		b.Fatal(err)
	}
	bins := [2]string{buildKcompile(b, withDir), buildKcompile(b, withoutDir, "-overlay", overlayFile)}
	var wall, cpu [2]time.Duration
	runs := 0
	for b.Loop() {
		// Alternating, so that whatever else the machine does falls on
		// both alike.
		for i := range bins {
			j := (i + runs) % 2
			tmp, err := os.MkdirTemp(dir, "tmp")
			if err != nil {
				b.Fatal(err)
			}
			cmd := exec.Command(bins[j], "version")
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%s version: %v\n%s", bins[j], err, out)
			}
			wall[j] += time.Since(start)
			cpu[j] += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
		runs++
	}
	n := float64(runs)
	b.ReportMetric(float64(wall[0].Nanoseconds())/n, "pictures-ns/run")
	b.ReportMetric(float64(wall[1].Nanoseconds())/n, "nopictures-ns/run")
	b.ReportMetric(float64(cpu[0].Nanoseconds())/n, "pictures-cpu-ns/run")
	b.ReportMetric(float64(cpu[1].Nanoseconds())/n, "nopictures-cpu-ns/run")
	b.ReportMetric(float64(wall[0])/float64(wall[1]), "wall-ratio")
	if cpu[1] > 0 {
		b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "cpu-ratio")
	}
}
