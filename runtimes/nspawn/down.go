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

	"github.com/kcompile/kcompile/internal/writer"
)

// Down stops the cluster whose journal is in the work directory work:
// it asks a running `kcompile up` to stop, and then (or when up is gone,
// after a crash) takes the work directory's lock, halts what machines
// remain and removes every namespace, device and directory the journal
// lists, in the reverse order they were made, and nothing else.
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
		if _, err := ReadState(work); errors.Is(err, fs.ErrNotExist) {
			// It removed everything itself.
			return nil
		}
	}
	l, err := lockWork(work)
	if err != nil {
		return err
	}
	// The journal again, under the lock: another down may have removed
	// it meanwhile.
	s, err = ReadState(work)
	if errors.Is(err, fs.ErrNotExist) {
		l.release(true)
		return nil
	}
	if err != nil {
		l.release(false)
		return err
	}
	own, err := undo(ctx, &journal{path: filepath.Join(work, StateName), state: *s}, log)
	l.created = l.created || own && err == nil
	l.release(true)
	return err
}

// undo removes what a journal lists, last first, forgetting each entry
// once it is gone, then the journal itself. The work directory, when the
// journal lists it (own), is emptied but for the lock file: the lock's
// release removes both, in order with the next run.
func undo(ctx context.Context, j *journal, log io.Writer) (own bool, err error) {
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
				return false, fmt.Errorf("machine %s (pid %d) does not stop: %w", r.Name, r.PID, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	work := filepath.Dir(j.path)
	var errs []error
	for i := len(j.state.Resources) - 1; i >= 0; i-- {
		r := j.state.Resources[i]
		var err error
		switch r.Kind {
		case KindNetns:
			err = deleteNetns(r.Name)
		case KindLink:
			err = deleteLink(r.Name)
		case KindNftTable:
			err = deleteNftTable(r.Name)
		case KindCgroup:
			err = removeCgroup(r.Name)
		case KindDir:
			if r.Name == work {
				own = true
				continue
			}
			err = removeDir(r.Name)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if own {
		entries, err := os.ReadDir(work)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		for _, e := range entries {
			if e.Name() == LockName || e.Name() == StateName {
				continue
			}
			if err := removeDir(filepath.Join(work, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return own, fmt.Errorf("down: %w; the journal %s still lists what is left", errors.Join(errs...), j.path)
	}
	// The journal last, with the temporary files of saves a crash cut
	// short.
	torn, _ := filepath.Glob(filepath.Join(work, writer.TempPrefix(j.path)+"*"))
	for _, f := range append(torn, j.path) {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return own, err
		}
	}
	return own, nil
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
