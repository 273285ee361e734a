// Package detach lets a command go on in the background once it is
// ready, without a terminal: the command starts itself again in a
// session of its own, relays the child's output until the child says it
// is ready (or ends), and returns; the child then writes its output to a
// log file. A daemonised process rather than a transient systemd unit:
// it is the same process either way (the one holding the work
// directory's lock and serving what the cluster needs), it works on a
// host without systemd as PID 1 (a container, this project's CI), and
// nothing outside the work directory names it.
package detach

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// envVar marks the child; its value is the descriptor of the pipe it
// says ready on.
const envVar = "KCOMPILE_DETACHED"

// readyFD is that descriptor: the first of exec.Cmd.ExtraFiles.
const readyFD = 3

// Child says whether this process is a detached child, which must call
// Ready once it is.
func Child() bool { return os.Getenv(envVar) == strconv.Itoa(readyFD) }

// Start starts the program exe with argv (argv[0] included) and env as a
// detached child, relaying its stdout and stderr, and returns its pid
// once it is ready. If the child ends first, Start returns its exit
// error (an *exec.ExitError) after its output. An interrupt of ctx
// before then is passed on to the child as SIGTERM, which it handles as
// its own, and Start waits for it to end.
func Start(ctx context.Context, exe string, argv, env []string, stdout, stderr io.Writer) (int, error) {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer readyR.Close()
	cmd := &exec.Cmd{
		Path:        exe,
		Args:        argv,
		Env:         append(env, envVar+"="+strconv.Itoa(readyFD)),
		ExtraFiles:  []*os.File{readyW},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		readyW.Close()
		return 0, err
	}
	errR, err := cmd.StderrPipe()
	if err != nil {
		readyW.Close()
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		readyW.Close()
		return 0, err
	}
	readyW.Close()
	var relay sync.WaitGroup
	relay.Add(2)
	go func() { defer relay.Done(); _, _ = io.Copy(stdout, outR) }()
	go func() { defer relay.Done(); _, _ = io.Copy(stderr, errR) }()
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	defer stop()
	said := make([]byte, len("ready\n"))
	n, _ := io.ReadFull(readyR, said)
	if string(said[:n]) == "ready\n" {
		// The child gave up its ends of the pipes before it said
		// ready: what it wrote is read to the end, unless a process it
		// started holds them still.
		done := make(chan struct{})
		go func() { relay.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
		pid := cmd.Process.Pid
		_ = cmd.Process.Release()
		return pid, nil
	}
	relay.Wait()
	err = cmd.Wait()
	if err == nil {
		err = errors.New("the background process ended before it was ready, without an error")
	}
	return 0, err
}

// Ready is the child's: its stdout and stderr go to the file log from
// now on (appended, 0600), and the parent is told it is ready and
// returns. A write to the parent's pipes after that would raise SIGPIPE:
// the child ignores it, so that a parent gone early costs only output.
func Ready(log string) error {
	if !Child() {
		return errors.New("detach.Ready outside a detached child")
	}
	signal.Ignore(syscall.SIGPIPE)
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, fd := range []int{1, 2} {
		if err := syscall.Dup3(int(f.Fd()), fd, 0); err != nil {
			return fmt.Errorf("sending output to %s: %v", log, err)
		}
	}
	ready := os.NewFile(readyFD, "ready")
	defer ready.Close()
	_, err = ready.Write([]byte("ready\n"))
	return err
}
