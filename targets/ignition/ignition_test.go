package ignition_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	v34 "github.com/coreos/ignition/v2/config/v3_4"
	"github.com/coreos/ignition/v2/config/v3_4/types"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/cloudinit"
	"github.com/kcompile/kcompile/targets/ignition"
	"github.com/kcompile/kcompile/targets/systemd"
)

// build builds examples/flatcar's systemd and Ignition trees.
func build(t *testing.T) (*ir.Cluster, *targets.Tree, *targets.Tree) {
	t.Helper()
	m := fixture.Material(t, "flatcar", nil)
	sd, err := systemd.Build(m, systemd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ign, diags, err := ignition.Build(m, sd)
	if err != nil || len(diags) > 0 {
		t.Fatalf("build: %v %v", err, diags)
	}
	return m.Cluster, sd, ign
}

// TestConfigsCarryTheTree: every config passes Ignition's own parser
// and validator with no warning, and carries every file of the node's
// systemd tree byte for byte with its mode, root's; the units with an
// [Install] section are enabled; hostname and network are the node's.
func TestConfigsCarryTheTree(t *testing.T) {
	c, sd, ign := build(t)
	for _, n := range c.Nodes {
		f, ok := ign.Get(layout.NodeTree(n.Name, ignition.ConfigName))
		if !ok {
			t.Fatalf("no config for %s", n.Name)
		}
		if f.Mode != 0o600 {
			t.Errorf("%s: config mode %o, want 600 (it holds private keys)", n.Name, f.Mode)
		}
		if err := ignition.Validate(f.Data); err != nil {
			t.Errorf("%s: %v", n.Name, err)
		}
		var raw struct {
			Ignition struct{ Version string }
			Storage  struct {
				Files []struct {
					Path  string
					User  struct{ Name string }
					Group struct{ Name string }
				}
			}
			Systemd struct {
				Units []struct {
					Name    string
					Enabled bool
				}
			}
		}
		if err := json.Unmarshal(f.Data, &raw); err != nil {
			t.Fatal(err)
		}
		if raw.Ignition.Version != "3.4.0" {
			t.Errorf("%s: spec version %s", n.Name, raw.Ignition.Version)
		}
		for _, sf := range raw.Storage.Files {
			if sf.User.Name != "root" || sf.Group.Name != "root" {
				t.Errorf("%s: %s is owned by %q:%q", n.Name, sf.Path, sf.User.Name, sf.Group.Name)
			}
		}
		d, err := ignition.Decode(f.Data)
		if err != nil {
			t.Fatal(err)
		}
		prefix := "nodes/" + n.Name
		var wantUnits []string
		tree := 0
		for _, sf := range sd.Files() {
			p, ok := strings.CutPrefix(sf.Path, prefix)
			if !ok || !strings.HasPrefix(p, "/") {
				continue
			}
			tree++
			got, ok := d.Files[p]
			switch {
			case !ok:
				t.Errorf("%s: the config does not write %s", n.Name, p)
			case !bytes.Equal(got.Data, sf.Data):
				t.Errorf("%s: %s differs from the systemd tree's", n.Name, p)
			case got.Mode != sf.Mode.Perm():
				t.Errorf("%s: %s has mode %o, the tree's is %o", n.Name, p, got.Mode, sf.Mode.Perm())
			}
			if strings.HasPrefix(p, "/etc/systemd/system/") && strings.Count(p, "/") == 4 && bytes.Contains(sf.Data, []byte("\n[Install]\n")) {
				wantUnits = append(wantUnits, p[len("/etc/systemd/system/"):])
			}
		}
		if tree < 15 || !slices.Contains(wantUnits, "kubelet.service") {
			t.Fatalf("%s: the systemd tree has %d files and units %v: not the node's tree", n.Name, tree, wantUnits)
		}
		var enabled []string
		for _, u := range raw.Systemd.Units {
			if u.Enabled {
				enabled = append(enabled, u.Name)
			}
		}
		slices.Sort(enabled)
		slices.Sort(wantUnits)
		if !slices.Equal(enabled, wantUnits) {
			t.Errorf("%s: enables %v, want %v", n.Name, enabled, wantUnits)
		}
		// Beyond the tree: the hostname and the network, in the form the
		// family reads.
		if got := string(d.Files["/etc/hostname"].Data); got != n.Name+"\n" {
			t.Errorf("%s: hostname %q", n.Name, got)
		}
		netPath, want := "/etc/systemd/network/00-kcompile.network", "MACAddress="+n.MAC+"\n"
		mode := fs.FileMode(0o644)
		if n.OS == ir.OSFedoraCoreOS {
			netPath, want, mode = "/etc/NetworkManager/system-connections/kcompile.nmconnection", "mac-address="+strings.ToUpper(n.MAC)+"\n", 0o600
		}
		nf, ok := d.Files[netPath]
		if !ok || !strings.Contains(string(nf.Data), want) || !strings.Contains(string(nf.Data), n.Address().String()+"/24") || nf.Mode != mode {
			t.Errorf("%s: %s (mode %o):\n%s", n.Name, netPath, nf.Mode, nf.Data)
		}
		if len(d.Files) != tree+2 {
			t.Errorf("%s: the config writes %d files, the tree %d and hostname and network", n.Name, len(d.Files), tree)
		}
	}
}

// TestBinariesWhereTheSystemMayWrite: Flatcar's /usr is read-only, so
// its binaries and kcompile's scripts go under /opt; Fedora CoreOS's
// /usr/local is writable.
func TestBinariesWhereTheSystemMayWrite(t *testing.T) {
	c, sd, _ := build(t)
	for _, n := range c.Nodes {
		for _, b := range n.Binaries {
			if !n.OS.Writable(b.Path) {
				t.Errorf("%s (%s): %s cannot be written", n.Name, n.OS, b.Path)
			}
		}
		for _, f := range sd.Files() {
			p, ok := strings.CutPrefix(f.Path, "nodes/"+n.Name+"/")
			if ok && !n.OS.Writable("/"+p) {
				t.Errorf("%s (%s): the tree writes /%s", n.Name, n.OS, p)
			}
		}
		unit, _ := sd.Get(layout.NodeTree(n.Name, "etc/systemd/system/kubelet.service"))
		if want := "ExecStart=" + n.OS.BinDir() + "/kubelet"; !bytes.Contains(unit.Data, []byte(want)) {
			t.Errorf("%s: kubelet.service lacks %s", n.Name, want)
		}
	}
}

// TestDecodeReadsWhatIgnitionWrites: units and drop-ins given inline
// (as Butane writes them) read as the files Ignition writes for them.
func TestDecodeReadsWhatIgnitionWrites(t *testing.T) {
	raw := []byte(`{"ignition":{"version":"3.3.0"},"systemd":{"units":[{"name":"a.service","enabled":true,"contents":"[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n","dropins":[{"name":"x.conf","contents":"[Service]\nNice=1\n"}]}]},"storage":{"files":[{"path":"/etc/f","mode":384,"contents":{"source":"data:,hello%20world"}}]}}`)
	d, err := ignition.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Files["/etc/f"].Data) != "hello world" || d.Files["/etc/f"].Mode != 0o600 ||
		!strings.HasPrefix(string(d.Files["/etc/systemd/system/a.service"].Data), "[Service]") ||
		string(d.Files["/etc/systemd/system/a.service.d/x.conf"].Data) != "[Service]\nNice=1\n" {
		t.Errorf("decoded %v", d.Files)
	}
	if !strings.Contains(string(d.Rest), `"name": "a.service"`) || strings.Contains(string(d.Rest), "ExecStart") {
		t.Errorf("rest:\n%s", d.Rest)
	}
	if _, err := ignition.Decode([]byte(`{"ignition":{"version":"2.2.0"}}`)); err == nil {
		t.Error("a spec 2 config decoded")
	}
}

