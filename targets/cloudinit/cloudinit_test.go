package cloudinit

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/review"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/systemd"
)

var examples = []string{"single-node", "ha-stacked", "external-etcd", "dual-stack"}

func material(t *testing.T, name string) *pki.Material {
	t.Helper()
	c, diags := compiler.Compile(compiler.Source{Dir: "../../examples/" + name})
	if c == nil {
		t.Fatalf("%s: %v", name, diags)
	}
	data, err := os.ReadFile("../../testdata/test-secrets.json")
	if err != nil {
		t.Fatal(err)
	}
	b, err := pki.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pki.Issue(c, b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestUserDataCarriesTheSystemdTree decodes every node's user-data and
// finds exactly the node's systemd tree in its write_files, and the units
// started in dependency order.
func TestUserDataCarriesTheSystemdTree(t *testing.T) {
	for _, name := range examples {
		m := material(t, name)
		sd, err := systemd.Target{}.Build(m)
		if err != nil {
			t.Fatal(err)
		}
		tree, err := Target{}.Build(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range m.Cluster.Nodes {
			f, ok := tree.Get(targets.NodePath(n.Name, "user-data"))
			if !ok || f.Mode != 0o600 || !bytes.HasPrefix(f.Data, []byte("#cloud-config\n")) {
				t.Fatalf("%s/%s: user-data missing, not 0600 or not #cloud-config", name, n.Name)
			}
			var ud userData
			if err := yaml.UnmarshalStrict(f.Data, &ud); err != nil {
				t.Fatalf("%s/%s: %v", name, n.Name, err)
			}
			want := map[string]targets.File{}
			for _, sf := range sd.Files() {
				if p, ok := strings.CutPrefix(sf.Path, targets.NodePath(n.Name, "")); ok {
					want["/"+p] = sf
				}
			}
			if len(ud.WriteFiles) != len(want) {
				t.Errorf("%s/%s: %d files written, the node tree has %d", name, n.Name, len(ud.WriteFiles), len(want))
			}
			for _, wf := range ud.WriteFiles {
				content := []byte(wf.Content)
				if wf.Encoding == "gz+b64" {
					raw, err := base64.StdEncoding.DecodeString(wf.Content)
					if err != nil {
						t.Fatal(err)
					}
					zr, err := gzip.NewReader(bytes.NewReader(raw))
					if err != nil {
						t.Fatal(err)
					}
					if content, err = io.ReadAll(zr); err != nil {
						t.Fatal(err)
					}
				}
				sf, ok := want[wf.Path]
				if !ok || !bytes.Equal(content, sf.Data) || wf.Permissions != fmt.Sprintf("%04o", sf.Mode.Perm()) {
					t.Errorf("%s/%s: %s differs from the systemd tree", name, n.Name, wf.Path)
				}
			}
			var started []string
			for _, cmd := range ud.Runcmd {
				if len(cmd) == 4 && cmd[1] == "enable" {
					started = append(started, cmd[3])
				}
			}
			if i, j := slices.Index(started, "etcd.service"), slices.Index(started, "kube-apiserver.service"); i >= 0 && j >= 0 && i > j {
				t.Errorf("%s/%s: etcd starts after the API server: %v", name, n.Name, started)
			}
			if len(started) == 0 || started[0] != "kcompile-install.service" {
				t.Errorf("%s/%s: the installer does not start first: %v", name, n.Name, started)
			}
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
	for _, name := range examples {
		m := material(t, name)
		tree, err := Target{}.Build(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range m.Cluster.Nodes {
			f, _ := tree.Get(targets.NodePath(n.Name, "user-data"))
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
	tree, err := Target{}.Build(m)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var files []string
	for _, n := range m.Cluster.Nodes {
		f, _ := tree.Get(targets.NodePath(n.Name, "network-config"))
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
	tree, err := Target{}.Build(m)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := tree.Get(targets.NodePath("w01", "user-data"))
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
	tree, err := Target{}.Build(m)
	if err != nil {
		t.Fatal(err)
	}
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

// TestGolden compares every example's cloud-init tree with
// golden/<example>/cloudinit; KCOMPILE_UPDATE=1 rewrites them.
func TestGolden(t *testing.T) {
	update := os.Getenv("KCOMPILE_UPDATE") != ""
	for _, name := range examples {
		tree, err := Target{}.Build(material(t, name))
		if err != nil {
			t.Fatal(err)
		}
		d, err := review.Golden("../../golden/"+name+"/cloudinit", tree, update)
		if err != nil {
			t.Fatal(err)
		}
		if d != "" {
			t.Errorf("%s: the cloud-init tree differs from golden/%s/cloudinit (KCOMPILE_UPDATE=1 go test ./targets/cloudinit rewrites it):\n%s", name, name, d)
		}
	}
}
