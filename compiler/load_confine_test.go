package compiler

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler/diag"
)

const confineSpec = `apiVersion: "kcompile.dev/v1alpha1"
kubernetes: version: "1.37.2"
controlPlane: {nodes: cp1: address: "10.0.0.11", schedulable: true}
network: nodes: ["10.0.0.0/16"]
workers: nodes: w1: address: "10.0.1.1"
`

const confineModule = "module: \"example.com/spec\"\nlanguage: version: \"v0.12.0\"\n"

// writeTree writes files (slash paths) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// compileQuickly compiles src, failing the test if that blocks.
func compileQuickly(t *testing.T, src Source) diag.List {
	t.Helper()
	done := make(chan diag.List, 1)
	go func() {
		_, diags := Compile(src)
		done <- diags
	}()
	select {
	case d := <-done:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("compiling blocked")
		return nil
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// wantRefusal checks that diags hold one error of code naming file with
// reason, at a position in posFile, and that marker appears nowhere.
func wantRefusal(t *testing.T, diags diag.List, code, file, reason, posFile, marker string) {
	t.Helper()
	for _, d := range diags {
		for _, s := range []string{d.Message, d.Hint} {
			if marker != "" && strings.Contains(s, marker) {
				t.Errorf("the marker leaked into a diagnostic: %+v", d)
			}
		}
	}
	for _, d := range diags {
		if d.Code == code && d.Severity == diag.Error && strings.Contains(d.Message, diag.Quote(file)) && strings.Contains(d.Message, reason) &&
			len(d.Positions) > 0 && d.Positions[0].File == posFile {
			return
		}
	}
	t.Errorf("no %s error naming %s (%s) at %s in:\n%v", code, file, reason, posFile, diags)
}

func TestLoadEmbedConfined(t *testing.T) {
	base := t.TempDir()
	writeTree(t, base, map[string]string{
		"outside/secret.json":     `{"token": "MARKER-c0ffee"}`,
		"spec/cue.mod/module.cue": confineModule,
		"spec/data/name.json":     `"h"`,
		"spec/h.cue":              "@extern(embed)\npackage cluster\n\nname: _ @embed(file=name.json)\nx: _ @embed(file=secret.json)\n" + confineSpec,
	})
	spec := filepath.Join(base, "spec")
	mustSymlink(t, "data/name.json", filepath.Join(spec, "name.json"))

	for _, target := range []string{"../outside/secret.json", filepath.Join(base, "outside/secret.json")} {
		os.Remove(filepath.Join(spec, "secret.json"))
		mustSymlink(t, target, filepath.Join(spec, "secret.json"))
		diags := compileQuickly(t, Source{Dir: spec})
		wantRefusal(t, diags, CodeLoad, "secret.json", "leads out of the directory", filepath.Join(spec, "h.cue"), "MARKER-c0ffee")
		if len(diags) > 0 && len(diags[0].Positions) > 0 && diags[0].Positions[0].Line != 5 {
			t.Errorf("refusal not at the @embed attribute: %+v", diags[0].Positions)
		}
	}

	// A link inside the directory embeds its file.
	os.Remove(filepath.Join(spec, "secret.json"))
	writeTree(t, base, map[string]string{"spec/h.cue": "@extern(embed)\npackage cluster\n\nname: _ @embed(file=name.json)\n" + confineSpec})
	c, diags := Compile(Source{Dir: spec})
	if diags.HasErrors() {
		t.Fatalf("a link inside the spec directory: %v", diags)
	}
	if c.Name != "h" {
		t.Errorf("embedded name = %q, want h", c.Name)
	}
}

func TestLoadSpecialFiles(t *testing.T) {
	base := t.TempDir()
	writeTree(t, base, map[string]string{
		"spec/h.cue":               "package cluster\n\nname: \"h\"\n" + confineSpec,
		"embed/cue.mod/module.cue": confineModule,
		"embed/h.cue":              "@extern(embed)\npackage cluster\n\nname: _ @embed(file=data.json)\n" + confineSpec,
	})
	spec, embed := filepath.Join(base, "spec"), filepath.Join(base, "embed")
	for _, p := range []string{filepath.Join(spec, "x.cue"), filepath.Join(embed, "data.json")} {
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal("making a FIFO:", err)
		}
	}
	wantRefusal(t, compileQuickly(t, Source{Dir: spec}), CodeLoad, "x.cue", "named pipe (FIFO)", filepath.Join(spec, "x.cue"), "")
	wantRefusal(t, compileQuickly(t, Source{Dir: embed}), CodeLoad, "data.json", "named pipe (FIFO)", filepath.Join(embed, "h.cue"), "")

	// A link inside the directory to a FIFO is refused too.
	os.Remove(filepath.Join(spec, "x.cue"))
	mustSymlink(t, "../embed/data.json", filepath.Join(spec, "y.cue"))
	wantRefusal(t, compileQuickly(t, Source{Dir: spec}), CodeLoad, "y.cue", "leads out of the directory", filepath.Join(spec, "y.cue"), "")
}

func TestLoadSpecDirLoop(t *testing.T) {
	loop := filepath.Join(t.TempDir(), "loop")
	mustSymlink(t, "loop", loop)
	diags := compileQuickly(t, Source{Dir: loop})
	if len(diags) != 1 || !strings.Contains(diags[0].Message, "symbolic-link loop") {
		t.Errorf("a looping spec directory: %v", diags)
	}
}

func TestLoadOverlayConfined(t *testing.T) {
	// The overlay lays files over the directory, replacing one of the
	// same name.
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"h.cue": "package cluster\n\nname: 1\n", "w.cue": "package cluster\n\nlabels: tier: \"a\"\n"})
	c, diags := Compile(Source{Dir: dir, Overlay: map[string][]byte{"h.cue": []byte("package cluster\n\nname: \"h\"\n" + confineSpec)}})
	if diags.HasErrors() {
		t.Fatalf("overlay: %v", diags)
	}
	if c.Name != "h" {
		t.Errorf("name = %q, want h", c.Name)
	}
}

func TestPolicyEmbedConfined(t *testing.T) {
	base := t.TempDir()
	writeTree(t, base, map[string]string{
		"outside/secret.json":       `{"token": "MARKER-beef"}`,
		"policy/cue.mod/module.cue": confineModule,
		"policy/p.cue":              "@extern(embed)\npackage policy\n\nleaked: _ @embed(file=secret.json)\npolicies: named: {message: \"named\", require: spec: name: leaked.token}\n",
		"spec/h.cue":                "package cluster\n\nname: \"h\"\n" + confineSpec,
	})
	pol := filepath.Join(base, "policy")
	mustSymlink(t, "../outside/secret.json", filepath.Join(pol, "secret.json"))
	_, diags := Compile(Source{Dir: filepath.Join(base, "spec"), Policies: []string{pol}})
	wantRefusal(t, diags, CodePolicyLoad, "secret.json", "leads out of the directory", filepath.Join(pol, "p.cue"), "MARKER-beef")

	if err := syscall.Mkfifo(filepath.Join(base, "policy/q.cue"), 0o644); err != nil {
		t.Fatal("making a FIFO:", err)
	}
	os.Remove(filepath.Join(pol, "secret.json"))
	wantRefusal(t, compileQuickly(t, Source{Dir: filepath.Join(base, "spec"), Policies: []string{pol}}), CodePolicyLoad, "q.cue", "named pipe", filepath.Join(pol, "q.cue"), "")
}
