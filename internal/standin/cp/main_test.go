package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func write(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != data || fi.Mode().Perm() != mode {
		t.Errorf("%s holds %q mode %v, want %q mode %v", path, got, fi.Mode().Perm(), data, mode)
	}
}

// TestInitContainerCommand: the flannel-cni-plugin init container's
// command installs the plugin, executable, over an older one.
func TestInitContainerCommand(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "flannel")
	bin := filepath.Join(dir, "opt", "cni", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, src, "new plugin", 0o755)
	write(t, filepath.Join(bin, "flannel"), "old plugin, longer than the new one", 0o644)
	if err := run([]string{"-f", src, filepath.Join(bin, "flannel")}); err != nil {
		t.Fatal(err)
	}
	check(t, filepath.Join(bin, "flannel"), "new plugin", 0o755)
}

// TestForceReplacesBusy: a plugin being executed cannot be opened for
// writing (ETXTBSY, for root too); without -f that is an error, with -f
// the file is replaced.
func TestForceReplacesBusy(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep to execute")
	}
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "new"), filepath.Join(dir, "busy")
	write(t, src, "new", 0o755)
	if err := run([]string{sleep, dst}); err != nil {
		t.Fatal(err)
	}
	busy := exec.Command(dst, "30")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	if err := run([]string{src, dst}); err == nil {
		t.Fatal("cp wrote over a running program without -f")
	}
	if err := run([]string{"-f", src, dst}); err != nil {
		t.Fatal(err)
	}
	check(t, dst, "new", 0o755)
}

// TestIntoDirectory copies several sources into a directory by base name.
func TestIntoDirectory(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "x"), "x", 0o600)
	write(t, filepath.Join(dir, "y"), "y", 0o755)
	if err := run([]string{filepath.Join(dir, "x"), filepath.Join(dir, "y"), out}); err != nil {
		t.Fatal(err)
	}
	check(t, filepath.Join(out, "x"), "x", 0o600)
	check(t, filepath.Join(out, "y"), "y", 0o755)
}

// TestRefuses: usage errors, missing sources, several sources onto a file,
// a file onto itself.
func TestRefuses(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	write(t, f, "f", 0o644)
	for _, args := range [][]string{
		{},
		{f},
		{"-r", f, filepath.Join(dir, "g")},
		{filepath.Join(dir, "missing"), filepath.Join(dir, "g")},
		{f, f, filepath.Join(dir, "g")},
		{f, f},
		{dir, filepath.Join(dir, "g")},
	} {
		if err := run(args); err == nil {
			t.Errorf("cp %q succeeded", args)
		}
	}
	check(t, f, "f", 0o644)
}
