//go:build unix

package pipeline

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
)

// TestLoadBundleRefusesNonRegularFiles is issue 29: a bundle path naming
// a named pipe hung kcompile, since opening a pipe waits for a writer.
// A pipe, a directory and a device are refused at once, as a diagnostic
// at the path; a symbolic link to a regular bundle is still read.
func TestLoadBundleRefusesNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	pipe := filepath.Join(dir, "pipe.json")
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir.json")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{pipe: "a named pipe", sub: "a directory"}
	if info, err := os.Stat("/dev/null"); err == nil && info.Mode()&os.ModeDevice != 0 {
		cases["/dev/null"] = "a device"
	}
	for path, what := range cases {
		type result struct {
			bundle bool
			msg    string
			code   string
			file   string
			n      int
			err    error
		}
		done := make(chan result, 1)
		go func() {
			b, diags, err := LoadBundle(path)
			r := result{bundle: b != nil, n: len(diags), err: err}
			if len(diags) > 0 {
				r.msg, r.code, r.file = diags[0].Message, diags[0].Code, diags[0].Primary().File
			}
			done <- r
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(5 * time.Second):
			// Release the reader before failing, so the test ends.
			if w, err := os.OpenFile(pipe, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
			t.Fatalf("%s: LoadBundle did not return within 5s", path)
		}
		want := "not a kcompile secrets bundle: " + what
		if r.err != nil || r.bundle || r.n != 1 || r.code != pki.CodeBundleMalformed || r.file != path || !strings.HasPrefix(r.msg, want) {
			t.Errorf("%s: got bundle %v, %d diagnostics (%s at %s: %q), error %v; want one %s at the path saying %q",
				path, r.bundle, r.n, r.code, r.file, r.msg, r.err, pki.CodeBundleMalformed, want)
		}
	}

	link := filepath.Join(dir, "link.json")
	target := fixture.BundleFile(t)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if b, diags, err := LoadBundle(link); err != nil || len(diags) != 0 || b == nil {
		t.Errorf("a link to a bundle: got %v, %v, %v; want the bundle", b != nil, diags, err)
	}
}
