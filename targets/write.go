package targets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Write puts the tree at dir atomically: it is built in a temporary
// sibling directory, synced, and renamed into place, so dir holds either
// the old tree or the complete new one, never a partial one. An existing
// dir is replaced only when replace is true.
func Write(dir string, t *Tree, replace bool) (err error) {
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	if _, err := os.Lstat(dir); err == nil && !replace {
		return fmt.Errorf("%s already exists", dir)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	// MkdirTemp creates 0700; the tree's root is an ordinary directory.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	dirs := map[string]bool{}
	for _, f := range t.Files() {
		p := filepath.Join(tmp, filepath.FromSlash(f.Path))
		if d := filepath.Dir(p); !dirs[d] {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			dirs[d] = true
		}
		// O_EXCL and an explicit chmod: the mode must not depend on the
		// umask, and a private key must never exist with wider bits.
		fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.Mode)
		if err != nil {
			return err
		}
		if err := fh.Chmod(f.Mode); err != nil {
			fh.Close()
			return err
		}
		if _, err := fh.Write(f.Data); err != nil {
			fh.Close()
			return err
		}
		if err := fh.Close(); err != nil {
			return err
		}
	}
	// One sync of the file system instead of one per file: writing
	// thousands of files with an fsync each is 30 times slower.
	if err := syncTree(tmp); err != nil {
		return err
	}
	old := ""
	if _, err := os.Lstat(dir); err == nil {
		old = tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if old != "" {
			err = errors.Join(err, os.Rename(old, dir))
		}
		return err
	}
	if old != "" {
		if err := os.RemoveAll(old); err != nil {
			return err
		}
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
