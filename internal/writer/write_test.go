package writer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/kcompile/kcompile/targets"
)

func write(dir string, t *targets.Tree, o Options) error {
	_, err := Write(dir, t, o)
	return err
}

// sample is a small tree with the modes targets write.
func sample(t testing.TB, tag string) *targets.Tree {
	tr := targets.NewTree()
	for p, mode := range map[string]fs.FileMode{
		"cluster/admin.conf":                           0o600,
		"nodes/cp1/etc/kubernetes/pki/ca.crt":          0o644,
		"nodes/cp1/etc/kubernetes/pki/ca.key":          0o600,
		"nodes/cp1/etc/systemd/system/kubelet.service": 0o644,
		"nodes/cp1/usr/local/lib/kcompile/install.sh":  0o755,
	} {
		must(t, tr.Add(p, []byte(tag+" "+p+"\n"), mode))
	}
	return tr
}

// entry is what Write must never change about a file it did not write.
type entry struct {
	mode fs.FileMode
	// data is a regular file's content or a symbolic link's target.
	data string
}

// snapshot records every entry under root without following symbolic
// links, root included.
func snapshot(t testing.TB, root string) map[string]entry {
	t.Helper()
	m := map[string]entry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := entry{mode: fi.Mode()}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.data = string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			if e.data, err = os.Readlink(p); err != nil {
				return err
			}
		}
		rel, _ := filepath.Rel(root, p)
		m[filepath.ToSlash(rel)] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameSnapshot(t *testing.T, what string, before, after map[string]entry) {
	t.Helper()
	for p, b := range before {
		if a, ok := after[p]; !ok {
			t.Errorf("%s: %s is gone", what, p)
		} else if a != b {
			t.Errorf("%s: %s changed: mode %v → %v, %q → %q", what, p, b.mode, a.mode, b.data, a.data)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s: %s appeared", what, p)
		}
	}
}

// testKey and otherKey stand for the manifest keys of two bundles.
var (
	testKey  = bytes.Repeat([]byte{0x5a}, 32)
	otherKey = bytes.Repeat([]byte{0xa5}, 32)
)

// checkTree asserts that dir holds exactly tree and a manifest that
// verifies with key.
func checkTree(t *testing.T, dir string, tree *targets.Tree, key []byte) {
	t.Helper()
	got := snapshot(t, dir)
	for _, f := range tree.Files() {
		if e := got[f.Path]; e.data != string(f.Data) || e.mode != f.Mode {
			t.Errorf("%s: %s is %v %q, want %v %q", dir, f.Path, e.mode, e.data, f.Mode, f.Data)
		}
		delete(got, f.Path)
	}
	delete(got, ".")
	delete(got, ManifestName)
	for p, e := range got {
		if !e.mode.IsDir() {
			t.Errorf("%s: %s is not in the tree", dir, p)
		}
	}
	if exists, err := inspect(dir, key); !exists || err != nil {
		t.Errorf("%s: the manifest does not verify: %v", dir, err)
	}
}

func TestWriteManifest(t *testing.T) {
	base := t.TempDir()
	tr := sample(t, "a")
	must(t, write(filepath.Join(base, "1", "systemd"), tr, Options{Version: "v1.2.3", Key: testKey}))
	must(t, write(filepath.Join(base, "2", "systemd"), tr, Options{Version: "v1.2.3", Key: testKey}))
	if _, ok := tr.Get(ManifestName); ok || tr.Len() != 5 {
		t.Errorf("Write changed the tree: %d files", tr.Len())
	}
	one, err := os.ReadFile(filepath.Join(base, "1", "systemd", ManifestName))
	must(t, err)
	two, err := os.ReadFile(filepath.Join(base, "2", "systemd", ManifestName))
	must(t, err)
	if !bytes.Equal(one, two) {
		t.Errorf("the same tree and version give two manifests:\n%s\n%s", one, two)
	}
	var m manifest
	must(t, json.Unmarshal(one, &m))
	if m.Version != "v1.2.3" || len(m.Files) != tr.Len() {
		t.Fatalf("manifest has version %q and %d files, want v1.2.3 and %d", m.Version, len(m.Files), tr.Len())
	}
	if !m.verifies(testKey) {
		t.Errorf("the manifest's MAC %q does not verify", m.MAC)
	}
	for i, f := range tr.Files() {
		sum := sha256.Sum256(f.Data)
		want := manifestFile{Path: f.Path, SHA256: hex.EncodeToString(sum[:]), Mode: fmt.Sprintf("%04o", f.Mode)}
		if m.Files[i] != want {
			t.Errorf("manifest entry %d is %+v, want %+v", i, m.Files[i], want)
		}
	}

	bad := targets.NewTree()
	must(t, bad.Add(ManifestName, []byte("{}"), 0o644))
	if err := write(filepath.Join(base, "3", "systemd"), bad, Options{}); err == nil {
		t.Error("a tree holding the manifest's name was written")
	}
	if _, err := os.Lstat(filepath.Join(base, "3", "systemd")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused tree was written: %v", err)
	}
}

