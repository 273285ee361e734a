// Package writer writes a target's tree to a directory the way kcompile
// owns output: atomically (a temporary tree renamed into place), locked
// against a concurrent writer, with a manifest bound to the secrets
// bundle, and never over a byte kcompile did not write.
package writer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/kcompile/kcompile/targets"
)

// Options are what the caller of Write decides.
type Options struct {
	// Version is the kcompile version recorded in the manifest.
	Version string
	// Replace writes even over what kcompile cannot prove it wrote. Even
	// then nothing is deleted: the old entry is moved aside.
	Replace bool
	// Key binds the manifest to the secrets bundle
	// ((*pki.Bundle).ManifestKey): the manifest written carries its
	// HMAC, and an existing tree is kcompile's only when its manifest's
	// HMAC verifies with Key, so an edited manifest, one written with
	// another bundle and one without an HMAC are all refused (moved aside
	// with Replace). A nil Key keeps the older, weaker rule: the manifest
	// is trusted as written and carries no HMAC. build and provision
	// always pass one; nspawn's work trees and sim, which write into
	// directories of their own, pass none.
	Key []byte
}

// Result says what Write did besides writing the tree.
type Result struct {
	// MovedAside is where the previous entry at dir now lives when it
	// was not provably kcompile's own and so was kept; "" otherwise.
	MovedAside string
}

// LockedError is returned when another Write holds the output
// directory.
type LockedError struct{ Dir string }

func (e *LockedError) Error() string {
	return fmt.Sprintf("another kcompile is writing to %s; run again when it has finished", e.Dir)
}

// Write puts the tree at dir atomically: it is built in a temporary
// sibling directory, synced, and renamed into place, so dir holds either
// the old tree or the complete new one, never a partial one. The tree is
// recorded in a manifest at its root (ManifestName).
//
// An existing dir is replaced only when it is an empty directory or a tree
// whose manifest verifies with opts.Key and matches what is on disk;
// anything else is refused with a
// *ForeignError before a byte is written, unless opts.Replace moves it
// aside. Writes into one parent directory are serialised by a lock on it;
// the loser gets a *LockedError.
func Write(dir string, t *targets.Tree, opts Options) (res Result, err error) {
	dir = filepath.Clean(dir)
	if _, clash := t.Get(ManifestName); clash {
		return res, fmt.Errorf("kcompile bug: a tree holds %s", ManifestName)
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return res, err
	}
	unlock, err := lockDir(parent)
	if err != nil {
		return res, err
	}
	defer unlock()

	exists, err := inspect(dir, opts.Key)
	var foreign *ForeignError
	if err != nil && !(errors.As(err, &foreign) && opts.Replace) {
		return res, err
	}
	tmp, err := writeTemp(parent, filepath.Base(dir), t, opts.Version, opts.Key)
	if err != nil {
		return res, err
	}
	aside := ""
	if exists {
		if aside, err = moveAside(dir); err != nil {
			os.RemoveAll(tmp)
			return res, err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if aside != "" {
			err = errors.Join(err, os.Rename(aside, dir))
		}
		return res, err
	}
	if err := syncDir(parent); err != nil {
		return res, err
	}
	if aside == "" {
		return res, nil
	}
	// The manifest proved the old tree ours before the new one was
	// written; it is checked again because something may have changed it
	// meanwhile, and what changed is kept.
	if foreign == nil {
		if _, err := inspect(aside, opts.Key); err == nil {
			return res, os.RemoveAll(aside)
		}
	}
	res.MovedAside = aside
	return res, nil
}

// writeTemp writes the tree and its manifest into a new hidden sibling
// of the destination and flushes it to disk. On any error it removes the
// directory it made, and nothing else.
func writeTemp(parent, base string, t *targets.Tree, version string, key []byte) (_ string, err error) {
	// tmp is not the named result: every error path returns "", which a
	// cleanup reading the result would see, leaving a partial tree in
	// parent.
	tmp, err := os.MkdirTemp(parent, "."+base+".tmp-")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, os.RemoveAll(tmp))
		}
	}()
	// MkdirTemp creates 0700; the tree's root is an ordinary directory.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	files := t.Files()
	dirs := map[string]bool{}
	for _, f := range files {
		p := filepath.Join(tmp, filepath.FromSlash(f.Path))
		if d := filepath.Dir(p); !dirs[d] {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return "", err
			}
			dirs[d] = true
		}
		if err := writeFile(p, f.Data, f.Mode); err != nil {
			return "", err
		}
	}
	if err := writeFile(filepath.Join(tmp, ManifestName), encodeManifest(version, files, key), manifestMode); err != nil {
		return "", err
	}
	// One sync of the file system instead of one per file: writing
	// thousands of files with an fsync each is 30 times slower.
	if err := syncTree(tmp); err != nil {
		return "", err
	}
	return tmp, nil
}

// writeFile creates p with O_EXCL and an explicit chmod: the mode must not
// depend on the umask, and a private key must never exist with wider bits.
func writeFile(p string, data []byte, mode fs.FileMode) error {
	fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if err := fh.Chmod(mode); err != nil {
		fh.Close()
		return err
	}
	if _, err := fh.Write(data); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

// moveAside renames dir to the first free name dir.replaced-N beside it
// and returns that name. The name is reserved with Mkdir, which fails when
// it is taken, so nothing there is ever overwritten.
func moveAside(dir string) (string, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	for n := 1; n <= 1000; n++ {
		aside := fmt.Sprintf("%s.replaced-%d", dir, n)
		err := os.Mkdir(aside, 0o700)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		// A directory is renamed onto the empty reservation, with
		// rename(2) itself: os.Rename refuses any directory there. Nothing
		// else can replace a directory, so then the reservation goes first.
		if !fi.IsDir() {
			if err := os.Remove(aside); err != nil {
				return "", err
			}
		}
		if err := syscall.Rename(dir, aside); err != nil {
			err = &os.LinkError{Op: "rename", Old: dir, New: aside, Err: err}
			if fi.IsDir() {
				os.Remove(aside)
			}
			return "", err
		}
		return aside, nil
	}
	return "", fmt.Errorf("%s.replaced-1 to -1000 all exist; remove some", dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
