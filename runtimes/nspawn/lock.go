package nspawn

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockName is the lock file of a work directory. The exclusive flock on
// it is held by the `up` that runs the cluster (or the `down` that
// removes it) for its whole life: the kernel drops it when that process
// ends, however it ends, so a crashed owner never blocks the next run
// and two runs never both pass the checks. It is a file of its own, not
// the directory, because writing a tree locks the tree's parent.
const LockName = "kcompile-up.lock"

// workLock is a held lock of a work directory.
type workLock struct {
	work string
	f    *os.File
	// created says this process made the work directory.
	created bool
}

// errLocked is a work directory another process holds.
type errLocked struct {
	work string
	pid  int
}

func (e *errLocked) Error() string {
	who := "another kcompile process"
	if e.pid > 0 {
		who = fmt.Sprintf("%s (pid %d)", who, e.pid)
		if cmd, err := os.ReadFile("/proc/" + strconv.Itoa(e.pid) + "/cmdline"); err == nil && len(cmd) > 0 {
			who = fmt.Sprintf("%q (pid %d)", strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")), e.pid)
		}
	}
	return fmt.Sprintf("%s holds the work directory %s: it runs this cluster or removes it; `kcompile down --work %s` stops it", who, e.work, e.work)
}

// underParent runs f holding the lock of work's parent directory, which
// orders the making and removing of a work directory and its lock file:
// a run never takes the lock of a file another is about to remove, and
// the one that made the directory is the one that holds it.
func underParent(work string, f func() error) error {
	parent := filepath.Dir(work)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	p, err := os.Open(parent)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := unix.Flock(int(p.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %v", parent, err)
	}
	return f()
}

// lockWork makes the work directory when it is missing and takes its
// lock without waiting.
func lockWork(work string) (*workLock, error) {
	l := &workLock{work: work}
	err := underParent(work, func() error {
		switch err := os.Mkdir(work, 0o700); {
		case err == nil:
			l.created = true
		case !errors.Is(err, fs.ErrExist):
			return err
		}
		f, err := os.OpenFile(filepath.Join(work, LockName), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			pid := lockHolder(f)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return &errLocked{work: work, pid: pid}
			}
			return fmt.Errorf("locking %s: %v", work, err)
		}
		l.f = f
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// release drops the lock and, with remove, the lock file, and the work
// directory when this run made it and nothing else is in it.
func (l *workLock) release(remove bool) {
	if l == nil || l.f == nil {
		return
	}
	_ = underParent(l.work, func() error {
		if remove {
			_ = os.Remove(filepath.Join(l.work, LockName))
			if l.created {
				_ = os.Remove(l.work)
			}
		}
		l.f.Close()
		l.f = nil
		return nil
	})
}

// lockHolder is the process holding a flock on f's file, from
// /proc/locks; 0 when it cannot tell.
func lockHolder(f *os.File) int {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return 0
	}
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0
	}
	// "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF": the device
	// is major:minor in hex, then the inode.
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" || f[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil {
			return pid
		}
	}
	return 0
}
