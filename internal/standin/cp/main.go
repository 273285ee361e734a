// Command cp is a stand-in for the cp of the flannel-cni-plugin image
// (upstream's comes with its Alpine base, which no machine of kcompile up
// can pull). The image's init container runs it as
// `cp -f /flannel /opt/cni/bin/flannel` to put the flannel CNI plugin on
// the node. Like POSIX cp it copies each SOURCE to DEST, or into DEST when
// that is a directory, with the source's permission bits; with -f a
// destination that cannot be opened for writing (a plugin being executed
// is busy) is removed and created anew.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cp:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	force := false
	for len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' {
		if args[0] == "--" {
			args = args[1:]
			break
		}
		if args[0] != "-f" {
			return fmt.Errorf("unknown option %s (usage: cp [-f] SOURCE... DEST)", args[0])
		}
		force, args = true, args[1:]
	}
	if len(args) < 2 {
		return errors.New("usage: cp [-f] SOURCE... DEST")
	}
	srcs, dest := args[:len(args)-1], args[len(args)-1]
	fi, err := os.Stat(dest)
	intoDir := err == nil && fi.IsDir()
	if len(srcs) > 1 && !intoDir {
		return fmt.Errorf("%s is not a directory", dest)
	}
	var errs []error
	for _, src := range srcs {
		to := dest
		if intoDir {
			to = filepath.Join(dest, filepath.Base(src))
		}
		errs = append(errs, copyFile(src, to, force))
	}
	return errors.Join(errs...)
}

// copyFile copies the regular file src to dst.
func copyFile(src, dst string, force bool) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	if same, err := os.Stat(dst); err == nil && os.SameFile(fi, same) {
		return fmt.Errorf("%s and %s are the same file", src, dst)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil && force {
		if rmErr := os.Remove(dst); rmErr == nil {
			out, err = os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
		}
	}
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	// An existing destination keeps its mode under O_CREATE: give it the
	// source's, as cp does for a file it creates.
	if err := out.Chmod(fi.Mode().Perm()); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
