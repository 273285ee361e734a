package review

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/internal/writer"
	"github.com/kcompile/kcompile/targets"
)

// TestTextDiffAppliesWithGNUPatch is the property the text output
// promises: for random edits of a tree (files changed, added, removed,
// new directories, units among them), the whole printed report, summary
// and semantic lines included, is a patch that GNU patch applies to the
// base tree to give the new one.
func TestTextDiffAppliesWithGNUPatch(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 60; i++ {
		base := randomTree(r)
		head := editTree(r, base)
		rep := Compare(Side{Label: "base", Tree: base}, Side{Label: "head", Tree: head}, Options{})
		if rep.Equal() {
			// patch refuses input without a hunk; nothing to apply.
			continue
		}
		var out bytes.Buffer
		if err := rep.WriteText(&out, false); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if _, err := writer.Write(filepath.Join(dir, "t"), base, writer.Options{}); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("patch", "-p1", "--batch", "--force", "--remove-empty-files", "--no-backup-if-mismatch", "-d", filepath.Join(dir, "t"))
		cmd.Stdin = bytes.NewReader(out.Bytes())
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("case %d: patch: %v\n%s\nreport:\n%s", i, err, msg, out.String())
		}
		got, err := ReadDir(filepath.Join(dir, "t"))
		if err != nil {
			t.Fatal(err)
		}
		again := Compare(Side{Label: "head", Tree: head}, Side{Label: "patched", Tree: got}, Options{IgnoreModes: true})
		if !again.Equal() {
			var d strings.Builder
			again.WriteText(&d, false)
			t.Fatalf("case %d: the patched tree differs from the new one:\n%s\nreport:\n%s", i, d.String(), out.String())
		}
	}
}

var words = []string{"alpha", "beta", "--flag=1", "ExecStart=/usr/bin/x", "[Service]", "  indented", "- dash", "+ plus",
	"@@ not a hunk", "--- not a header", "=== nor this", "", "key: value", "\\ backslash"}

func randomLines(r *rand.Rand) string {
	var b strings.Builder
	for n := 1 + r.Intn(12); n > 0; n-- {
		b.WriteString(words[r.Intn(len(words))])
		b.WriteString(fmt.Sprint(r.Intn(5)))
		b.WriteByte('\n')
	}
	return b.String()
}

func randomPath(r *rand.Rand) string {
	dirs := []string{"nodes/a/etc/systemd/system", "nodes/b/etc/kubernetes", "nodes/a/var/lib/x", "cluster/addons", "nodes/c/etc"}
	exts := []string{".service", ".yaml", ".conf", ""}
	return fmt.Sprintf("%s/f%d%s", dirs[r.Intn(len(dirs))], r.Intn(8), exts[r.Intn(len(exts))])
}

func randomTree(r *rand.Rand) *targets.Tree {
	t := targets.NewTree()
	for n := 3 + r.Intn(8); n > 0; n-- {
		t.Add(randomPath(r), []byte(randomLines(r)), 0o644)
	}
	return t
}

// editTree changes, removes and adds files, and edits lines inside files.
func editTree(r *rand.Rand, base *targets.Tree) *targets.Tree {
	out := targets.NewTree()
	for _, f := range base.Files() {
		switch r.Intn(5) {
		case 0: // removed
		case 1: // rewritten
			out.Add(f.Path, []byte(randomLines(r)), f.Mode)
		case 2: // a line inserted, one deleted
			lines := strings.SplitAfter(string(f.Data), "\n")
			i := r.Intn(len(lines))
			lines = append(lines[:i], append([]string{randomLines(r)}, lines[i:]...)...)
			if j := r.Intn(len(lines)); lines[j] != "" && len(lines) > 2 {
				lines = append(lines[:j], lines[j+1:]...)
			}
			out.Add(f.Path, []byte(strings.Join(lines, "")), f.Mode)
		default:
			out.Add(f.Path, f.Data, f.Mode)
		}
	}
	for n := r.Intn(3); n > 0; n-- {
		out.Add(randomPath(r)+"-new", []byte(randomLines(r)), 0o644)
	}
	return out
}

