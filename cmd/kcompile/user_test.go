//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/kcompile/kcompile/internal/fixture"
)

// buildKcompile builds this command into dir with go build's extra flags
// (an -overlay, say) and returns the binary's path.
func buildKcompile(t testing.TB, dir string, flags ...string) string {
	t.Helper()
	bin := filepath.Join(dir, "kcompile")
	args := append([]string{"build", "-o", bin}, flags...)
	cmd := exec.Command("go", append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// nobody is the unprivileged identity the second user runs as: no entry
// of /etc/passwd is needed to run a process as it.
const nobody = 65534

// TestOtherUser runs kcompile as root and as an unprivileged second user,
// one after the other in both orders, each with a home of its own (HOME
// and XDG_CACHE_HOME, mode 0700) and both with the same world-writable
// TMPDIR: --help, version, check and explain --picture svg all succeed
// without a panic, the shared TMPDIR stays empty, /tmp/go-graphviz (where
// the WebAssembly Graphviz kcompile once linked cached machine code) is
// left alone, and each user's files are its own. A kcompile that wrote a
// cache into TMPDIR would leave it there for the next user to load, or to
// fail on.
func TestOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running kcompile as a second user needs root")
	}
	if _, err := exec.LookPath("dot"); err != nil {
		t.Fatal("explain --picture svg needs Graphviz's dot: run scripts/tools first")
	}
	base := t.TempDir()
	// The second user reaches its home through the test's directories.
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	for d := filepath.Dir(filepath.Dir(base)); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			t.Fatalf("%s is not traversable by other users: run the test with a TMPDIR they can reach", d)
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	bin := buildKcompile(t, base)
	before := snapshot(t, "/tmp/go-graphviz")
	for _, order := range [][]int{{0, nobody}, {nobody, 0}} {
		name := fmt.Sprintf("uid%d-then-uid%d", order[0], order[1])
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(base, name)
			shared := filepath.Join(dir, "tmp")
			for _, d := range []string{dir, shared} {
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(dir, 0o711); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(shared, 0o777|fs.ModeSticky); err != nil {
				t.Fatal(err)
			}
			written := map[string]bool{}
			for _, uid := range order {
				home := filepath.Join(dir, fmt.Sprintf("home-%d", uid))
				if err := os.Mkdir(home, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.CopyFS(filepath.Join(home, "ha-stacked"), os.DirFS(fixture.Path("examples/ha-stacked"))); err != nil {
					t.Fatal(err)
				}
				if err := chownAll(home, uid); err != nil {
					t.Fatal(err)
				}
				for _, args := range [][]string{
					{"--help"},
					{"version"},
					{"check", "ha-stacked"},
					{"explain", "ha-stacked", "--picture", "svg"},
				} {
					stdout, stderr, err := runAs(bin, uid, home, shared, args...)
					what := fmt.Sprintf("uid %d: kcompile %s", uid, strings.Join(args, " "))
					if err != nil {
						t.Errorf("%s: %v\n%s", what, err, stderr)
					}
					if strings.Contains(stdout+stderr, "panic") {
						t.Errorf("%s panicked:\n%s%s", what, stdout, stderr)
					}
					if args[0] == "explain" && !strings.Contains(stdout, "</svg>") {
						t.Errorf("%s wrote no SVG:\n%.500s", what, stdout)
					}
					for _, f := range list(t, shared) {
						if !written[f] {
							written[f] = true
							t.Errorf("%s wrote %s into the shared TMPDIR", what, f)
						}
					}
				}
			}
			// Nothing but the homes and the shared TMPDIR, and everything
			// in a home its user's.
			err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(dir, path)
				top, _, _ := strings.Cut(rel, string(filepath.Separator))
				var uid int
				if rel == "." || top == "tmp" {
					return nil // the shared TMPDIR is checked above
				}
				if _, err := fmt.Sscanf(top, "home-%d", &uid); err != nil {
					t.Errorf("%s appeared beside the homes", path)
					return nil
				}
				fi, err := d.Info()
				if err != nil {
					return err
				}
				if owner := int(fi.Sys().(*syscall.Stat_t).Uid); owner != uid {
					t.Errorf("%s, in the home of uid %d, belongs to uid %d", path, uid, owner)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	if after := snapshot(t, "/tmp/go-graphviz"); !slices.Equal(before, after) {
		t.Errorf("/tmp/go-graphviz changed:\nbefore %q\nafter  %q", before, after)
	}
}

// runAs runs kcompile as uid (root itself for 0) in home with home as
// HOME and XDG_CACHE_HOME below it, and shared as TMPDIR.
func runAs(bin string, uid int, home, shared string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = home
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"TMPDIR=" + shared,
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
	}
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// chownAll gives dir and everything in it to uid.
func chownAll(dir string, uid int) error {
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, uid)
	})
}

// list names what is in dir.
func list(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// snapshot is every file below root with its size and time, nothing if
// root does not exist.
func snapshot(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %v %d %s", path, fi.Mode(), fi.Size(), fi.ModTime()))
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}
