package nspawn

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/cloudinit"
	"github.com/kcompile/kcompile/targets/ignition"
	"github.com/kcompile/kcompile/targets/systemd"
)

// fakeImage is a root file system with the links of a merged-/usr
// Debian, which up's files are laid out through.
func fakeImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"usr/lib", "usr/bin", "usr/sbin", "etc/systemd/system", "var/lib"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"lib": "usr/lib", "bin": "usr/bin", "sbin": "usr/sbin"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestCompiledFilesReachTheMachines lays out every machine of every
// example as up does before booting it, on a host that needs every
// adjustment, and holds the machine's root to the compiled trees: with
// the systemd target every file of the node's tree is in the layer the
// machine's overlay shows it from, with its compiled bytes and mode, and
// nothing up writes in the layer above hides it; with the cloud-init
// target the node's seed is the compiled one, and up writes nothing
// where cloud-init lays the node's tree.
func TestCompiledFilesReachTheMachines(t *testing.T) {
	image := fakeImage(t)
	for _, example := range fixture.Examples() {
		for _, target := range Targets() {
			t.Run(example+"/"+string(target), func(t *testing.T) {
				m := fixture.Material(t, example, nil)
				c := m.Cluster
				// As kcompile up's caller builds the trees.
				sd, err := systemd.Build(m, systemd.Options{})
				if err != nil {
					t.Fatal(err)
				}
				var ci, ign *targets.Tree
				if target == pipeline.CloudInit {
					if ci, _, err = cloudinit.Build(m, sd); err != nil {
						t.Fatal(err)
					}
				}
				if target == pipeline.Ignition {
					if c.Boot == nil {
						// Check refuses it: no Matchbox to serve at.
						return
					}
					if ign, _, err = ignition.Build(m, sd); err != nil {
						t.Fatal(err)
					}
				}
				work := filepath.Join(t.TempDir(), "work")
				if err := os.Mkdir(work, 0o700); err != nil {
					t.Fatal(err)
				}
				p, err := newPlan(c, work)
				if err != nil {
					t.Fatal(err)
				}
				cl := &Cluster{cfg: Config{Cluster: c, Systemd: sd, CloudInit: ci, Ignition: ign, Target: target, Work: work,
					Registry: fakeRegistry(registries(t, c)), Version: "test"}, p: p, image: image}
				cl.j = &journal{path: filepath.Join(work, StateName), state: State{Cluster: c.Name}}
				mirror, mirrorAdjust, err := cl.mirrorAddress()
				if err != nil {
					t.Fatal(err)
				}
				cl.mirror = mirror
				if cl.adjust, err = decide(c, p, everyFact(), target, mirrorAdjust); err != nil {
					t.Fatal(err)
				}
				if err := cl.writeTrees(); err != nil {
					t.Fatal(err)
				}
				for _, mach := range p.machines {
					if target == pipeline.CloudInit && mach.node.OS.Ignition() || target == pipeline.Ignition && !mach.node.OS.Ignition() {
						// Check refuses them: the target's tree has
						// none of their files.
						continue
					}
					if err := cl.layout(c, mach); err != nil {
						t.Fatalf("%s: %v", mach.name, err)
					}
					checkMachineRoot(t, cl, mach)
				}
			})
		}
	}
}

