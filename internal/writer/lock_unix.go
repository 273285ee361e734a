//go:build unix

package writer

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lockDir takes flock(2) on dir itself, so that no lock file is left
// behind, and fails at once rather than wait when another process (or
// another Write in this one) holds it. unlock releases it.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &LockedError{Dir: dir}
		}
		return nil, err
	}
	return func() { f.Close() }, nil
}
