package writer

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncTree flushes the file system holding dir with syncfs(2).
func syncTree(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Syncfs(int(d.Fd()))
}
