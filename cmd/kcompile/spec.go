package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kcompile/kcompile/compiler"
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

// loadBundle reads a secrets bundle. Its errors never quote key material.
func loadBundle(file string) (*pki.Bundle, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, statusError{code: exitProblems, msg: fmt.Sprintf("secrets bundle %s does not exist; create one with `kcompile secrets init -o %s`", file, file)}
		}
		return nil, err
	}
	b, err := pki.Parse(data)
	if err != nil {
		return nil, statusError{code: exitProblems, msg: fmt.Sprintf("%s: %v", file, err)}
	}
	return b, nil
}

// compileWithBundle compiles a spec, loads its bundle, and runs the PKI
// checks that need both, printing their diagnostics when any is an error.
func compileWithBundle(e *env, dir, secrets string) (*ir.Cluster, *pki.Bundle, error) {
	c, err := compileSpec(e, dir)
	if err != nil {
		return nil, nil, err
	}
	b, err := loadBundle(secrets)
	if err != nil {
		return nil, nil, err
	}
	if diags := pki.Check(c, b, e.now); diags.HasErrors() {
		if err := diags.Relative(e.cwd).WriteText(e.stderr); err != nil {
			return nil, nil, err
		}
		return nil, nil, statusError{code: exitProblems, msg: "the spec and the secrets bundle do not fit together"}
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

// parseDuration reads durations written like the schema's: "30d", "1y",
// "12h", or anything time.ParseDuration takes.
func parseDuration(s string) (time.Duration, error) {
	if len(s) > 1 {
		var n int64
		if _, err := fmt.Sscanf(s[:len(s)-1], "%d", &n); err == nil && fmt.Sprint(n) == s[:len(s)-1] {
			switch s[len(s)-1] {
			case 'd':
				return time.Duration(n) * 24 * time.Hour, nil
			case 'y':
				return time.Duration(n) * 365 * 24 * time.Hour, nil
			}
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 30d, 1y or 12h", s)
	}
	return d, nil
}
