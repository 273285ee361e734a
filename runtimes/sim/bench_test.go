package sim

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
)

// BenchmarkSimBootLarge boots examples/large (5 API servers, 5 etcd
// members, 5,000 workers). Goals: Ready in 0.8× KWOK's time for the same
// workers, at most 2.5 GiB.
func BenchmarkSimBootLarge(b *testing.B) {
	c, bundle := compile(b, "large")
	bootBench(b, "large", c, bundle)
}

// BenchmarkSimBootXLarge boots examples/xlarge: one control-plane node
// and 10,000 workers. Goals: Ready in under 60 s, under 4 GiB.
func BenchmarkSimBootXLarge(b *testing.B) {
	c, bundle := compile(b, "xlarge")
	bootBench(b, "xlarge", c, bundle)
}

// BenchmarkSimBootOneControlPlane boots the first 1,000 and 5,000
// workers of examples/xlarge behind its one control-plane node: the
// shape BenchmarkKWOK compares with.
func BenchmarkSimBootOneControlPlane(b *testing.B) {
	c, bundle := compile(b, "xlarge")
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			bootBench(b, fmt.Sprintf("xlarge-%d", n), firstWorkers(c, n), bundle)
		})
	}
}

// firstWorkers is c with its control-plane nodes and its first n
// workers.
func firstWorkers(c *ir.Cluster, n int) *ir.Cluster {
	out := *c
	out.Nodes = nil
	for _, node := range c.Nodes {
		if node.Role == ir.RoleWorker {
			if n == 0 {
				continue
			}
			n--
		}
		out.Nodes = append(out.Nodes, node)
	}
	return &out
}

// bootBench boots c until every node is Ready and stops it, and reports
// the time to Ready, the preparation before etcd started, the time Stop
// took and the process's peak resident memory. With
// KCOMPILE_SIM_HEAPPROFILE=DIR it writes the heap profile at Ready to
// DIR/<name>.heap.pprof.
func bootBench(b *testing.B, name string, c *ir.Cluster, bundle *pki.Bundle) {
	quietKlog(b)
	for b.Loop() {
		ready := func(ctx context.Context, s *Sim) error { return s.WaitReady(ctx, 8*time.Minute) }
		if os.Getenv(readyByWatch) != "" {
			ready = watchReady
		}
		r := bootSim(b, name, c, bundle, ready)
		b.ReportMetric(r.ready.Seconds(), "ready-s/op")
		b.ReportMetric(r.prep.Seconds(), "prep-s/op")
		b.ReportMetric(r.stop.Seconds(), "stop-s/op")
		b.ReportMetric(float64(r.peak)/(1<<30), "peak-GiB")
	}
}

// simRun is what one boot of a simulation measured.
type simRun struct {
	ready, prep, stop time.Duration
	peak              uint64
}

// bootSim starts c, waits for ready, stops it and measures.
func bootSim(b *testing.B, name string, c *ir.Cluster, bundle *pki.Bundle, ready func(context.Context, *Sim) error) simRun {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The memory a previous run freed goes back to the system first, so
	// that each run's peak is its own.
	debug.FreeOSMemory()
	self := os.Getpid()
	peak := sampleRSS(func() []int { return []int{self} })
	start := time.Now()
	s, err := Start(ctx, c, bundle, Options{WorkDir: b.TempDir(), Progress: logWriter{b}, Block: testBlock})
	if err != nil {
		b.Fatal(err)
	}
	if err := ready(ctx, s); err != nil {
		s.Stop()
		b.Fatal(err)
	}
	r := simRun{ready: time.Since(start), prep: s.Prepared()}
	if dir := os.Getenv("KCOMPILE_SIM_HEAPPROFILE"); dir != "" {
		writeHeapProfile(b, filepath.Join(dir, name+".heap.pprof"))
	}
	stopStart := time.Now()
	s.Stop()
	r.stop = time.Since(stopStart)
	r.peak = peak()
	return r
}

func writeHeapProfile(b *testing.B, path string) {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// sampleRSS sums the resident memory of the processes pids lists every
// 100 ms until the returned function is called, which returns the
// largest sum. The simulation and KWOK's processes are measured alike.
func sampleRSS(pids func() []int) (peak func() uint64) {
	stop := make(chan struct{})
	done := make(chan uint64)
	go func() {
		var peakSum uint64
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			var sum uint64
			for _, pid := range pids() {
				// A process that just exited has no status: it holds
				// no memory.
				rss, _ := procStatus(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
				sum += rss
			}
			peakSum = max(peakSum, sum)
			select {
			case <-stop:
				done <- peakSum
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(stop)
		return <-done
	}
}

// procStatus reads a "kB" field of a /proc/PID/status file, in bytes.
func procStatus(path, field string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no %s", path, field)
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

// BenchmarkSimPrepare issues the PKI and lays out the trees of the first
// 5,000 workers of examples/xlarge behind its control-plane node: what
// Start does before etcd starts. Goal: at most 2 s.
func BenchmarkSimPrepare(b *testing.B) {
	c, bundle := compile(b, "xlarge")
	c = firstWorkers(c, 5000)
	for b.Loop() {
		if _, err := prepare(c, bundle, Options{WorkDir: b.TempDir(), Block: testBlock}); err != nil {
			b.Fatal(err)
		}
	}
}
