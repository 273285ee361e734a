package writer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/targets"
)

// failingTree is sample with one more file that cannot be created: its
// name is longer than any file system allows (NAME_MAX is 255 bytes). It
// sorts last, so Write fails midway, with most of the tree written.
func failingTree(t testing.TB) *targets.Tree {
	tr := sample(t, "new")
	must(t, tr.Add("nodes/cp1/"+strings.Repeat("z", 300), []byte("never\n"), 0o644))
	return tr
}

// TestWriteFailureLeavesNothing is issue 29: a write that failed midway
// left its partial temporary tree in the output's parent, because the
// cleanup read a result the error path had emptied. Whether OUT is new or
// holds an earlier tree, a failed Write leaves the parent exactly as it
// was.
func TestWriteFailureLeavesNothing(t *testing.T) {
	t.Run("new", func(t *testing.T) {
		parent := t.TempDir()
		must(t, os.WriteFile(filepath.Join(parent, "notes"), []byte("kept\n"), 0o644))
		before := snapshot(t, parent)
		if err := write(filepath.Join(parent, "out"), failingTree(t), Options{}); err == nil {
			t.Fatal("Write of a file no file system can name succeeded")
		}
		sameSnapshot(t, "after a failed write", before, snapshot(t, parent))
	})
	t.Run("over its own tree", func(t *testing.T) {
		parent := t.TempDir()
		out := filepath.Join(parent, "out")
		old := sample(t, "old")
		must(t, write(out, old, Options{Key: testKey}))
		before := snapshot(t, parent)
		if err := write(out, failingTree(t), Options{Key: testKey}); err == nil {
			t.Fatal("Write of a file no file system can name succeeded")
		}
		sameSnapshot(t, "after a failed write", before, snapshot(t, parent))
		checkTree(t, out, old, testKey)
	})
}