// registries are the registries a cluster's images name, as up's
// registry reports them.
func registries(t *testing.T, c *ir.Cluster) []string {
	t.Helper()
	refs, err := systemd.Images(c)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range refs {
		ref, err := name.ParseReference(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ref.Context().RegistryStr())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// checkMachineRoot holds one machine's layers to its node's compiled
// files.
func checkMachineRoot(t *testing.T, cl *Cluster, mach *machine) {
	t.Helper()
	upper := mach.upper()
	// An overlay's upper layer hides what lies below a path it holds a
	// file at, or a whiteout (a device) or an opaque directory; up's
	// makes only files and directories.
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() && !d.IsDir() {
			t.Errorf("%s: up's layer holds %s, of type %s", mach.name, p, d.Type())
		}
		if d.IsDir() {
			if _, err := os.Lstat(filepath.Join(p, ".wh..wh..opq")); err == nil {
				t.Errorf("%s: up's layer makes %s opaque", mach.name, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var compiled []targets.File
	for _, f := range cl.cfg.Systemd.Files() {
		if node, rel, ok := layout.SplitTree(f.Path); ok && node == mach.name {
			f.Path = rel
			compiled = append(compiled, f)
		}
	}
	if len(compiled) == 0 {
		t.Fatalf("%s: the tree has no files of the node", mach.name)
	}
	for _, f := range compiled {
		// Nothing of up's at the file's path, or at a directory's on
		// the way to it.
		parts := strings.Split(f.Path, "/")
		for i := range parts {
			prefix := filepath.Join(parts[:i+1]...)
			fi, err := os.Lstat(filepath.Join(upper, prefix))
			if err != nil {
				continue
			}
			if i == len(parts)-1 || !fi.IsDir() {
				t.Errorf("%s: up writes %s, hiding the compiled /%s", mach.name, prefix, f.Path)
			}
		}
	}
	switch cl.cfg.Target {
	case pipeline.Systemd:
		tree := filepath.Join(cl.cfg.Work, "tree", layout.NodeTree(mach.name, ""))
		if len(mach.lowers) == 0 || mach.lowers[0] != tree {
			t.Fatalf("%s: the node's tree is not the layer under up's: %q", mach.name, mach.lowers)
		}
		for _, f := range compiled {
			sameFile(t, mach.name, filepath.Join(tree, f.Path), f)
		}
	case pipeline.CloudInit:
		if slices.Contains(mach.lowers, filepath.Join(cl.cfg.Work, "tree", layout.NodeTree(mach.name, ""))) {
			t.Errorf("%s: the cloud-init target boots with the node's tree as a layer", mach.name)
		}
		seeded := 0
		for _, f := range cl.cfg.CloudInit.Files() {
			node, rel, ok := layout.SplitTree(f.Path)
			if !ok || node != mach.name {
				continue
			}
			sameFile(t, mach.name, filepath.Join(upper, layout.CloudInitNoCloudSeed+rel), f)
			seeded++
		}
		if seeded == 0 {
			t.Errorf("%s: no seed", mach.name)
		}
	case pipeline.Ignition:
		// The machine boots the image and Ignition's program; its
		// config writes the node's files, where up writes nothing
		// (above), and up gives it its profile's command line and its
		// family's first-boot flag.
		if len(mach.lowers) == 0 || mach.lowers[len(mach.lowers)-1] != cl.image || slices.Contains(mach.lowers, filepath.Join(cl.cfg.Work, "tree", layout.NodeTree(mach.name, ""))) {
			t.Errorf("%s: the Ignition target boots layers %q", mach.name, mach.lowers)
		}
		cmdline, err := os.ReadFile(filepath.Join(upper, layout.UpCmdline))
		if err != nil || !strings.Contains(string(cmdline), "ignition.config.url="+cl.cfg.Cluster.Boot.MatchboxURL+"/ignition?mac="+strings.ReplaceAll(mach.node.MAC, ":", "-")) {
			t.Errorf("%s: kernel command line %q (%v)", mach.name, cmdline, err)
		}
		if _, err := os.Stat(filepath.Join(upper, firstBootFlag(mach.node.OS))); err != nil {
			t.Errorf("%s: no first-boot flag: %v", mach.name, err)
		}
	}
}

// sameFile checks that the file at p is f, byte for byte, with f's mode.
func sameFile(t *testing.T, machine, p string, f targets.File) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Errorf("%s: %s: %v", machine, f.Path, err)
		return
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != f.Mode.Perm() {
		t.Errorf("%s: %s is %s in the machine, compiled %s", machine, f.Path, fi.Mode(), f.Mode)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, f.Data) {
		t.Errorf("%s: %s differs from the compiled file", machine, f.Path)
	}
}
