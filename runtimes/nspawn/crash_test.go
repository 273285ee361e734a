package nspawn

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/detach"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/pipeline"
)

// upChildSpec and upChildWork make the test binary a `kcompile up` of
// its own (TestMain), which TestUpCrash kills as a user's kill -9 or a
// dropped SSH session would.
const (
	upChildSpec  = "KCOMPILE_TEST_UP_SPEC"
	upChildWork  = "KCOMPILE_TEST_UP_WORK"
	upChildCache = "KCOMPILE_TEST_UP_CACHE"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(upChildSpec); spec != "" {
		cache := os.Getenv(upChildCache)
		if cache == "" {
			cache = "/var/cache/kcompile"
		}
		os.Exit(upChild(spec, os.Getenv(upChildWork), cache))
	}
	if addr := os.Getenv(listenChild); addr != "" {
		os.Exit(listenUntilEOF(addr))
	}
	if addr := os.Getenv(serveChild); addr != "" {
		os.Exit(serveUntilEOF(addr))
	}
	sweepKilledRuns()
	os.Exit(m.Run())
}

// sweepKilledRuns downs the clusters of earlier runs of these tests that
// were killed (kill -9 of go test, a timeout's panic) before their
// cleanups ran: their bridges hold node networks the tests share, and
// every boot test would stop at up's preflight. Only a cluster whose
// work directory is a test's temporary directory and whose up is gone
// is taken, by its journal as `kcompile down` would.
func sweepKilledRuns() {
	bridges, err := preflight{}.upBridges(context.Background())
	if err != nil {
		return
	}
	for _, work := range bridges {
		rel, err := filepath.Rel(os.TempDir(), work)
		if err != nil || !strings.HasPrefix(rel, "Test") {
			continue
		}
		if s, err := ReadState(work); err != nil || s.Owner.alive() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err = Down(ctx, work, io.Discard)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "the cluster of a killed test run in %s: %v\n", work, err)
			continue
		}
		fmt.Fprintf(os.Stderr, "removed the cluster of a killed test run in %s\n", work)
	}
}

// upChild boots the spec as kcompile up does and runs it until a signal,
// saying what went wrong on stderr and exiting 1 then.
func upChild(spec, work, cache string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	b, err := pki.New(rand.Reader, time.Now(), pki.NewOptions{Algorithm: pki.ECDSAP256, CAValidity: 10 * 365 * 24 * time.Hour})
	if err != nil {
		return fail(err)
	}
	out, err := pipeline.Run(pipeline.Input{Source: compiler.Source{Dir: spec}, Bundle: b, Now: time.Now(), Targets: []pipeline.Target{pipeline.Systemd}})
	if err != nil {
		return fail(err)
	}
	if out.Diagnostics.HasErrors() {
		return fail(fmt.Errorf("%v", out.Diagnostics))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := Up(ctx, Config{
		Cluster: out.Cluster, Systemd: out.Trees[pipeline.Systemd], Target: pipeline.Systemd, Work: work,
		Cache: cache, Binaries: fixture.Path(".bin/node"), Images: fixture.Path(".bin/images"),
		Version: "test", Log: os.Stderr, Now: time.Now,
	})
	if err != nil {
		return fail(err)
	}
	if detach.Child() {
		fmt.Printf("cluster %s is up\n", out.Cluster.Name)
		if err := detach.Ready(filepath.Join(work, "control", "up.log")); err != nil {
			return fail(err)
		}
	}
	_ = c.Wait(ctx)
	dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Down(dctx); err != nil {
		return fail(err)
	}
	return 0
}

// lockedBuffer is a buffer several goroutines write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// child is a running upChild.
type child struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan error
}

func startUp(t *testing.T, spec, work string, env ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$"), done: make(chan error, 1)}
	c.cmd.Env = append(append(os.Environ(), upChildSpec+"="+spec, upChildWork+"="+work), env...)
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("the up of pid %d said:\n%s", c.cmd.Process.Pid, tail(c.stderr.Bytes(), 3000))
		}
	})
	return c
}

// killMidBoot waits until a machine of c runs, then kills c as kill -9
// does, and returns the journal it left.
func killMidBoot(t *testing.T, c *child, work string) *State {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if s, err := ReadState(work); err == nil && s.Owner.PID == c.cmd.Process.Pid {
			for _, r := range s.Resources {
				if r.Kind == KindProcess && r.alive() {
					if err := c.cmd.Process.Kill(); err != nil {
						t.Fatal(err)
					}
					<-c.done
					s, err := ReadState(work)
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
			}
		}
		select {
		case err := <-c.done:
			t.Fatalf("up ended before its machines started: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no machine started within 3 minutes")
		}
	}
}

