package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kcompile/kcompile/internal/fixture"
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
	if code, o, e := kcompile(t, "", "secrets", "init", "-s", bundle); code != 0 {
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
		if code, o, e := kcompile(t, "", "build", spec, "-s", bundle, "-d", out); code != 0 {
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
	if code, o, e := kcompile(t, "", "build", "../../examples/ha-stacked", "-s", testSecrets(t), "-d", out); code != 0 {
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

// zoneMove is examples/ha-stacked and a copy with cp3 moved from zone c
// into zone b, which then holds two of the three etcd members.
func zoneMove(t *testing.T) (base, head string) {
	return copySpec(t, "ha-stacked", "cluster.cue"), copySpec(t, "ha-stacked", "cluster.cue",
		`cp3: {address: "10.0.0.13", mac: "52:54:00:00:00:13", zone: "c"}`, `cp3: {address: "10.0.0.13", mac: "52:54:00:00:00:13", zone: "b"}`)
}

// TestDiffZoneMove: moving cp3 into zone b makes check warn that zone b
// holds an etcd quorum (KC0405). The diff says so before anything else in
// text, JSON and Markdown, at the head's position; etcd's line and the
// JSON say the quorum is now lost with zone b; and the picture fills zone
// b in a colour of its own. No --secrets: the change needs none to be
// reviewed.
func TestDiffZoneMove(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1780272000")
	base, head := zoneMove(t)
	at := filepath.Join(head, "cluster.cue") + ":15:63"
	run := func(format string) string {
		t.Helper()
		code, out, errOut := kcompile(t, "", "diff", base, head, "-o", format)
		if code != exitProblems {
			t.Fatalf("diff -o %s: exit %d, want %d\n%s%s", format, code, exitProblems, out, errOut)
		}
		if errOut != "" {
			t.Errorf("diff -o %s printed on stderr (the report has the warnings):\n%s", format, errOut)
		}
		return out
	}

	text := run("text")
	warning := "  introduces warning KC0405 at controlPlane.nodes.cp2.zone (" + at + `): losing zone "b" loses etcd quorum: it holds 2 of 3 members (cp2, cp3) and 2 are needed` + "\n"
	if i, j := strings.Index(text, warning), strings.Index(text, "\nnodes: "); i < 0 || j < i {
		t.Errorf("text: no %q before the summary:\n%s", warning, text)
	}
	for _, s := range []string{
		"\nregressions and fixes: 1 introduced (1 warning), 0 fixed (check diagnostics)\n",
		"\netcd: 3 members (quorum 2, tolerates 1 failure), membership unchanged; quorum lost if zone b fails (kept before)\n",
		"\nfailure domain: if zone b fails: etcd quorum kept → lost; 2 of 3 members in it, was 1 of 3 (worse)\n",
		"\nnot compared: key material",
	} {
		if !strings.Contains(text, s) {
			t.Errorf("text lacks %q:\n%s", s, text)
		}
	}

	var report struct {
		Findings []struct {
			Change, Source, Code, Path string
			Positions                  []string
		}
		Etcd struct {
			Zones []struct {
				Zone  string
				Worse bool
				After struct{ EtcdQuorumKept bool }
			}
		}
		Topology    struct{ Zones []struct{ Zone string } }
		NotCompared []string
	}
	if err := json.Unmarshal([]byte(run("json")), &report); err != nil {
		t.Fatal(err)
	}
	if f := report.Findings; len(f) != 1 || f[0].Change != "introduces" || f[0].Source != "check" || f[0].Code != "KC0405" ||
		f[0].Path != "controlPlane.nodes.cp2.zone" || len(f[0].Positions) == 0 || f[0].Positions[0] != at {
		t.Errorf("JSON findings: %+v", report.Findings)
	}
	if z := report.Etcd.Zones; len(z) != 1 || z[0].Zone != "b" || !z[0].Worse || z[0].After.EtcdQuorumKept {
		t.Errorf("JSON etcd zones: %+v", z)
	}
	if len(report.Topology.Zones) != 1 || len(report.NotCompared) == 0 {
		t.Errorf("JSON topology zones %+v, not compared %q", report.Topology.Zones, report.NotCompared)
	}

	md := run("markdown")
	item := "- **introduces** warning `KC0405` at controlPlane.nodes.cp2.zone (`" + at + "`): "
	if i, j := strings.Index(md, item), strings.Index(md, "```mermaid\n"); i < 0 || j < i {
		t.Errorf("Markdown: no %q above the picture:\n%s", item, md)
	}
	_, mermaid, _ := strings.Cut(md, "```mermaid\n")
	mermaid, _, _ = strings.Cut(mermaid, "```\n")
	zoneB := regexp.MustCompile(`(?m)^  subgraph (z\d+)\["zone b"\]\n((?:    .*\n)*)  end\n`).FindStringSubmatch(mermaid)
	if zoneB == nil || !strings.Contains(zoneB[2], `["if zone b fails:<br/>etcd quorum kept #8594; lost<br/>2 of 3 members in it, was 1 of 3"]:::worse`) {
		t.Fatalf("the picture has no worse outcome in zone b:\n%s", mermaid)
	}
	fills := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^  classDef (\w+) fill:(#\w+),`).FindAllStringSubmatch(mermaid, -1) {
		fills[m[1]] = m[2]
	}
	if fills["worse"] == "" || fills["worse"] == fills["unchanged"] || fills["worse"] == fills["changed"] {
		t.Errorf("the worse outcome's fill %q is not a colour of its own: %v", fills["worse"], fills)
	}
	if !strings.Contains(mermaid, "  style "+zoneB[1]+" fill:") || strings.Count(mermaid, "  style ") != 1 {
		t.Errorf("only zone b's frame is to be filled:\n%s", mermaid)
	}
}

// TestDiffMarkdownBound adds 20 workers to examples/large: every new node's
// files are far past what a pull-request comment may hold (GitHub takes
// 65,536 characters). The Markdown keeps its summary and picture under
// the default bound of 60,000 and says which diffs it left out and how
// to see them; --max-size changes the bound.
func TestDiffMarkdownBound(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles examples/large twice")
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1780272000")
	base := copySpec(t, "large", "workers.cue")
	head := copySpec(t, "large", "workers.cue", "count:        1000\n\t\tnamePattern:  \"echo-%04d\"", "count:        1020\n\t\tnamePattern:  \"echo-%04d\"")
	code, md, errOut := kcompile(t, "", "diff", base, head, "-o", "markdown")
	if code != exitProblems {
		t.Fatalf("diff: exit %d\n%s", code, errOut)
	}
	if n := utf8.RuneCountInString(md); n > 60000 {
		t.Errorf("the comment has %d characters, more than 60,000", n)
	}
	left := regexp.MustCompile(`\n\*\*(\d+) of 400 files' diffs left out\*\* \(from \d+ nodes\) to keep this comment under 60,000 characters; run ` +
		"`kcompile diff " + regexp.QuoteMeta(base+" "+head) + " -o text` for them\\.\n$").FindStringSubmatch(md)
	if left == nil {
		t.Errorf("the comment does not end saying what it left out:\n%s", md[max(0, len(md)-2000):])
	}
	for _, s := range []string{"```mermaid\n", "- nodes: 20 added (echo-1001, ", "| echo-1020 | added | 20 |", "<details><summary>node echo-1001: 20 files</summary>"} {
		if !strings.Contains(md, s) {
			t.Errorf("the comment lacks %q", s)
		}
	}
	if strings.Count(md, "<details>") != strings.Count(md, "</details>") {
		t.Error("a collapsed section is cut in two")
	}
}

// TestDiffMaxSize: --max-size bounds the comment; 0 leaves it whole.
func TestDiffMaxSize(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1780272000")
	base := copySpec(t, "ha-stacked", "workers.cue")
	head := copySpec(t, "ha-stacked", "workers.cue", "count:        6", "count:        7", `"52:54:00:00:01:15",`, `"52:54:00:00:01:15", "52:54:00:00:01:16",`)
	_, whole, _ := kcompile(t, "", "diff", base, head, "-o", "markdown", "--max-size", "0")
	_, cut, _ := kcompile(t, "", "diff", base, head, "-o", "markdown", "--max-size", "4000", "-t", "all")
	if strings.Contains(whole, "left out") || strings.Count(whole, "**`nodes/w07/") != 20 {
		t.Errorf("--max-size 0 left something out:\n%s", whole)
	}
	if n := utf8.RuneCountInString(cut); n > 4000 || !strings.Contains(cut, "files' diffs left out** (from 1 node) to keep this comment under 4,000 characters; run `kcompile diff "+base+" "+head+" -t all -o text` for them.\n") {
		t.Errorf("--max-size 4000: %d characters:\n%s", n, cut)
	}
}