// TestCoverage: each node-config target names the nodes it leaves out,
// at the field that chose their system, and a target that would leave
// out every node is an error.
func TestCoverage(t *testing.T) {
	fc := fixture.Material(t, "flatcar", nil).Cluster
	if d := ignition.CheckCoverage(fc); len(d) != 0 {
		t.Errorf("flatcar: the Ignition target leaves out %v", d)
	}
	d := cloudinit.CheckCoverage(fc)
	if len(d) != 1 || d[0].Code != cloudinit.CodeNoCloudInitNode || d[0].Severity != diag.Error || len(d[0].Positions) != 2 ||
		!strings.Contains(d[0].Message, "cp1 (Flatcar Container Linux)") || !strings.Contains(d[0].Message, "fc1 (Fedora CoreOS)") {
		t.Errorf("flatcar: cloud-init coverage %v", d)
	}
	ha := fixture.Material(t, "ha-stacked", nil).Cluster
	if d := ignition.CheckCoverage(ha); len(d) != 1 || d[0].Code != ignition.CodeNoIgnitionNode || d[0].Severity != diag.Error ||
		d[0].Path != "os" || !strings.Contains(d[0].Message, "no node configuration") || !strings.Contains(d[0].Message, "cp1 (Debian)") {
		t.Errorf("ha-stacked: Ignition coverage %v", d)
	}
	if d := cloudinit.CheckCoverage(ha); len(d) != 0 {
		t.Errorf("ha-stacked: the cloud-init target leaves out %v", d)
	}
}