// TestWriteNeverTouchesWhatItDidNotWrite puts something kcompile did not
// write, or changed since, at the target path: Write refuses without
// changing a byte anywhere, and with Replace moves it aside intact.
func TestWriteNeverTouchesWhatItDidNotWrite(t *testing.T) {
	const (
		unit = "nodes/cp1/etc/systemd/system/kubelet.service"
		key  = "nodes/cp1/etc/kubernetes/pki/ca.key"
	)
	own := func(t *testing.T, dir string) {
		must(t, write(dir, sample(t, "old"), Options{Version: "v1", Key: testKey}))
	}
	cases := []struct {
		name    string
		prepare func(t *testing.T, dir, precious string)
		want    []string
	}{
		{"foreign directory", func(t *testing.T, dir, _ string) {
			must(t, os.MkdirAll(filepath.Join(dir, "system"), 0o755))
			must(t, os.WriteFile(filepath.Join(dir, "system", "sshd.service"), []byte("[Service]\n"), 0o644))
			must(t, os.WriteFile(filepath.Join(dir, "journald.conf"), []byte("[Journal]\n"), 0o644))
		}, []string{"holds files kcompile did not write (it has no .kcompile-manifest.json): journald.conf, system"}},
		{"changed file", func(t *testing.T, dir, _ string) {
			own(t, dir)
			must(t, os.WriteFile(filepath.Join(dir, unit), []byte("[Service]\nExecStart=/bin/evil\n"), 0o644))
		}, []string{"changed since kcompile wrote it: " + unit + " (changed)"}},
		{"changed mode", func(t *testing.T, dir, _ string) {
			own(t, dir)
			must(t, os.Chmod(filepath.Join(dir, key), 0o644))
		}, []string{key + " (mode 0644, written 0600)"}},
		{"added file", func(t *testing.T, dir, _ string) {
			own(t, dir)
			must(t, os.WriteFile(filepath.Join(dir, "nodes/cp1/notes.txt"), []byte("mine\n"), 0o600))
		}, []string{"nodes/cp1/notes.txt (unexpected)"}},
		{"added directory", func(t *testing.T, dir, _ string) {
			own(t, dir)
			must(t, os.Mkdir(filepath.Join(dir, "nodes/cp2"), 0o755))
		}, []string{"nodes/cp2 (unexpected directory)"}},
		{"removed file", func(t *testing.T, dir, _ string) {
			own(t, dir)
			must(t, os.Remove(filepath.Join(dir, "cluster/admin.conf")))
		}, []string{"cluster/admin.conf (missing)"}},
		{"symlink inside the tree", func(t *testing.T, dir, precious string) {
			own(t, dir)
			must(t, os.Symlink(precious, filepath.Join(dir, "nodes/cp1/etc/precious")))
		}, []string{"nodes/cp1/etc/precious (unexpected symbolic link)"}},
		{"file replaced by a symlink", func(t *testing.T, dir, precious string) {
			own(t, dir)
			must(t, os.Remove(filepath.Join(dir, key)))
			must(t, os.Symlink(filepath.Join(precious, "ca.key"), filepath.Join(dir, key)))
		}, []string{key + " (now a symbolic link)"}},
		{"manifest removed", func(t *testing.T, dir, _ string) {
			own(t, dir)
			must(t, os.Remove(filepath.Join(dir, ManifestName)))
		}, []string{"it has no .kcompile-manifest.json): cluster, nodes"}},
		{"manifest's name deeper down", func(t *testing.T, dir, _ string) {
			own(t, dir)
			must(t, os.WriteFile(filepath.Join(dir, "nodes", ManifestName), []byte("{}"), 0o600))
		}, []string{"nodes/.kcompile-manifest.json (unexpected)"}},
		{"manifest forged to list a changed file", func(t *testing.T, dir, _ string) {
			// The edit the old check missed: the manifest is made to
			// claim the user's bytes, its MAC left as it was.
			own(t, dir)
			edited := []byte("[Service]\nExecStart=/bin/mine\n")
			must(t, os.WriteFile(filepath.Join(dir, unit), edited, 0o644))
			editManifest(t, dir, func(m *manifest) {
				for i := range m.Files {
					if m.Files[i].Path == unit {
						sum := sha256.Sum256(edited)
						m.Files[i].SHA256 = hex.EncodeToString(sum[:])
					}
				}
			})
		}, []string{"has a .kcompile-manifest.json that does not verify with this secrets bundle"}},
		{"manifest forged with a recomputed MAC under another key", func(t *testing.T, dir, _ string) {
			own(t, dir)
			must(t, os.Remove(filepath.Join(dir, "cluster/admin.conf")))
			editManifest(t, dir, func(m *manifest) {
				m.Files = m.Files[1:]
				m.MAC = macPrefix + hex.EncodeToString(manifestMAC(otherKey, m))
			})
		}, []string{"does not verify with this secrets bundle"}},
		{"written with another bundle", func(t *testing.T, dir, _ string) {
			must(t, write(dir, sample(t, "new"), Options{Version: "v2", Key: otherKey}))
		}, []string{"does not verify with this secrets bundle (it was edited, or written with another bundle)"}},
		{"manifest without a MAC", func(t *testing.T, dir, _ string) {
			must(t, write(dir, sample(t, "new"), Options{Version: "v2"}))
		}, []string{"has a .kcompile-manifest.json without a MAC"}},
		{"manifest garbled", func(t *testing.T, dir, _ string) {
			own(t, dir)
			must(t, os.WriteFile(filepath.Join(dir, ManifestName), []byte("{"), 0o600))
		}, []string{"has a .kcompile-manifest.json kcompile cannot read"}},
		{"plain file", func(t *testing.T, dir, _ string) {
			must(t, os.MkdirAll(filepath.Dir(dir), 0o755))
			must(t, os.WriteFile(dir, []byte("not a tree\n"), 0o644))
		}, []string{"is a regular file, not a tree kcompile wrote"}},
		{"symlink to a directory", func(t *testing.T, dir, precious string) {
			must(t, os.MkdirAll(filepath.Dir(dir), 0o755))
			must(t, os.Symlink(precious, dir))
		}, []string{"is a symbolic link, not a tree kcompile wrote"}},
		{"symlink to our own tree", func(t *testing.T, dir, _ string) {
			elsewhere := filepath.Join(filepath.Dir(dir), "elsewhere")
			own(t, elsewhere)
			must(t, os.Symlink(elsewhere, dir))
		}, []string{"is a symbolic link"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "out", "systemd")
			precious := filepath.Join(base, "precious")
			must(t, os.Mkdir(precious, 0o700))
			must(t, os.WriteFile(filepath.Join(precious, "ca.key"), []byte("someone else's key\n"), 0o600))
			c.prepare(t, dir, precious)
			before := snapshot(t, base)
			beforeDir := snapshot(t, dir)
			tree := sample(t, "new")

			_, err := Write(dir, tree, Options{Version: "v2", Key: testKey})
			var fe *ForeignError
			if !errors.As(err, &fe) {
				t.Fatalf("Write returned %v, want a *ForeignError", err)
			}
			if fe.Dir != dir {
				t.Errorf("the error names %s, want %s", fe.Dir, dir)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error %q does not say %q", err, w)
				}
			}
			sameSnapshot(t, "after a refusal", before, snapshot(t, base))

			res, err := Write(dir, tree, Options{Version: "v2", Replace: true, Key: testKey})
			must(t, err)
			if want := dir + ".replaced-1"; res.MovedAside != want {
				t.Fatalf("moved aside to %q, want %q", res.MovedAside, want)
			}
			sameSnapshot(t, "moved aside", beforeDir, snapshot(t, res.MovedAside))
			after := snapshot(t, base)
			for p, e := range before {
				if strings.HasPrefix(p, "precious") || strings.HasPrefix(p, "out/elsewhere") {
					if after[p] != e {
						t.Errorf("%s changed outside the target", p)
					}
				}
			}
			checkTree(t, dir, tree, testKey)
		})
	}
}

