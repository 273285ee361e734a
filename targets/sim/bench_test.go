package sim

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

// BenchmarkSimBootLarge boots examples/large (5,000 workers) and reports
// the time until every node is Ready and the process's peak heap and
// total memory. Goal: under 60 s and 4 GiB on a 2-core machine.
func BenchmarkSimBootLarge(b *testing.B) {
	c, bundle := compile(b, "large")
	quietKlog(b)
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		start := time.Now()
		s, err := Start(ctx, c, bundle, Options{WorkDir: b.TempDir(), Progress: logWriter{b}, Block: testBlock})
		if err != nil {
			b.Fatal(err)
		}
		peak := peakMemory(ctx)
		if err := s.WaitReady(ctx, 8*time.Minute); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "ready-s/op")
		b.ReportMetric(float64(peak())/(1<<30), "peak-GiB")
		s.Stop()
		cancel()
	}
}

// peakMemory samples the memory the Go runtime holds from the OS until
// ctx ends or the returned function is called, and returns the peak.
func peakMemory(ctx context.Context) func() uint64 {
	var peak uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(stop)
		<-done
		runtime.GC()
		return peak
	}
}

// logWriter passes progress lines to the benchmark's log.
type logWriter struct{ b *testing.B }

func (w logWriter) Write(p []byte) (int, error) {
	w.b.Logf("%s %s", time.Now().Format(time.TimeOnly), p)
	return len(p), nil
}

// quietKlog sends the components' logs to a file, as kcompile sim
// does: 5,000 nodes' worth of them would drown the benchmark's result.
func quietKlog(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "sim.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	if err := LogTo(f); err != nil {
		b.Fatal(err)
	}
}
