package cloudinit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/layout"

	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/systemd"
)

func material(t testing.TB, name string) *pki.Material { return fixture.Material(t, name, nil) }

// build packs the systemd tree of m, as the pipeline does.
func build(t testing.TB, m *pki.Material) *targets.Tree {
	t.Helper()
	sd, err := systemd.Build(m, systemd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tree, _, err := Build(m, sd)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// TestUserDataCarriesTheSystemdTree decodes every node's user-data and
// finds exactly the node's systemd tree in its write_files, and the units
// started in dependency order.
func TestUserDataCarriesTheSystemdTree(t *testing.T) {
	for _, name := range fixture.Examples() {
		m := material(t, name)
		sd, err := systemd.Build(m, systemd.Options{})
		if err != nil {
			t.Fatal(err)
		}
		tree := build(t, m)
		for _, n := range m.Cluster.Nodes {
			if n.OS.Ignition() {
				continue // the ignition target's
			}
			f, ok := tree.Get(layout.NodeTree(n.Name, "user-data"))
			if !ok || f.Mode != 0o600 || !bytes.HasPrefix(f.Data, []byte("#cloud-config\n")) {
				t.Fatalf("%s/%s: user-data missing, not 0600 or not #cloud-config", name, n.Name)
			}
			var ud userData
			if err := yaml.UnmarshalStrict(f.Data, &ud); err != nil {
				t.Fatalf("%s/%s: %v", name, n.Name, err)
			}
			want := map[string]targets.File{}
			for _, sf := range sd.Files() {
				if p, ok := strings.CutPrefix(sf.Path, layout.NodeTree(n.Name, "")); ok {
					want["/"+p] = sf
				}
			}
			if len(ud.WriteFiles) != len(want) {
				t.Errorf("%s/%s: %d files written, the node tree has %d", name, n.Name, len(ud.WriteFiles), len(want))
			}
			d, err := Decode(f.Data)
			if err != nil {
				t.Fatalf("%s/%s: %v", name, n.Name, err)
			}
			for _, wf := range ud.WriteFiles {
				sf, ok := want[wf.Path]
				if !ok || !bytes.Equal(d.Files[wf.Path].Data, sf.Data) || wf.Permissions != fmt.Sprintf("%04o", sf.Mode.Perm()) {
					t.Errorf("%s/%s: %s differs from the systemd tree", name, n.Name, wf.Path)
				}
			}
			// One command, whose exit status cloud-init reports: the
			// tree's start script, which starts the units its drop-in
			// wants (targets/systemd tests both).
			if len(ud.Runcmd) != 1 || !slices.Equal(ud.Runcmd[0], []string{systemd.StartScript(ir.OSDebian)}) || startScript != systemd.StartScript(ir.OSDebian) {
				t.Errorf("%s/%s: runcmd %v, not the start script %s", name, n.Name, ud.Runcmd, systemd.StartScript(ir.OSDebian))
			}
			if _, ok := d.Files["/etc/systemd/system/multi-user.target.d/kcompile.conf"]; !ok {
				t.Errorf("%s/%s: no drop-in starts the units on later boots", name, n.Name)
			}
			if n.RunsPods() && (len(ud.Bootcmd) == 0 || ud.Bootcmd[0][0] != "modprobe") {
				t.Errorf("%s/%s: bootcmd %v loads no module", name, n.Name, ud.Bootcmd)
			}
		}
	}
}

// TestDecodeRoundTrip decodes every example's user-data and encodes it
// again from what Decode returned alone: the same bytes come out, so
// Decode loses nothing encodeFile and nodeUserData put in.
func TestDecodeRoundTrip(t *testing.T) {
	for _, name := range fixture.Examples() {
		m := material(t, name)
		tree := build(t, m)
		for _, n := range m.Cluster.Nodes {
			if n.OS.Ignition() {
				continue // the ignition target's
			}
			f, _ := tree.Get(layout.NodeTree(n.Name, "user-data"))
			d, err := Decode(f.Data)
			if err != nil {
				t.Fatalf("%s/%s: %v", name, n.Name, err)
			}
			var ud userData
			if err := yaml.UnmarshalStrict(d.Rest, &ud); err != nil || ud.WriteFiles != nil {
				t.Fatalf("%s/%s: the rest of the config is not user-data without write_files: %v", name, n.Name, err)
			}
			for _, p := range slices.Sorted(maps.Keys(d.Files)) {
				wf, err := encodeFile(d.Files[p])
				if err != nil {
					t.Fatal(err)
				}
				ud.WriteFiles = append(ud.WriteFiles, wf)
			}
			body, err := yaml.Marshal(ud)
			if err != nil {
				t.Fatal(err)
			}
			if again := append([]byte("#cloud-config\n"), body...); !bytes.Equal(again, f.Data) {
				t.Errorf("%s/%s: encoding what Decode read gives other user-data:\n%s", name, n.Name, again)
			}
		}
	}
}

// TestDecodeEncodings reads write_files in the encodings cloud-init
// accepts besides the one encodeFile writes, and refuses content that
// does not decode.
func TestDecodeEncodings(t *testing.T) {
	d, err := Decode([]byte(`#cloud-config
write_files:
- {path: /a, content: "text\n", permissions: "0644"}
- {path: /b, encoding: b64, content: dGV4dAo=, permissions: "0600"}
- {path: /c, encoding: base64, content: dGV4dAo=}
- {path: /d, encoding: gzip+base64, content: H4sIAAAAAAAAAytJrSjhAgAn2uw3BQAAAA==, permissions: "0755"}
runcmd: [[true]]
`))
	if err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]fs.FileMode{"/a": 0o644, "/b": 0o600, "/c": 0, "/d": 0o755} {
		if f := d.Files[p]; string(f.Data) != "text\n" || f.Mode != mode || f.Path != p {
			t.Errorf("%s reads as %+v", p, f)
		}
	}
	if string(d.Rest) != "runcmd:\n- - true\n" {
		t.Errorf("rest %q", d.Rest)
	}
	for _, bad := range []string{"write_files: [{path: /a, encoding: b64, content: '!!'}]", "write_files: [{path: /a, encoding: gz+b64, content: dGV4dAo=}]", "write_files: {"} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("%s decodes", bad)
		}
	}
}

