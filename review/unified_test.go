package review

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnifiedShape(t *testing.T) {
	a := "a\nb\nc\nd\ne\nf\ng\nh\n"
	b := "a\nb\nc\nD\ne\nf\ng\nh\n"
	want := "--- old\n+++ new\n@@ -1,7 +1,7 @@\n a\n b\n c\n-d\n+D\n e\n f\n g\n"
	if got := Unified("old", "new", []byte(a), []byte(b), 3); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if Unified("x", "y", []byte(a), []byte(a), 3) != "" {
		t.Error("equal inputs give a diff")
	}
}

// TestUnifiedAppliesWithGNUPatch is the property the review command relies
// on: for random edits, GNU patch turns the old text into the new one with
// the printed diff.
func TestUnifiedAppliesWithGNUPatch(t *testing.T) {
	patch, err := exec.LookPath("patch")
	if err != nil {
		t.Fatal("GNU patch is required (Debian package patch)")
	}
	r := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	for iter := 0; iter < 150; iter++ {
		old := randomText(r)
		neu := edit(r, old)
		if r.IntN(5) == 0 {
			neu = strings.TrimSuffix(neu, "\n")
		}
		if r.IntN(7) == 0 {
			old = strings.TrimSuffix(old, "\n")
		}
		d := Unified("a/f", "b/f", []byte(old), []byte(neu), 3)
		if old == neu {
			if d != "" {
				t.Fatal("diff of equal texts")
			}
			continue
		}
		f := filepath.Join(dir, "f")
		if err := os.WriteFile(f, []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(patch, "--quiet", "--force", "-p1", "--no-backup-if-mismatch", "-d", dir)
		cmd.Stdin = strings.NewReader(d)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("iteration %d: patch failed: %v\n%s\ndiff:\n%s", iter, err, out, d)
		}
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != neu {
			t.Fatalf("iteration %d: patch produced\n%q\nwant\n%q\ndiff:\n%s", iter, got, neu, d)
		}
	}
}

func randomText(r *rand.Rand) string {
	var b strings.Builder
	for i := r.IntN(40); i >= 0; i-- {
		b.WriteString(strings.Repeat(string(rune('a'+r.IntN(6))), 1+r.IntN(3)))
		b.WriteByte('\n')
	}
	return b.String()
}

func edit(r *rand.Rand, s string) string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for n := r.IntN(6); n >= 0; n-- {
		i := 0
		if len(lines) > 0 {
			i = r.IntN(len(lines) + 1)
		}
		switch r.IntN(3) {
		case 0:
			lines = append(lines[:i], append([]string{"new" + string(rune('a'+r.IntN(26))) + "\n"}, lines[i:]...)...)
		case 1:
			if i < len(lines) {
				lines = append(lines[:i], lines[i+1:]...)
			}
		default:
			if i < len(lines) {
				lines[i] = "changed\n"
			}
		}
	}
	return strings.Join(lines, "")
}
