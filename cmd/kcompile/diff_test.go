package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"html"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/fixture"
)

// copySpec copies an example and applies string replacements to its file.
func copySpec(t *testing.T, example, file string, replace ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../../examples/"+example)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(replace); i += 2 {
		replaceIn(t, filepath.Join(dir, file), replace[i], replace[i+1])
	}
	return dir
}

// secretForms are strings that would betray a secret: lines and slices
// of its PEM, base64 and hex forms.
func secretForms(raw []byte) []string {
	var out []string
	middle := func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		i := (len(s) - n) / 2
		return s[i : i+n]
	}
	for rest := raw; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if !strings.Contains(block.Type, "PRIVATE KEY") {
			continue
		}
		body := strings.Split(string(pem.EncodeToMemory(block)), "\n")
		out = append(out, body[1:len(body)-2]...)
		out = append(out, middle(base64.StdEncoding.EncodeToString(pem.EncodeToMemory(block)), 40))
		out = append(out, middle(hex.EncodeToString(block.Bytes), 32))
		out = append(out, middle(base64.StdEncoding.EncodeToString(block.Bytes), 32))
	}
	return out
}

// TestDiffShowsNoSecret diffs specs whose changes re-key, add and change
// credentials, with a bundle made for the test, and searches every output
// format of every target for the bundle's secrets and every private key
// of both compiled trees.
func TestDiffShowsNoSecret(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1780272000")
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle.json")
	if code, o, e := kcompile(t, "", "secrets", "init", "-o", bundle); code != 0 {
		t.Fatalf("secrets init: %s%s", o, e)
	}
	raw, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	var b struct {
		Seed           string `json:"seed"`
		EncryptionKey  string `json:"encryptionKey"`
		BootstrapToken string `json:"bootstrapToken"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	_, tokenSecret, _ := strings.Cut(b.BootstrapToken, ".")
	forbidden := append([]string{b.Seed, b.EncryptionKey, tokenSecret}, secretForms(raw)...)

	base := copySpec(t, "ha-stacked", "cluster.cue")
	heads := []string{
		copySpec(t, "ha-stacked", "cluster.cue", `etcd: topology: "stacked"`, "etcd: topology: \"stacked\"\npki: keyAlgorithm: \"RSA-2048\""),
		copySpec(t, "ha-stacked", "workers.cue", "count:        6", "count:        7", `"52:54:00:00:01:15",`, `"52:54:00:00:01:15", "52:54:00:00:01:16",`),
		copySpec(t, "ha-stacked", "cluster.cue", `extraSANs: ["api.prod-eu1.example.com"]`, `extraSANs: ["k8s.example.com"]`),
	}
	for _, spec := range append([]string{base}, heads...) {
		out := filepath.Join(t.TempDir(), "out")
		if code, o, e := kcompile(t, "", "build", spec, "-s", bundle, "-o", out); code != 0 {
			t.Fatalf("build: %s%s", o, e)
		}
		if err := filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			forbidden = append(forbidden, secretForms(data)...)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(forbidden) < 100 {
		t.Fatalf("only %d secret forms collected", len(forbidden))
	}
	for _, head := range heads {
		for _, format := range []string{"text", "markdown", "json"} {
			code, stdout, stderr := kcompile(t, "", "diff", base, head, "-s", bundle, "--target", "all", "-o", format)
			if code != 1 {
				t.Fatalf("diff exit %d: %s", code, stderr)
			}
			for _, s := range forbidden {
				if s != "" && strings.Contains(stdout+stderr, s) {
					t.Fatalf("diff -o %s of %s shows secret material %q", format, head, s)
				}
			}
		}
	}
}

// TestDiffGolden: kcompile diff --golden compares a built tree with a
// golden directory the way the golden tests do.
func TestDiffGolden(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1780272000")
	out := filepath.Join(t.TempDir(), "out")
	if code, o, e := kcompile(t, "", "build", "../../examples/ha-stacked", "-s", testSecrets(t), "-o", out); code != 0 {
		t.Fatalf("build: %s%s", o, e)
	}
	built := filepath.Join(out, "systemd")
	if code, o, e := kcompile(t, "", "diff", "--golden", "../../golden/ha-stacked/systemd", built); code != 0 || !strings.Contains(o, "no differences") {
		t.Fatalf("fresh build differs from its golden (exit %d):\n%s%s", code, o, e)
	}
	replaceIn(t, filepath.Join(built, "nodes/w02/var/lib/kubelet/config.yaml"), "maxPods: 110", "maxPods: 111")
	if err := os.Remove(filepath.Join(built, "nodes/w03/etc/sysctl.d/99-kubernetes.conf")); err != nil {
		t.Fatal(err)
	}
	code, o, e := kcompile(t, "", "diff", "--golden", "../../golden/ha-stacked/systemd", built)
	if code != 1 {
		t.Fatalf("exit %d: %s%s", code, o, e)
	}
	for _, want := range []string{
		"  w02: modified, 1 file; restarts kubelet.service\n",
		"-maxPods: 110\n+maxPods: 111\n",
		"=== nodes/w03/etc/sysctl.d/99-kubernetes.conf: text, removed\n",
	} {
		if !strings.Contains(o, want) {
			t.Errorf("diff --golden lacks %q:\n%s", want, o)
		}
	}
	if code, _, e := kcompile(t, "", "diff", "--golden", "../../golden/ha-stacked/systemd"); code != 2 || !strings.Contains(e, "GOLDEN OUT") {
		t.Errorf("one argument: exit %d: %s", code, e)
	}
}

// TestDiffMarkdownPicture diffs ha-stacked against itself with a seventh
// worker and cp3 moved from zone c to zone b, as Markdown for a pull
// request: the Mermaid block above the summary is what Mermaid's own CLI
// renders, with the added worker and the moved node in it.
func TestDiffMarkdownPicture(t *testing.T) {
	base := copySpec(t, "ha-stacked", "cluster.cue")
	head := copySpec(t, "ha-stacked", "cluster.cue",
		`cp3: {address: "10.0.0.13", mac: "52:54:00:00:00:13", zone: "c"}`, `cp3: {address: "10.0.0.13", mac: "52:54:00:00:00:13", zone: "b"}`)
	replaceIn(t, filepath.Join(head, "workers.cue"), "count:        6", "count:        7")
	replaceIn(t, filepath.Join(head, "workers.cue"), `"52:54:00:00:01:15",`, `"52:54:00:00:01:15", "52:54:00:00:01:16",`)
	code, out, errOut := kcompile(t, "", "diff", base, head, "-s", fixture.BundleFile(t), "-o", "markdown")
	if code != exitProblems {
		t.Fatalf("diff: exit %d, want %d (different)\n%s%s", code, exitProblems, out, errOut)
	}
	picture, summary, ok := strings.Cut(out, "```\n\n- nodes: ")
	if !ok || !strings.Contains(picture, "```mermaid\n") {
		t.Fatalf("no Mermaid block above the summary:\n%s", out)
	}
	if !strings.HasPrefix(summary, "1 added (w07), 0 removed, ") {
		t.Errorf("summary: %s", summary)
	}
	svg := html.UnescapeString(fixture.Mermaid(t, out)[0])
	for _, s := range []string{"w07", "added", "cp3", "moved here from zone c", "moved to zone b", "zone a", "zone b", "zone c"} {
		if !strings.Contains(svg, s) {
			t.Errorf("the rendered picture has no %q", s)
		}
	}
}
