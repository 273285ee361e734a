package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
)

// compileSpec compiles the spec at dir for a command that needs a valid
// cluster, printing diagnostics on stderr when it has errors. Warnings are
// left to `kcompile check`.
func compileSpec(e *env, dir string) (*ir.Cluster, error) {
	c, diags := compiler.Compile(compiler.Source{Dir: dir})
	if c == nil {
		if err := diags.Relative(e.cwd).WriteText(e.stderr); err != nil {
			return nil, err
		}
		return nil, statusError{code: exitProblems, msg: "the spec has errors; `kcompile check` explains them"}
	}
	return c, nil
}

// loadBundle reads a secrets bundle. A bundle that is there but cannot be
// used (open to other users, damaged) is reported as a diagnostic at its
// file; a missing one as an error. Neither ever quotes key material.
func loadBundle(file string) (*pki.Bundle, diag.List, error) {
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, statusError{code: exitProblems, msg: fmt.Sprintf("secrets bundle %s does not exist; create one with `kcompile secrets init -o %s`", file, file)}
		}
		return nil, nil, err
	}
	defer f.Close()
	at := []diag.Pos{{File: file}}
	// The mode of the file read, not of the path, which could be replaced
	// between a stat and an open.
	info, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if msg, ok := exposedBundle(file, info.Mode()); ok {
		return nil, diag.List{{Code: pki.CodeBundleMode, Severity: pki.Severity(pki.CodeBundleMode), Message: msg, Positions: at,
			Hint: "the bundle holds every private key of the cluster: like ssh with its keys, kcompile reads it only when no other user can"}}, nil
	}
	// A bundle is a few kilobytes; a path to something endless (a
	// device, a pipe) must not hang or exhaust the command.
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

// compileWithBundle compiles a spec, loads its bundle, and runs the PKI
// checks that need both, printing their diagnostics when any is an error.
func compileWithBundle(e *env, dir, secrets string) (*ir.Cluster, *pki.Bundle, error) {
	c, err := compileSpec(e, dir)
	if err != nil {
		return nil, nil, err
	}
	b, diags, err := loadBundle(secrets)
	if err != nil {
		return nil, nil, err
	}
	msg := "cannot use the secrets bundle " + secrets
	if b != nil {
		diags = pki.Check(c, b, e.now)
		msg = "the spec and the secrets bundle do not fit together"
	}
	if diags.HasErrors() {
		if err := diags.Relative(e.cwd).WriteText(e.stderr); err != nil {
			return nil, nil, err
		}
		return nil, nil, statusError{code: exitProblems, msg: msg}
	}
	return c, b, nil
}

// writePrivateFile writes data readable by its owner only, atomically,
// refusing to replace an existing file unless force is set.
func writePrivateFile(path string, data []byte, force bool) error {
	if _, err := os.Lstat(path); err == nil && !force {
		return statusError{code: exitProblems, msg: fmt.Sprintf("%s already exists; pass --force to replace it", path)}
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp)
		}
	}()
	// CreateTemp makes the file 0600 before anything is written to it.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return nil
}

// parseDuration reads the duration given to --flag, written like the
// schema's durations ("30d", "1y", "12h") or as time.ParseDuration takes
// it ("90m"). It must be positive and at most limit. The count is bounded
// before it is multiplied, so that "500y" is refused rather than wrapped
// round into the past.
func parseDuration(flag, s string, limit time.Duration) (time.Duration, error) {
	const year = 365 * 24 * time.Hour
	tooLong := fmt.Errorf("--%s %s is longer than %d years", flag, s, limit/year)
	notPositive := fmt.Errorf("--%s %s is not a positive duration; write one such as 30d, 1y or 12h", flag, s)
	unit := map[string]time.Duration{"d": 24 * time.Hour, "y": year}[s[max(len(s)-1, 0):]]
	if unit != 0 && len(s) > 1 {
		n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange):
			return 0, tooLong
		case err != nil:
		case n <= 0:
			return 0, notPositive
		case n > int64(limit/unit):
			return 0, tooLong
		default:
			return time.Duration(n) * unit, nil
		}
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("--%s %q is not a duration such as 30d, 1y or 12h", flag, s)
	case d <= 0:
		return 0, notPositive
	case d > limit:
		return 0, tooLong
	}
	return d, nil
}
