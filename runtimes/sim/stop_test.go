package sim

import (
	"bytes"
	"context"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
)

// TestSimStopLeavesNothing boots examples/single-node and stops it,
// twice. Stop must take at most 3 s and leave no listener on the
// cluster's addresses, no goroutine of the simulation and no HTTP
// connection of either end. What Kubernetes' components leave behind
// when they run in a process that goes on is bounded: the
// controller-manager never shuts down the work queues of its controllers
// (two goroutines each), client-go never stops the watcher of a client
// certificate read from a file (the API server's kubelet client), and
// the API server never closes its audit log; a second boot may add that
// much and no more.
func TestSimStopLeavesNothing(t *testing.T) {
	c, b := compile(t, "single-node")
	boot := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var progress strings.Builder
		s, err := Start(ctx, c, b, Options{WorkDir: t.TempDir(), Progress: &progress, Block: testBlock})
		if err != nil {
			t.Fatalf("%v\n%s", err, progress.String())
		}
		if err := s.WaitReady(ctx, 3*time.Minute); err != nil {
			s.Stop()
			t.Fatalf("%v\n%s", err, progress.String())
		}
		start := time.Now()
		s.Stop()
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("Stop took %s", took.Round(time.Millisecond))
		}
		for _, n := range s.cluster.Nodes {
			addrs := []string{net.JoinHostPort(s.addrs.Nodes[n.Name].String(), strconv.Itoa(c.Kubernetes.APIServerPort))}
			if n.Runs(ir.ComponentEtcd) {
				addrs = append(addrs, net.JoinHostPort(s.addrs.Nodes[n.Name].String(), "2379"), net.JoinHostPort(s.addrs.Nodes[n.Name].String(), "2380"))
			}
			addrs = append(addrs, net.JoinHostPort(s.addrs.Endpoint.String(), strconv.Itoa(c.Endpoint.Port)))
			for _, a := range addrs {
				if conn, err := net.DialTimeout("tcp", a, time.Second); err == nil {
					conn.Close()
					t.Errorf("%s still listens after Stop", a)
				}
			}
		}
	}
	boot()
	goroutines1, files1 := settle(t)
	boot()
	goroutines2, files2 := settle(t)
	if goroutines2-goroutines1 > upstreamGoroutines || files2-files1 > upstreamFiles {
		t.Errorf("a second boot and stop left %d goroutines and %d open files more (the components' own leftovers are at most %d and %d)",
			goroutines2-goroutines1, files2-files1, upstreamGoroutines, upstreamFiles)
	}
	var dump bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&dump, 2); err != nil {
		t.Fatal(err)
	}
	for _, g := range strings.Split(dump.String(), "\n\n") {
		ours := strings.Contains(g, "kcompile/runtimes/sim.") && !strings.Contains(g, "TestSimStopLeavesNothing")
		conn := strings.Contains(g, "net/http.(*persistConn)") || strings.Contains(g, "net/http.(*conn).serve") ||
			strings.Contains(g, "http2ClientConn") || strings.Contains(g, "http2.(*ClientConn)") || strings.Contains(g, "http2serverConn")
		if ours || conn {
			t.Errorf("a goroutine outlived Stop:\n%s", g)
		}
	}
	if t.Failed() {
		t.Logf("goroutines:\n%s", dump.String())
	}
}

// The leftovers of one start of single-node's components (see
// TestSimStopLeavesNothing): about 40 goroutines, one file.
const (
	upstreamGoroutines = 64
	upstreamFiles      = 1
)

// settle waits for goroutines that are ending to end, and counts the
// process's goroutines and open files.
func settle(t *testing.T) (goroutines, files int) {
	t.Helper()
	// Counted when the number has not changed for a second (or after
	// half a minute).
	for stable, tries := 0, 0; stable < 10 && tries < 300; tries++ {
		runtime.GC()
		time.Sleep(100 * time.Millisecond)
		n := runtime.NumGoroutine()
		if n == goroutines {
			stable++
		} else {
			goroutines, stable = n, 0
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return goroutines, len(fds)
}