// TestRestartsFollowReferences: a unit restarts when a file it names, or
// a file named by such a file, changes; not when an unrelated file does.
func TestRestartsFollowReferences(t *testing.T) {
	unit := "[Service]\nExecStart=/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml\n"
	build := func(ca string, sysctl string, extra bool) *targets.Tree {
		tr := targets.NewTree()
		tr.Add("nodes/n1/etc/systemd/system/kubelet.service", []byte(unit), 0o644)
		tr.Add("nodes/n1/var/lib/kubelet/config.yaml", []byte("clientCAFile: /etc/kubernetes/pki/ca.crt\n"), 0o644)
		tr.Add("nodes/n1/etc/kubernetes/pki/ca.crt", []byte(ca), 0o644)
		tr.Add("nodes/n1/etc/sysctl.d/99.conf", []byte(sysctl), 0o644)
		if extra {
			tr.Add("nodes/n1/etc/systemd/system/extra.service", []byte("[Service]\nExecStart=/bin/true\n"), 0o644)
		}
		return tr
	}
	checkUnitChanges(t, build("ca one\n", "a=1\n", true), []unitChange{
		{"referenced through the config", build("ca two\n", "a=1\n", true), "kubelet.service", "", ""},
		{"unrelated file", build("ca one\n", "a=2\n", true), "", "", ""},
		{"unit removed", build("ca one\n", "a=1\n", false), "", "", "extra.service"},
	})
}

// unitChange is a head tree and what its node's units do, compared with
// a base.
type unitChange struct {
	name                   string
	head                   *targets.Tree
	restarts, starts, stop string
}

func checkUnitChanges(t *testing.T, base *targets.Tree, changes []unitChange) {
	t.Helper()
	for _, c := range changes {
		rep := Compare(Side{Tree: base}, Side{Tree: c.head}, Options{})
		if len(rep.Nodes) != 1 {
			t.Fatalf("%s: nodes %+v", c.name, rep.Nodes)
		}
		n := rep.Nodes[0]
		if strings.Join(n.Restarts, ",") != c.restarts || strings.Join(n.Starts, ",") != c.starts || strings.Join(n.Stops, ",") != c.stop {
			t.Errorf("%s: restarts %v starts %v stops %v", c.name, n.Restarts, n.Starts, n.Stops)
		}
	}
}

// TestTimersRestartNotTheirService: a service a timer starts runs
// nothing between runs, so a file it names changing restarts nothing (the
// next run reads it); a changed timer restarts (re-arms); a timer added
// starts, its service does not.
func TestTimersRestartNotTheirService(t *testing.T) {
	build := func(key, schedule string, timer bool) *targets.Tree {
		tr := targets.NewTree()
		tr.Add("nodes/n1/etc/systemd/system/etcd-backup.service", []byte("[Service]\nType=oneshot\nExecStart=/usr/local/lib/kcompile/etcd-backup /etc/kubernetes/pki/etcd/healthcheck-client.key\n"), 0o600)
		if timer {
			tr.Add("nodes/n1/etc/systemd/system/etcd-backup.timer", []byte("[Timer]\nOnCalendar="+schedule+"\nUnit=etcd-backup.service\n"), 0o600)
		}
		tr.Add("nodes/n1/etc/kubernetes/pki/etcd/healthcheck-client.key", []byte(key), 0o600)
		return tr
	}
	base := build("key one", "daily", true)
	checkUnitChanges(t, base, []unitChange{
		{"a file the service reads", build("key two", "daily", true), "", "", ""},
		{"the schedule", build("key one", "hourly", true), "etcd-backup.timer", "", ""},
		{"the timer removed", build("key one", "daily", false), "", "", "etcd-backup.timer"},
	})
	empty := targets.NewTree()
	empty.Add("nodes/n0/etc/hostname", []byte("n0\n"), 0o644)
	rep := Compare(Side{Tree: empty}, Side{Tree: base}, Options{})
	added := false
	for _, n := range rep.Nodes {
		if n.Node == "n1" {
			added = true
			if strings.Join(n.Starts, ",") != "etcd-backup.timer" {
				t.Errorf("an added node starts %v, want its timer only", n.Starts)
			}
		}
	}
	if !added {
		t.Errorf("the added node is not in the report: %+v", rep.Nodes)
	}
}

// TestEtcdBootstrapFlagsRestartNothing: a member reads --initial-cluster
// and its kin only when it bootstraps, so a unit that changes only in
// them restarts nothing; any other flag restarts etcd.
func TestEtcdBootstrapFlagsRestartNothing(t *testing.T) {
	unit := func(initial, state, quota string) *targets.Tree {
		tr := targets.NewTree()
		tr.Add("nodes/cp1/etc/systemd/system/etcd.service", []byte("[Service]\nExecStart=/usr/local/bin/etcd --name=cp1 \\\n  --initial-cluster="+initial+" \\\n  --initial-cluster-state="+state+" \\\n  --initial-cluster-token=t \\\n  --quota-backend-bytes="+quota+"\n"), 0o644)
		return tr
	}
	base := unit("cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380", "existing", "1")
	for _, c := range []struct {
		name     string
		head     *targets.Tree
		restarts string
	}{
		{"a member added elsewhere", unit("cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380,cp3=https://10.0.0.13:2380", "existing", "1"), ""},
		{"joined: state new", unit("cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380", "new", "1"), ""},
		{"another flag", unit("cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380,cp3=https://10.0.0.13:2380", "existing", "2"), "etcd.service"},
	} {
		rep := Compare(Side{Tree: base}, Side{Tree: c.head}, Options{})
		if len(rep.Nodes) != 1 || rep.Nodes[0].Files != 1 {
			t.Fatalf("%s: nodes %+v", c.name, rep.Nodes)
		}
		if got := strings.Join(rep.Nodes[0].Restarts, ","); got != c.restarts {
			t.Errorf("%s: restarts %q, want %q", c.name, got, c.restarts)
		}
	}
}