// TestCloudInitSchema validates every user-data with Debian's cloud-init,
// and, since cloud-init accepts unknown top-level keys, holds every key
// against the cloud-config JSON schema that package ships.
func TestCloudInitSchema(t *testing.T) {
	ci, err := exec.LookPath("cloud-init")
	if err != nil {
		t.Fatal("cloud-init is required (Debian package cloud-init; scripts/tools installs it)")
	}
	schemaFile := "/usr/lib/python3/dist-packages/cloudinit/config/schemas/schema-cloud-config-v1.json"
	raw, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		AllOf []struct {
			Ref string `json:"$ref"`
		} `json:"allOf"`
		Defs map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, d := range schema.Defs {
		for k := range d.Properties {
			known[k] = true
		}
	}
	dir := t.TempDir()
	for _, name := range fixture.Examples() {
		m := material(t, name)
		tree := build(t, m)
		for _, n := range m.Cluster.Nodes {
			if n.OS.Ignition() {
				continue // the ignition target's
			}
			f, _ := tree.Get(layout.NodeTree(n.Name, "user-data"))
			var top map[string]any
			if err := yaml.Unmarshal(f.Data, &top); err != nil {
				t.Fatal(err)
			}
			for k := range top {
				if !known[k] {
					t.Errorf("%s/%s: top-level key %q is not in cloud-init's schema", name, n.Name, k)
				}
			}
			p := filepath.Join(dir, name+"-"+n.Name)
			if err := os.WriteFile(p, f.Data, 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(ci, "schema", "--config-file", p).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "Valid cloud-config") {
				t.Errorf("%s/%s: cloud-init schema: %v\n%s", name, n.Name, err, out)
			}
		}
	}
}

