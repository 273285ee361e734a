package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestMain runs pause's own signal handling in a child process when the
// test asks for it, so that real signals reach it.
func TestMain(m *testing.M) {
	if os.Getenv("PAUSE_TEST_CHILD") == "1" {
		sigs := notify()
		fmt.Println("ready")
		os.Exit(wait(sigs))
	}
	os.Exit(m.Run())
}

// TestExitsAtOnce: SIGTERM and SIGINT each end pause with status 0 well
// within a second, and SIGCHLD does not.
func TestExitsAtOnce(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "PAUSE_TEST_CHILD=1")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
				t.Fatalf("child said %q, %v", line, err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			if err := cmd.Process.Signal(syscall.SIGCHLD); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				t.Fatalf("pause ended on SIGCHLD: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
			start := time.Now()
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("pause ended with %v, want status 0", err)
				}
				if d := time.Since(start); d > time.Second {
					t.Errorf("pause took %v to end", d)
				}
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("pause did not end on %v", sig)
			}
		})
	}
}