// TestSecretsAreHashed: keys and encryption configs show a hash, never
// their content, wherever they are and whatever their mode; so does
// anything at a path where the PKI catalogue puts a key.
func TestSecretsAreHashed(t *testing.T) {
	secret := "-----BEGIN EC PRIVATE KEY-----\nTOPSECRETBYTES\n-----END EC PRIVATE KEY-----\n"
	for _, c := range []struct {
		name, path, data string
		mode             os.FileMode
	}{
		{"a key anywhere", "nodes/n/etc/x", secret, 0o644},
		{"an encryption config", "nodes/n/etc/x", "kind: EncryptionConfiguration\nsecret: TOPSECRETBYTES\n", 0o644},
		{"a catalogue key path", "nodes/n/etc/kubernetes/pki/etcd/peer.key", "TOPSECRETBYTES\n", 0o644},
		{"a kubelet key path", "systemd/nodes/n/var/lib/kubelet/pki/kubelet.key", "\x00TOPSECRETBYTES\n", 0o600},
	} {
		a, b := targets.NewTree(), targets.NewTree()
		a.Add(c.path, []byte(c.data), c.mode)
		b.Add(c.path, []byte(strings.ReplaceAll(c.data, "TOPSECRET", "OTHERSECRET")), c.mode)
		rep := Compare(Side{Tree: a}, Side{Tree: b}, Options{})
		var out bytes.Buffer
		rep.WriteText(&out, false)
		rep.WriteMarkdown(&out, MarkdownOptions{})
		rep.WriteJSON(&out)
		if strings.Contains(out.String(), "SECRETBYTES") || rep.Files[0].Kind != KindSecret {
			t.Errorf("%s leaked or was not a secret (%s):\n%s", c.name, rep.Files[0].Kind, out.String())
		}
	}
}

// TestPrivateFilesWithoutSecretsAreShown: a file only its owner may read
// but holding nothing of the secrets bundle (a NetworkManager keyfile,
// 0600 because NetworkManager ignores others) is shown in full, in a
// tree and inside an Ignition config.
func TestPrivateFilesWithoutSecretsAreShown(t *testing.T) {
	keyfile := func(addr string) []byte {
		return []byte("[connection]\nid=kcompile\ntype=ethernet\n\n[ipv4]\naddress1=" + addr + "/24,10.20.0.1\nmethod=manual\n")
	}
	ign := func(addr string) []byte {
		return []byte(`{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/NetworkManager/system-connections/kcompile.nmconnection","mode":384,"contents":{"source":"data:;base64,` +
			base64.StdEncoding.EncodeToString(keyfile(addr)) + `"}}]}}`)
	}
	a, b := targets.NewTree(), targets.NewTree()
	a.Add("nodes/fc1/etc/NetworkManager/system-connections/kcompile.nmconnection", keyfile("10.20.0.31"), 0o600)
	b.Add("nodes/fc1/etc/NetworkManager/system-connections/kcompile.nmconnection", keyfile("10.20.0.32"), 0o600)
	a.Add("ignition/nodes/fc1/config.ign", ign("10.20.0.31"), 0o600)
	b.Add("ignition/nodes/fc1/config.ign", ign("10.20.0.32"), 0o600)
	rep := Compare(Side{Tree: a}, Side{Tree: b}, Options{})
	var out bytes.Buffer
	rep.WriteText(&out, false)
	text := out.String()
	for _, want := range []string{"-address1=10.20.0.31/24,10.20.0.1", "+address1=10.20.0.32/24,10.20.0.1"} {
		if n := strings.Count(text, want); n != 2 {
			t.Errorf("%q appears %d times, want twice (the tree's keyfile and the config's):\n%s", want, n, text)
		}
	}
	if strings.Contains(text, "secret") {
		t.Errorf("a keyfile without secrets is called one:\n%s", text)
	}
}
