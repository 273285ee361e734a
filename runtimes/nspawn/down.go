package nspawn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Down stops the cluster whose journal is in the work directory work:
// it asks a running `kcompile up` to stop, and then (or when up is gone,
// after a crash) halts what machines remain and removes every namespace,
// device and directory the journal lists, in the reverse order they were
// made, and nothing else.
func Down(ctx context.Context, work string, log io.Writer) error {
	s, err := ReadState(work)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s has no %s: no kcompile up ran there", work, StateName)
	}
	if err != nil {
		return err
	}
	say := func(format string, args ...any) {
		if log != nil {
			fmt.Fprintf(log, format+"\n", args...)
		}
	}
	if s.Owner.alive() && s.Owner.PID != os.Getpid() {
		say("asking kcompile up (pid %d) to stop the cluster", s.Owner.PID)
		s.Owner.signal(syscall.SIGTERM)
		for s.Owner.alive() {
			select {
			case <-ctx.Done():
				return fmt.Errorf("kcompile up (pid %d) did not stop: %w", s.Owner.PID, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
		s, err = ReadState(work)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	j := &journal{path: filepath.Join(work, StateName), state: *s}
	return undo(ctx, j, log)
}

// undo removes what a journal lists, last first, forgetting each entry
// once it is gone; the journal itself goes last.
func undo(ctx context.Context, j *journal, log io.Writer) error {
	// Machines first: their namespaces and mounts hang on them.
	for _, r := range j.state.Resources {
		if r.Kind != KindProcess || !r.alive() {
			continue
		}
		r.signal(syscall.SIGTERM)
		deadline := time.Now().Add(20 * time.Second)
		for r.alive() && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if r.alive() {
			// nspawn ends the machine at once on a second SIGTERM.
			r.signal(syscall.SIGTERM)
			time.Sleep(3 * time.Second)
			r.kill()
		}
		for r.alive() {
			select {
			case <-ctx.Done():
				return fmt.Errorf("machine %s (pid %d) does not stop: %w", r.Name, r.PID, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	var errs []error
	own := ""
	for i := len(j.state.Resources) - 1; i >= 0; i-- {
		r := j.state.Resources[i]
		var err error
		switch r.Kind {
		case KindNetns:
			err = deleteNetns(r.Name)
		case KindLink:
			err = deleteLink(r.Name)
		case KindDir:
			if r.Name == filepath.Dir(j.path) {
				// The work directory itself: last, with the journal.
				own = r.Name
				continue
			}
			err = removeDir(r.Name)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("down: %w; the journal %s still lists what is left", errors.Join(errs...), j.path)
	}
	if own != "" {
		return removeDir(own)
	}
	return os.Remove(j.path)
}

// removeDir removes a directory of up's, refusing to follow a mount: a
// machine root that is still mounted (its machine still running) stops
// it, rather than its contents being deleted through the mount.
func removeDir(dir string) error {
	var mounted string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() && p != dir && isMountPoint(p) {
			mounted = p
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil {
		return err
	}
	if mounted != "" {
		return fmt.Errorf("%s is still mounted: a machine still runs", mounted)
	}
	return os.RemoveAll(dir)
}

// isMountPoint says whether p is on another device than its parent.
func isMountPoint(p string) bool {
	var st, parent syscall.Stat_t
	if syscall.Lstat(p, &st) != nil || syscall.Lstat(filepath.Dir(p), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}
