package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/writer"
	"github.com/kcompile/kcompile/pipeline"
)

// compileSpec compiles the spec at dir for a command that needs a valid
// cluster, printing diagnostics on stderr: all of them when there is an
// error, else its warnings.
func compileSpec(e *env, dir string) (*ir.Cluster, error) {
	e.progress.stage("compiling " + dir)
	c, diags := compiler.Compile(compiler.Source{Dir: dir, Bound: e.bound})
	if c == nil {
		return nil, printDiagnostics(e, diags, "the spec has errors; `kcompile check` explains them")
	}
	if err := printWarnings(e, diags); err != nil {
		return nil, err
	}
	return c, nil
}

// loadBundle reads a secrets bundle for a command, with the message a
// missing one deserves.
func loadBundle(file string) (*pki.Bundle, diag.List, error) {
	b, diags, err := pipeline.LoadBundle(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, statusError{code: exitProblems, msg: err.Error()}
	}
	return b, diags, err
}

// run runs the pipeline on the spec and the bundle for a command that
// needs them valid: it issues the PKI and builds the targets. When any
// diagnostic is an error they are all printed on stderr and the command
// ends with exit status 1; otherwise the warnings are printed there: a
// build that succeeds with a warning must still say it.
func (a specAndSecrets) run(e *env, ts ...pipeline.Target) (*pipeline.Output, error) {
	b, diags, err := loadBundle(a.Secrets)
	if err != nil {
		return nil, err
	}
	if diags.HasErrors() {
		return nil, printDiagnostics(e, diags, "cannot use the secrets bundle "+a.Secrets)
	}
	in := pipeline.Input{Source: pipeline.Source{Dir: a.Dir, Bound: e.bound}, Bundle: b, Now: e.now, Issue: true, Targets: ts, Stage: e.progress.stage}
	out, err := pipeline.Run(in)
	if err != nil {
		return nil, err
	}
	if !out.Diagnostics.HasErrors() {
		return out, printWarnings(e, append(diags, out.Diagnostics...).Sorted())
	}
	return out, printDiagnostics(e, out.Diagnostics, out.Stopped(in, "nothing written"))
}

// printDiagnostics prints diagnostics that stop a command and the status
// error that ends it.
func printDiagnostics(e *env, diags diag.List, msg string) error {
	e.progress.pause()
	if err := diags.Relative(e.cwd).WriteText(e.stderr); err != nil {
		return err
	}
	return statusError{code: exitProblems, msg: msg}
}

// printWarnings prints the warnings of a command that goes on, once, at
// their positions; nothing when there are none.
func printWarnings(e *env, diags diag.List) error {
	if len(diags) == 0 {
		return nil
	}
	e.progress.pause()
	return diags.Relative(e.cwd).WriteText(e.stderr)
}

// writePrivateFile writes data to path with mode 0600, atomically,
// refusing to replace an existing file unless force is set.
func writePrivateFile(path string, data []byte, force bool) error {
	if _, err := os.Lstat(path); err == nil && !force {
		return statusError{code: exitProblems, msg: fmt.Sprintf("%s already exists; pass --force to replace it", path)}
	}
	return writer.PrivateFile(path, data)
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