// editManifest rewrites dir's manifest as a user with an editor could:
// the same layout, its MAC kept unless edit changes it.
func editManifest(t *testing.T, dir string, edit func(*manifest)) {
	t.Helper()
	p := filepath.Join(dir, ManifestName)
	data, err := os.ReadFile(p)
	must(t, err)
	var m manifest
	must(t, json.Unmarshal(data, &m))
	edit(&m)
	out, err := json.Marshal(m)
	must(t, err)
	must(t, os.WriteFile(p, out, manifestMode))
}

func TestWriteReplacesOwnTree(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "systemd")
	must(t, os.Mkdir(dir, 0o755))
	// An empty directory holds nothing to lose.
	must(t, write(dir, sample(t, "1"), Options{Key: testKey}))
	checkTree(t, dir, sample(t, "1"), testKey)
	for _, tag := range []string{"2", "3"} {
		res, err := Write(dir, sample(t, tag), Options{Key: testKey})
		must(t, err)
		if res.MovedAside != "" {
			t.Errorf("our own tree was kept at %s", res.MovedAside)
		}
		checkTree(t, dir, sample(t, tag), testKey)
	}
	// Without a key (nspawn's and sim's own directories) the manifest
	// is trusted as written, as before keys: the keyed tree is replaced.
	res, err := Write(dir, sample(t, "4"), Options{})
	must(t, err)
	if res.MovedAside != "" {
		t.Errorf("our own tree was kept at %s", res.MovedAside)
	}
	checkTree(t, dir, sample(t, "4"), nil)
	entries, err := os.ReadDir(base)
	must(t, err)
	if len(entries) != 1 {
		t.Errorf("left next to the tree: %v", entries)
	}
}

