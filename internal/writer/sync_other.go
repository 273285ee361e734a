//go:build !linux

package writer

import (
	"io/fs"
	"os"
	"path/filepath"
)

// syncTree flushes every file below dir where syncfs(2) is not available.
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
}
