package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// warnIfTracked warns when a command has just written key material at
// path inside a git work tree that does not ignore it: one `git add .`
// away from publishing every private key of the cluster. It asks git
// itself (git check-ignore), which knows every ignore file and rule; the
// warning names the .gitignore line that fixes it.
func warnIfTracked(e *env, path, what string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	top := workTree(filepath.Dir(abs))
	if top == "" {
		return nil
	}
	rel, err := filepath.Rel(top, abs)
	if err != nil {
		return err
	}
	line := "/" + filepath.ToSlash(rel)
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		line += "/"
	}
	fix := fmt.Sprintf("add the line %s to %s", shellWord(line), shellWord(filepath.Join(top, ".gitignore")))
	git, err := exec.LookPath("git")
	if err != nil {
		return warnf(e, "%s: %s, and it lies in the git work tree %s; git is not installed, so kcompile cannot tell whether it is ignored: if not, %s",
			shellWord(path), what, shellWord(top), fix)
	}
	// The work tree may be anyone's: no hook, monitor or pager of its
	// configuration runs.
	cmd := exec.Command(git, "-c", "core.fsmonitor=false", "-C", top, "check-ignore", "-q", "--", rel)
	cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0")
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return warnf(e, "%s: %s, and the git work tree %s does not ignore it; %s", shellWord(path), what, shellWord(top), fix)
	default:
		return warnf(e, "%s: %s, and it lies in the git work tree %s, which git cannot read (%v); make sure git ignores it: %s",
			shellWord(path), what, shellWord(top), strings.TrimSpace(err.Error()), fix)
	}
}

// workTree is the top of the git work tree holding dir, or "".
func workTree(dir string) string {
	for {
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func warnf(e *env, format string, args ...any) error {
	e.progress.pause()
	_, err := fmt.Fprintf(e.stderr, "kcompile: warning: "+format+"\n", args...)
	return err
}