// TestNetworkConfigParses reads every network-config with cloud-init's own
// network-state parser (the one its renderers use) and checks what it
// understood: the node's addresses on the interface with its MAC, the
// spec's default routes and nameservers.
func TestNetworkConfigParses(t *testing.T) {
	const parser = `
import json, sys, yaml
from cloudinit.net.network_state import parse_net_config_data
out = {}
for f in sys.argv[1:]:
    ns = parse_net_config_data(yaml.safe_load(open(f)), skip_broken=False)
    ifs = list(ns.iter_interfaces())
    out[f] = {"mac": ifs[0].get("mac_address"), "addresses": [s.get("address") for s in ifs[0]["subnets"]],
              "gateways": sorted({r["gateway"] for s in ifs[0]["subnets"] for r in s.get("routes", [])}),
              "nameservers": ns.dns_nameservers}
json.dump(out, sys.stdout)
`
	m := material(t, "ha-stacked")
	tree := build(t, m)
	dir := t.TempDir()
	var files []string
	for _, n := range m.Cluster.Nodes {
		f, _ := tree.Get(layout.NodeTree(n.Name, "network-config"))
		p := filepath.Join(dir, n.Name)
		if err := os.WriteFile(p, f.Data, 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	// Debian's python3, which has cloud-init's modules.
	out, err := exec.Command("/usr/bin/python3", append([]string{"-c", parser}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("cloud-init's parser refused a network-config: %v\n%s", err, out)
	}
	var got map[string]struct {
		MAC         string   `json:"mac"`
		Addresses   []string `json:"addresses"`
		Gateways    []string `json:"gateways"`
		Nameservers []string `json:"nameservers"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for i, n := range m.Cluster.Nodes {
		g := got[files[i]]
		if g.MAC != n.MAC || !slices.Equal(g.Addresses, []string{n.Address().String()}) ||
			!slices.Equal(g.Gateways, []string{"10.0.0.1"}) || !slices.Equal(g.Nameservers, []string{"10.0.0.53"}) {
			t.Errorf("%s: cloud-init understood %+v", n.Name, g)
		}
	}
}

func TestUsersInUserData(t *testing.T) {
	m := material(t, "ha-stacked")
	tree := build(t, m)
	f, _ := tree.Get(layout.NodeTree("w01", "user-data"))
	var ud userData
	if err := yaml.UnmarshalStrict(f.Data, &ud); err != nil {
		t.Fatal(err)
	}
	if len(ud.Users) != 1 || ud.Users[0].Name != "ops" || ud.Users[0].Sudo != "ALL=(ALL) NOPASSWD:ALL" ||
		len(ud.Users[0].SSHAuthorizedKeys) != 1 || !ud.Users[0].LockPasswd {
		t.Errorf("users %+v", ud.Users)
	}
}

func TestSizeLimit(t *testing.T) {
	m := material(t, "single-node")
	tree := build(t, m)
	sizes := Sizes(m.Cluster, tree)
	if len(sizes) != 1 || sizes[0].Node != "box" || sizes[0].Bytes < 1000 {
		t.Fatalf("sizes %+v", sizes)
	}
	if d := CheckSizes(m.Cluster, sizes); len(d) != 0 {
		t.Errorf("no limit, yet %v", d)
	}
	m.Cluster.MaxUserDataBytes = sizes[0].Bytes
	if d := CheckSizes(m.Cluster, sizes); len(d) != 0 {
		t.Errorf("a user-data of exactly the limit is reported: %v", d)
	}
	m.Cluster.MaxUserDataBytes = sizes[0].Bytes - 1
	d := CheckSizes(m.Cluster, sizes)
	if len(d) != 1 || d[0].Code != CodeUserDataSize || !strings.Contains(d[0].Message, "box (") {
		t.Errorf("over the limit: %v", d)
	}
}

func TestRoutesToServices(t *testing.T) {
	for _, name := range fixture.Examples() {
		if d := CheckRoutes(fixture.Cluster(t, name, nil)); len(d) != 0 {
			t.Errorf("%s has its gateways, yet: %v", name, d)
		}
	}
	c := fixture.Cluster(t, "single-node", nil)
	c.Network.Gateways = nil
	d := CheckRoutes(c)
	if len(d) != 1 || d[0].Code != CodeNoServiceRoute || d[0].Path != "network.nodes" || len(d[0].Positions) != 1 ||
		!strings.Contains(d[0].Message, "no IPv4 gateway") || !strings.Contains(d[0].Message, c.Network.ServiceCIDRs[0].String()) {
		t.Errorf("no gateway: %v", d)
	}
	// Dual-stack with a gateway of one family: the other's Services are
	// unreachable.
	c = fixture.Cluster(t, "dual-stack", nil)
	c.Network.Gateways = c.Network.Gateways[:1]
	d = CheckRoutes(c)
	if len(d) != 1 || d[0].Path != "network.gateways" || !strings.Contains(d[0].Message, "no IPv6 gateway") {
		t.Errorf("an IPv4 gateway only: %v", d)
	}
}
