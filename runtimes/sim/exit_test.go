package sim

import (
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
)

// TestExitHook: once a component has been stopped, a component's request
// to end the process ends only its own goroutine (deferred calls run,
// the caller does not go on); before, it ends the process with the
// code asked for, saying where the request came from.
func TestExitHook(t *testing.T) {
	if os.Getenv("KCOMPILE_SIM_EXIT_HOOK_CHILD") != "" {
		exitHook(new(atomic.Bool))(3)
		t.Fatal("the hook returned")
	}
	stopped := new(atomic.Bool)
	stopped.Store(true)
	hook := exitHook(stopped)
	deferred, after := false, false
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { deferred = true }()
		hook(1)
		after = true
	}()
	<-done
	if !deferred || after {
		t.Errorf("after a stop: deferred calls ran %v, the caller went on %v; want true, false", deferred, after)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestExitHook$")
	cmd.Env = append(os.Environ(), "KCOMPILE_SIM_EXIT_HOOK_CHILD=1")
	out, err := cmd.CombinedOutput()
	exit, ok := err.(*exec.ExitError)
	if !ok || exit.ExitCode() != 3 {
		t.Fatalf("before any stop: %v, want exit code 3\n%s", err, out)
	}
	if !strings.Contains(string(out), "a Kubernetes component ended the process (exit code 3) from:") || !strings.Contains(string(out), "TestExitHook") {
		t.Errorf("before any stop, the process ended without saying where from:\n%s", out)
	}
}