// TestSpecStringsArriveUnchanged: the spec strings a config carries (a
// user name, an SSH key whose comment holds JSON's and the shell's
// special characters) reach Ignition's passwd exactly as written, as
// Ignition's own parser reads them.
func TestSpecStringsArriveUnchanged(t *testing.T) {
	key := `ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICBPJLtN0OW1tWrsYbsc7QGZG5UW3m3SHqYd/C30E0i0 "a\b" $(x) {'}` + "\u00e9\u2028"
	m := fixture.Material(t, "flatcar", map[string]string{"zz.cue": "package cluster\naccess: users: \"alice-2\": sshAuthorizedKeys: [" + strconv.Quote(key) + "]\n"})
	cfg := nodeConfig(t, m, "w1")
	found := false
	for _, u := range cfg.Passwd.Users {
		if u.Name == "alice-2" {
			found = len(u.SSHAuthorizedKeys) == 1 && string(u.SSHAuthorizedKeys[0]) == key
		}
	}
	if !found {
		t.Errorf("alice-2's key did not arrive unchanged: %+v", cfg.Passwd.Users)
	}
}

// TestConfigsFetchTheArtifacts: with install.source "download" each
// config fetches exactly the artifacts its node needs, from their URLs,
// verified by the spec's sha256, binaries at their paths (the family's
// binary directory) and archives into the artifact cache by sha256.
func TestConfigsFetchTheArtifacts(t *testing.T) {
	c, _, ign := build(t)
	if c.Install.Source != "download" {
		t.Fatalf("examples/flatcar's install.source is %q", c.Install.Source)
	}
	byPath := map[string]ir.Artifact{}
	for _, a := range c.Install.Artifacts {
		byPath[a.Path] = a
	}
	for _, n := range c.Nodes {
		f, _ := ign.Get(layout.NodeTree(n.Name, ignition.ConfigName))
		cfg, _, err := v34.Parse(f.Data)
		if err != nil {
			t.Fatal(err)
		}
		remote := map[string]types.File{}
		for _, sf := range cfg.Storage.Files {
			if src := sf.Contents.Source; src != nil && !strings.HasPrefix(*src, "data:") {
				remote[sf.Path] = sf
			}
		}
		want := 0
		for _, b := range n.Binaries {
			if b.OS {
				continue
			}
			want++
			a, ok := byPath[b.Path]
			sf, fetched := remote[b.Path]
			switch {
			case !ok:
				t.Errorf("%s: no artifact installs %s", n.Name, b.Path)
			case !fetched:
				t.Errorf("%s: the config does not fetch %s", n.Name, b.Path)
			case *sf.Contents.Source != a.URL || sf.Contents.Verification.Hash == nil || *sf.Contents.Verification.Hash != "sha256-"+a.SHA256 || sf.Mode == nil || *sf.Mode != 0o755:
				t.Errorf("%s: %s fetched as %+v", n.Name, b.Path, sf)
			}
			if !strings.HasPrefix(b.Path, "/opt/cni/bin/") && path.Dir(b.Path) != n.OS.BinDir() {
				t.Errorf("%s: %s is not in %s's binary directory", n.Name, b.Path, n.OS.Name())
			}
		}
		if len(remote) != want || want < 9 {
			t.Errorf("%s: the config fetches %d files, the node needs %d binaries", n.Name, len(remote), want)
		}
	}
	// An archive goes to the cache by its sum, once for all its members.
	m := fixture.Material(t, "flatcar", nil)
	arch := ir.Artifact{Name: "cni", URL: "http://10.20.0.5:8080/assets/cni.tgz", SHA256: strings.Repeat("ab", 32)}
	var rest []ir.Artifact
	for _, a := range m.Cluster.Install.Artifacts {
		if strings.HasPrefix(a.Path, "/opt/cni/bin/") {
			arch.Extract = append(arch.Extract, ir.Label{Key: "./" + path.Base(a.Path), Value: a.Path})
			continue
		}
		rest = append(rest, a)
	}
	m.Cluster.Install.Artifacts = append(rest, arch)
	cached := 0
	cfg := nodeConfig(t, m, "w1")
	for _, sf := range cfg.Storage.Files {
		if strings.HasPrefix(sf.Path, "/opt/cni/bin/") {
			t.Errorf("w1: the config writes %s, a member of an archive", sf.Path)
		}
		if sf.Path == "/var/cache/kcompile/artifacts/"+arch.SHA256 {
			cached++
			if *sf.Contents.Source != arch.URL || *sf.Contents.Verification.Hash != "sha256-"+arch.SHA256 {
				t.Errorf("w1: the archive is fetched as %+v", sf)
			}
		}
	}
	if cached != 1 {
		t.Errorf("w1: the archive is fetched %d times", cached)
	}
}

// nodeConfig builds m's trees and parses node's Ignition config.
func nodeConfig(t *testing.T, m *pki.Material, node string) types.Config {
	t.Helper()
	sd, err := systemd.Build(m, systemd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ign, _, err := ignition.Build(m, sd)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := ign.Get(layout.NodeTree(node, ignition.ConfigName))
	cfg, _, err := v34.Parse(f.Data)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