// crash is what users do to an up of the spec before it boots for them:
// two ups of one work directory at once, one of them killed mid-boot
// with its machines running; the next up names what it left and touches
// nothing; down removes it all; and another is killed mid-boot, for the
// caller to boot with --recover.
func crash(t *testing.T, out *pipeline.Output, spec, work string) {
	t.Helper()
	p, err := newPlan(out.Cluster, work)
	if err != nil {
		t.Fatal(err)
	}
	host := readHost(t)
	// Whatever fails below, what the killed ups left goes.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := Down(ctx, work, nil); err != nil && !strings.Contains(err.Error(), "no kcompile up ran there") {
			t.Errorf("down: %v", err)
		}
		assertNothingLeft(t, p, work, host)
	})

	// Two at once: exactly one runs; the other exits 1 naming it.
	a, b := startUp(t, spec, work), startUp(t, spec, work)
	var loser, winner *child
	select {
	case err := <-a.done:
		loser, winner = a, b
		a.done <- err
	case err := <-b.done:
		loser, winner = b, a
		b.done <- err
	case <-time.After(2 * time.Minute):
		t.Fatal("neither of two ups of one work directory gave way")
	}
	<-loser.done
	if code := loser.cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("the second up exited %d, want 1", code)
	}
	if msg := loser.stderr.String(); !strings.Contains(msg, "holds the work directory "+work) || !strings.Contains(msg, "pid "+strconv.Itoa(winner.cmd.Process.Pid)) {
		t.Errorf("the second up does not name the first (pid %d):\n%s", winner.cmd.Process.Pid, msg)
	}

	// Killed mid-boot: its machines keep running, orphaned.
	left := killMidBoot(t, winner, work)
	if l := left.leftovers(work); len(l) == 0 || !strings.Contains(l[0], "machines still running") {
		t.Fatalf("after a kill -9 the journal names %q, want running machines first", l)
	}

	// The next up names what was left and changes nothing.
	binaries, programs := bootInputs(t)
	before, err := os.ReadFile(filepath.Join(work, StateName))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Up(t.Context(), Config{
		Cluster: out.Cluster, Systemd: out.Trees[pipeline.Systemd], Target: pipeline.Systemd, Work: work,
		Cache: "/var/cache/kcompile", Binaries: binaries, Images: programs, Version: "test", Now: time.Now,
	})
	if err == nil {
		t.Fatal("up took over the leftovers of a killed up without --recover")
	}
	for _, want := range []string{"pid " + strconv.Itoa(winner.cmd.Process.Pid), "ended without stopping it", "machines still running", "kcompile up --recover", "kcompile down --work " + work} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
	if after, err := os.ReadFile(filepath.Join(work, StateName)); err != nil || !bytes.Equal(before, after) {
		t.Errorf("a refused up changed the journal (%v)", err)
	}

	// down removes everything the killed up made.
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := Down(ctx, work, &log); err != nil {
		t.Fatalf("down after a kill -9: %v\n%s", err, log.String())
	}
	assertNothingLeft(t, p, work, host)
	if _, err := os.Stat(work); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the work directory up made survived down: %v", err)
	}

	// Another, detached as up --detach does, killed once its cluster is
	// up, for the caller's --recover.
	// Its stdout and stderr are relayed by two goroutines.
	var said lockedBuffer
	ctx, cancel = context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pid, err := detach.Start(ctx, os.Args[0], []string{os.Args[0], "-test.run=^$"}, append(os.Environ(), upChildSpec+"="+spec, upChildWork+"="+work), &said, &said)
	if err != nil {
		t.Fatalf("the detached up: %v\n%s", err, said.String())
	}
	if !strings.Contains(said.String(), "cluster lab is up") {
		t.Errorf("the detached up said, before it went on in the background:\n%s", said.String())
	}
	ctl, err := Dial(work)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := ctl.Status(t.Context()); err != nil || len(st.Nodes) != 1 || st.Nodes[0].State != "running" {
		t.Fatalf("the detached up's status: %+v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(work, "control", "up.log")); err != nil {
		t.Errorf("the detached up has no log: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The test is its parent (up's command exits instead): reap it.
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	s, err := ReadState(work)
	if err != nil {
		t.Fatal(err)
	}
	if l := s.leftovers(work); len(l) == 0 || !strings.Contains(l[0], "machines still running") {
		t.Fatalf("after a kill -9 of an up whose cluster was up, the journal names %q", l)
	}
}

// TestUpStopsWhileTheImageIsBuilt: SIGTERM while debootstrap builds the
// base image ends up within 5 s, with the partial image and everything
// else it made removed.
func TestUpStopsWhileTheImageIsBuilt(t *testing.T) {
	bootInputs(t)
	spec := fixture.Path("examples/single-node")
	cache, work := t.TempDir(), filepath.Join(t.TempDir(), "work")
	out := compileFor(t, spec, pipeline.Systemd)
	p, err := newPlan(out.Cluster, work)
	if err != nil {
		t.Fatal(err)
	}
	host := readHost(t)
	up := startUp(t, spec, work, upChildCache+"="+cache)
	building := func() []string {
		var pids []string
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range procs {
			if data, err := os.ReadFile(f); err == nil && strings.Contains(string(data), cache) {
				pids = append(pids, filepath.Base(filepath.Dir(f)))
			}
		}
		return pids
	}
	eventually(t, 2*time.Minute, "debootstrap building the image", func() error {
		select {
		case err := <-up.done:
			t.Fatalf("up ended before it built the image: %v", err)
		default:
		}
		if len(building()) == 0 {
			return errors.New("no process builds in the cache yet")
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	sent := time.Now()
	if err := up.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-up.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("up still runs 5 s after SIGTERM")
	}
	t.Logf("up ended %.1fs after SIGTERM", time.Since(sent).Seconds())
	if msg := up.stderr.String(); up.cmd.ProcessState.ExitCode() != 1 || !strings.Contains(msg, "the partial image was removed") {
		t.Errorf("up exited %d saying:\n%s", up.cmd.ProcessState.ExitCode(), msg)
	}
	if pids := building(); len(pids) > 0 {
		t.Errorf("processes of the build still run: %v", pids)
	}
	entries, _ := os.ReadDir(filepath.Join(cache, "images"))
	for _, e := range entries {
		t.Errorf("the cache holds %s after an interrupted build", e.Name())
	}
	assertNothingLeft(t, p, work, host)
}
