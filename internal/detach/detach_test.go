package detach

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary is the child when behave names what it does.
const behave = "DETACH_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(behave) {
	case "":
		os.Exit(m.Run())
	case "ready":
		fmt.Println("booting")
		fmt.Fprintln(os.Stderr, "a warning")
		if err := Ready(os.Getenv("DETACH_TEST_LOG")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		// Now in the log, not the parent's output; the session is the
		// child's own.
		fmt.Printf("in the background, session %d\n", mustSid())
		time.Sleep(200 * time.Millisecond)
		os.Exit(0)
	case "fail":
		fmt.Fprintln(os.Stderr, "the spec cannot be booted")
		os.Exit(3)
	case "wait":
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		fmt.Println("waiting")
		<-sig
		fmt.Fprintln(os.Stderr, "interrupted; nothing was left")
		os.Exit(1)
	}
}

// mustSid is this process's session, field 6 of /proc/self/stat.
func mustSid() int {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		panic(err)
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	sid, err := strconv.Atoi(f[3])
	if err != nil {
		panic(err)
	}
	return sid
}

func start(t *testing.T, ctx context.Context, how string, env ...string) (int, string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	pid, err := Start(ctx, os.Args[0], []string{os.Args[0], "-test.run=^$"}, append(os.Environ(), append(env, behave+"="+how)...), &out, &errOut)
	return pid, out.String(), errOut.String(), err
}

func TestReadyChildGoesOnInTheBackground(t *testing.T) {
	log := filepath.Join(t.TempDir(), "up.log")
	pid, out, errOut, err := start(t, t.Context(), "ready", "DETACH_TEST_LOG="+log)
	if err != nil {
		t.Fatal(err)
	}
	if out != "booting\n" || errOut != "a warning\n" {
		t.Errorf("relayed %q and %q, want what the child wrote before it was ready", out, errOut)
	}
	// The child outlives Start: it is its own session's leader, and
	// writes to the log.
	want := fmt.Sprintf("in the background, session %d\n", pid)
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, _ := os.ReadFile(log)
		if string(data) == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log holds %q, want %q", data, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if info, err := os.Stat(log); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the log: %v, %v", info, err)
	}
}

func TestChildThatFailsGivesItsStatus(t *testing.T) {
	_, out, errOut, err := start(t, t.Context(), "fail")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("error %v, want exit status 3", err)
	}
	if out != "" || errOut != "the spec cannot be booted\n" {
		t.Errorf("relayed %q and %q", out, errOut)
	}
}

func TestInterruptReachesTheChild(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(500*time.Millisecond, cancel)
	_, _, errOut, err := start(t, ctx, "wait")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(errOut, "interrupted; nothing was left") {
		t.Fatalf("error %v, stderr %q: the child did not handle the interrupt", err, errOut)
	}
}

func TestReadyOutsideAChild(t *testing.T) {
	if err := Ready(filepath.Join(t.TempDir(), "log")); err == nil {
		t.Error("Ready outside a detached child succeeded")
	}
}