// TestWriteLocked holds the lock as another kcompile would.
func TestWriteLocked(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "systemd")
	must(t, write(dir, sample(t, "1"), Options{}))
	before := snapshot(t, base)
	unlock, err := lockDir(base)
	must(t, err)
	_, err = Write(dir, sample(t, "2"), Options{})
	var le *LockedError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "another kcompile is writing to "+base) {
		t.Errorf("Write into a locked directory returned %v, want a *LockedError", err)
	}
	sameSnapshot(t, "while locked", before, snapshot(t, base))
	unlock()
	must(t, write(dir, sample(t, "2"), Options{}))
	checkTree(t, dir, sample(t, "2"), nil)
}

// TestWriteConcurrent races writers into one directory: one tree wins
// whole, every loser gets the lock error.
func TestWriteConcurrent(t *testing.T) {
	const writers, rounds = 4, 3
	base := t.TempDir()
	dir := filepath.Join(base, "systemd")
	trees := make([]*targets.Tree, writers)
	for i := range trees {
		trees[i] = targets.NewTree()
		for f := range 1000 {
			must(t, trees[i].Add(fmt.Sprintf("nodes/n%02d/file%d", f%50, f), []byte(fmt.Sprintf("writer %d file %d\n", i, f)), 0o644))
		}
	}
	locked := 0
	for range rounds {
		start := make(chan struct{})
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				<-start
				_, errs[i] = Write(dir, trees[i], Options{})
			})
		}
		close(start)
		wg.Wait()
		won := -1
		for i, err := range errs {
			var le *LockedError
			switch {
			case err == nil:
				won = i
			case errors.As(err, &le):
				locked++
			default:
				t.Errorf("writer %d: %v, want success or the lock error", i, err)
			}
		}
		if won < 0 {
			t.Fatal("no writer succeeded")
		}
		got, err := os.ReadFile(filepath.Join(dir, "nodes/n01/file1"))
		must(t, err)
		i := 0
		fmt.Sscanf(string(got), "writer %d", &i)
		checkTree(t, dir, trees[i], nil)
	}
	if locked == 0 {
		t.Error("no writer ever met the lock")
	}
	entries, err := os.ReadDir(base)
	must(t, err)
	if len(entries) != 1 {
		t.Errorf("left next to the tree: %v", entries)
	}
}

// BenchmarkInspectLarge verifies a manifest of examples/large's size.
func BenchmarkInspectLarge(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "systemd")
	tr := targets.NewTree()
	for i := range 90_000 {
		must(b, tr.Add(fmt.Sprintf("nodes/n%04d/etc/file%d", i/18, i), bytes.Repeat([]byte{byte(i)}, 2048), 0o644))
	}
	if _, err := Write(dir, tr, Options{Key: testKey}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := inspect(dir, testKey); err != nil {
			b.Fatal(err)
		}
	}
}

func TestWriteAtomicAndModes(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := t.TempDir()
	dir := filepath.Join(base, "out", "pki")
	tr := targets.NewTree()
	must(t, tr.Add("nodes/cp1/etc/kubernetes/pki/ca.crt", []byte("cert"), 0o644))
	must(t, tr.Add("nodes/cp1/etc/kubernetes/pki/ca.key", []byte("key"), 0o600))
	must(t, write(dir, tr, Options{}))
	for p, want := range map[string]os.FileMode{"nodes/cp1/etc/kubernetes/pki/ca.crt": 0o644, "nodes/cp1/etc/kubernetes/pki/ca.key": 0o600, ManifestName: 0o600} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %04o under umask 077, want %04o", p, fi.Mode().Perm(), want)
		}
	}
	// Our own unchanged tree is replaced entirely, not merged.
	tr2 := targets.NewTree()
	must(t, tr2.Add("other", []byte("x"), 0o644))
	must(t, write(dir, tr2, Options{}))
	if _, err := os.Stat(filepath.Join(dir, "nodes")); !os.IsNotExist(err) {
		t.Errorf("old files survive a replace: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "other")); err != nil || string(b) != "x" {
		t.Errorf("new tree not written: %q %v", b, err)
	}
	entries, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "pki" {
		t.Errorf("temporary directories left next to the tree: %v", entries)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
