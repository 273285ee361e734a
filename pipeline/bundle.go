package pipeline

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"runtime"
	"strings"
	"syscall"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/pki"
)

// missingBundle is a bundle file that is not there.
type missingBundle struct {
	file string
	err  error
}

func (m missingBundle) Error() string {
	return fmt.Sprintf("secrets bundle %s does not exist; create one with `kcompile secrets init -s %s`", m.file, m.file)
}

func (m missingBundle) Unwrap() error { return m.err }

// LoadBundle reads a secrets bundle. A bundle that is there but cannot be
// used (open to other users, damaged, not a regular file) is reported as
// a diagnostic at its file; one that cannot be opened as an error (a
// missing one is fs.ErrNotExist, saying how to make one). Neither ever
// quotes key material.
func LoadBundle(file string) (*pki.Bundle, diag.List, error) {
	at := []diag.Pos{{File: file}}
	// Something other than a regular file (a named pipe, a device, a
	// socket, a directory) is refused before it is opened: opening a
	// named pipe waits for a writer, forever if none comes.
	info, err := os.Stat(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, missingBundle{file: file, err: err}
	}
	if err != nil {
		return nil, nil, err
	}
	if d := notRegularBundle(info.Mode(), at); d != nil {
		return nil, d, nil
	}
	// The path may be replaced between the stat and the open: opened
	// without blocking, a named pipe put there returns at once, and the
	// mode of the file opened is checked again.
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	// The mode of the file read, not of the path, which could be replaced
	// between a stat and an open.
	info, err = f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if d := notRegularBundle(info.Mode(), at); d != nil {
		return nil, d, nil
	}
	if msg, ok := exposedBundle(file, info.Mode()); ok {
		return nil, diag.List{{Code: pki.CodeBundleMode, Severity: pki.Severity(pki.CodeBundleMode), Message: msg, Positions: at,
			Hint: "the bundle holds every private key of the cluster: like ssh with its keys, kcompile reads it only when no other user can"}}, nil
	}
	// A bundle is a few kilobytes; a file that keeps growing must not
	// exhaust the command.
	const maxBundle = 1 << 20
	data, err := io.ReadAll(io.LimitReader(f, maxBundle+1))
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", file, err)
	}
	if len(data) > maxBundle {
		err = fmt.Errorf("not a kcompile secrets bundle: larger than %d bytes", maxBundle)
	}
	var b *pki.Bundle
	if err == nil {
		b, err = pki.Parse(data)
	}
	if err != nil {
		return nil, diag.List{{Code: pki.CodeBundleMalformed, Severity: pki.Severity(pki.CodeBundleMalformed), Message: err.Error(), Positions: at,
			Hint: "a bundle is written by `kcompile secrets init` and changed only by `kcompile pki renew`; restore it from a backup, or create a new one (new CAs: rebuild and redeploy every node)"}}, nil
	}
	b.Source = file
	return b, nil, nil
}

// notRegularBundle refuses a bundle path that names something other than
// a regular file, saying what it is.
func notRegularBundle(mode fs.FileMode, at []diag.Pos) diag.List {
	if mode.IsRegular() {
		return nil
	}
	what := "not a regular file"
	switch t := mode.Type(); {
	case t&fs.ModeDir != 0:
		what = "a directory, not a file"
	case t&fs.ModeNamedPipe != 0:
		what = "a named pipe, not a regular file"
	case t&fs.ModeSocket != 0:
		what = "a socket, not a regular file"
	case t&fs.ModeDevice != 0:
		what = "a device, not a regular file"
	}
	return diag.List{{Code: pki.CodeBundleMalformed, Severity: pki.Severity(pki.CodeBundleMalformed), Message: "not a kcompile secrets bundle: " + what, Positions: at,
		Hint: "kcompile reads a bundle only from a regular file, the one `kcompile secrets init` wrote: pass its path, not a pipe, device or directory"}}
}

// exposedBundle says what is wrong with a bundle file that users other
// than its owner may read or change, and the chmod that fixes it.
func exposedBundle(file string, mode fs.FileMode) (string, bool) {
	perm := mode.Perm()
	// Windows has no such modes; Go makes them up from the read-only
	// attribute.
	if runtime.GOOS == "windows" || perm&0o077 == 0 {
		return "", false
	}
	who := "open to its group or others"
	switch {
	case perm&0o004 != 0:
		who = "readable by others"
	case perm&0o040 != 0:
		who = "readable by its group"
	case perm&0o022 != 0:
		who = "writable by its group or others"
	}
	return fmt.Sprintf("%s is %s (mode %04o); run: chmod 600 %s", file, who, perm, shellQuote(file)), true
}

// shellQuote makes a path safe to paste into a shell.
func shellQuote(s string) string {
	if safePath.MatchString(s) {
		if strings.HasPrefix(s, "-") {
			return "./" + s
		}
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

var safePath = regexp.MustCompile(`^[A-Za-z0-9_./+,:@=-]+$`)
