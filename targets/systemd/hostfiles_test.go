package systemd

import (
	"encoding/json"
	"fmt"
	"github.com/kcompile/kcompile/layout"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/internal/fixture"

	"github.com/containernetworking/cni/libcni"
	"github.com/pelletier/go-toml/v2"

	"github.com/kcompile/kcompile/compiler/ir"
)

func TestRuntimeConfigMatchesKubelet(t *testing.T) {
	for _, name := range fixture.Examples() {
		c := compileExample(t, name)
		path, data, err := runtimeConfig(c, c.Nodes[0])
		if err != nil {
			t.Fatal(err)
		}
		m, err := verifyTOML(data)
		if err != nil {
			t.Fatalf("%s: %s does not parse: %v\n%s", name, path, err, data)
		}
		plugins := m["plugins"].(map[string]any)
		runc := plugins["io.containerd.cri.v1.runtime"].(map[string]any)["containerd"].(map[string]any)["runtimes"].(map[string]any)["runc"].(map[string]any)
		if got := runc["options"].(map[string]any)["SystemdCgroup"]; got != (c.Kubelet.CgroupDriver == "systemd") {
			t.Errorf("%s: containerd SystemdCgroup=%v but kubelet cgroupDriver=%s", name, got, c.Kubelet.CgroupDriver)
		}
		if m["version"] != int64(3) {
			t.Errorf("%s: containerd config version %v", name, m["version"])
		}
		// The runc each node's install unit checked, by its family's path.
		for _, n := range c.Nodes {
			if !n.RunsPods() {
				continue
			}
			_, data, err := runtimeConfig(c, n)
			if err != nil {
				t.Fatal(err)
			}
			m, _ := verifyTOML(data)
			runc := m["plugins"].(map[string]any)["io.containerd.cri.v1.runtime"].(map[string]any)["containerd"].(map[string]any)["runtimes"].(map[string]any)["runc"].(map[string]any)
			want := n.OS.BinDir() + "/runc"
			if got := runc["options"].(map[string]any)["BinaryName"]; got != want || !slices.ContainsFunc(n.Binaries, func(b ir.Binary) bool { return b.Path == want }) {
				t.Errorf("%s: %s's containerd runs runc %v, its install unit checks %v", name, n.Name, got, n.Binaries)
			}
		}
	}
	c := compileExample(t, "single-node")
	c.Runtime.Engine, c.Runtime.CgroupDriver = "cri-o", "cgroupfs"
	path, data, err := runtimeConfig(c, c.Nodes[0])
	if err != nil || path != "etc/crio/crio.conf.d/10-kcompile.conf" || !strings.Contains(string(data), "cgroup_manager = 'cgroupfs'") {
		t.Errorf("CRI-O config %s:\n%s %v", path, data, err)
	}
}

func TestCNIConfList(t *testing.T) {
	want := map[string]string{"single-node": "cbr0", "ha-stacked": "k8s-pod-network", "external-etcd": "cilium", "dual-stack": "cbr0", "flatcar": "cbr0"}
	for _, name := range fixture.Examples() {
		c := compileExample(t, name)
		n := c.Nodes[len(c.Nodes)-1]
		_, data, err := cniConfList(c, n)
		if err != nil {
			t.Fatal(err)
		}
		list, err := libcni.ConfListFromBytes(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if list.Name != want[name] {
			t.Errorf("%s: network %q, want %q", name, list.Name, want[name])
		}
		if name == "ha-stacked" {
			var doc struct {
				Plugins []struct {
					MTU      int    `json:"mtu"`
					Nodename string `json:"nodename"`
				} `json:"plugins"`
			}
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			if doc.Plugins[0].MTU != c.Network.PodMTU || doc.Plugins[0].Nodename != n.Name {
				t.Errorf("calico MTU %d nodename %q, want %d %q", doc.Plugins[0].MTU, doc.Plugins[0].Nodename, c.Network.PodMTU, n.Name)
			}
		}
	}
}

func TestModulesAndSysctl(t *testing.T) {
	c := compileExample(t, "dual-stack")
	n := c.Nodes[0]
	if s := string(sysctlConf(c)); !strings.Contains(s, "net.ipv6.conf.all.forwarding = 1") || !strings.Contains(s, "net.ipv4.ip_forward = 1") {
		t.Errorf("dual-stack sysctls:\n%s", s)
	}
	if m := string(modulesConf(c, n)); !strings.Contains(m, "\nnf_tables\n") || !strings.Contains(m, "\nbr_netfilter\n") {
		t.Errorf("nftables modules:\n%s", m)
	}
	c.Network.KubeProxyMode = "ipvs"
	if m := string(modulesConf(c, n)); !strings.Contains(m, "\nip_vs_rr\n") {
		t.Errorf("ipvs modules:\n%s", m)
	}
}

// TestMirrorFiles: the spec's registry mirrors reach the runtime as it
// reads them, in the spec's order (containerd tries hosts.toml's tables
// in file order), the containerd configuration points at them, and
// verify refuses files that say anything else.
func TestMirrorFiles(t *testing.T) {
	c := compileExample(t, "single-node")
	c.Runtime.Mirrors = []ir.Mirror{
		{Registry: "docker.io", Endpoints: urls("https://z.example.com", "http://10.0.0.5:5000")},
		{Registry: "registry.example.com:5000", Endpoints: urls("https://a.example.com")},
	}
	c.Runtime.RestrictOOMScoreAdj = true
	files, err := MirrorFiles(c.Runtime.Engine, c.Runtime.Mirrors)
	if err != nil {
		t.Fatal(err)
	}
	docker := "etc/containerd/certs.d/docker.io/hosts.toml"
	if got := sortedPaths(files); !slices.Equal(got, []string{docker, "etc/containerd/certs.d/registry.example.com:5000/hosts.toml"}) {
		t.Fatalf("files %v", got)
	}
	var hosts struct {
		Server string                         `toml:"server"`
		Host   map[string]map[string][]string `toml:"host"`
	}
	if err := toml.Unmarshal(files[docker], &hosts); err != nil {
		t.Fatal(err)
	}
	if hosts.Server != "https://registry-1.docker.io" || len(hosts.Host) != 2 ||
		!slices.Equal(hosts.Host["http://10.0.0.5:5000"]["capabilities"], []string{"pull", "resolve"}) {
		t.Errorf("hosts.toml reads as %+v:\n%s", hosts, files[docker])
	}
	if order, err := tomlTables(files[docker], "host"); err != nil || !slices.Equal(order, c.Runtime.Mirrors[0].URLs()) {
		t.Errorf("mirrors in the order %v (%v):\n%s", order, err, files[docker])
	}
	for p, data := range files {
		if err := verifyRuntimeFile("nodes/box/"+p, data, c); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	_, cfg, err := runtimeConfig(c, c.Nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyRuntimeFile("nodes/box/"+layout.ContainerdConfig, cfg, c); err != nil ||
		!strings.Contains(string(cfg), "config_path = '/etc/containerd/certs.d'") || !strings.Contains(string(cfg), "restrict_oom_score_adj = true") {
		t.Errorf("containerd config (%v):\n%s", err, cfg)
	}
	// Mirrors in another order, a mirror too many, and a configuration
	// that does not point at them are compiler bugs verify reports.
	reversed := *c
	reversed.Runtime.Mirrors = []ir.Mirror{{Registry: "docker.io", Endpoints: urls("http://10.0.0.5:5000", "https://z.example.com")}}
	swapped, err := MirrorFiles(reversed.Runtime.Engine, reversed.Runtime.Mirrors)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		path string
		data []byte
	}{
		{docker, swapped[docker]},
		{docker, append(append([]byte(nil), files[docker]...), "\n[host.'https://evil.example.com']\ncapabilities = ['pull']\n"...)},
		{docker, append(append([]byte(nil), files[docker]...), "\n[host.'https://z.example.com'.header]\nx = ['y']\n"...)},
		{layout.ContainerdConfig, []byte(strings.Replace(string(cfg), "config_path = '/etc/containerd/certs.d'", "config_path = '/tmp'", 1))},
		{layout.ContainerdConfig, []byte(strings.Replace(string(cfg), "restrict_oom_score_adj = true", "restrict_oom_score_adj = false", 1))},
	} {
		if err := verifyRuntimeFile("nodes/box/"+bad.path, bad.data, c); err == nil {
			t.Errorf("verify accepted %s:\n%s", bad.path, bad.data)
		}
	}

	c.Runtime.Engine = "cri-o"
	files, err = MirrorFiles(c.Runtime.Engine, c.Runtime.Mirrors)
	if err != nil {
		t.Fatal(err)
	}
	reg := files[layout.ContainersRegistries]
	var doc crioRegistries
	if err := toml.Unmarshal(reg, &doc); err != nil || len(files) != 1 {
		t.Fatalf("%v %v", err, sortedPaths(files))
	}
	want := crioRegistries{Registry: []crioRegistry{
		{Prefix: "docker.io", Location: "docker.io", Mirror: []crioMirror{{Location: "z.example.com"}, {Location: "10.0.0.5:5000", Insecure: true}}},
		{Prefix: "registry.example.com:5000", Location: "registry.example.com:5000", Mirror: []crioMirror{{Location: "a.example.com"}}},
	}}
	if !reflect.DeepEqual(doc, want) {
		t.Errorf("registries.conf.d reads as %+v:\n%s", doc, reg)
	}
	if err := verifyRuntimeFile("nodes/box/"+layout.ContainersRegistries, reg, c); err != nil {
		t.Error(err)
	}
	if err := verifyRuntimeFile("nodes/box/"+layout.ContainersRegistries, []byte(strings.Replace(string(reg), "insecure = true\n", "", 1)), c); err == nil {
		t.Error("verify accepted an http mirror read as https")
	}

	c = compileExample(t, "single-node")
	if files, _ := MirrorFiles(c.Runtime.Engine, c.Runtime.Mirrors); len(files) != 0 {
		t.Errorf("no mirrors, yet %v", sortedPaths(files))
	}
	if _, cfg, _ := runtimeConfig(c, c.Nodes[0]); strings.Contains(string(cfg), "config_path") || strings.Contains(string(cfg), "restrict_oom_score_adj") {
		t.Errorf("the default containerd config has host options:\n%s", cfg)
	}
}

// TestFailCgroupV1FollowsSpec: the kubelet's configuration says what the
// spec does, either way.
func TestFailCgroupV1FollowsSpec(t *testing.T) {
	c := compileExample(t, "single-node")
	n := c.Nodes[0]
	for _, on := range []bool{true, false} {
		c.Kubelet.FailCgroupV1 = on
		cfg := kubeletConfig(c, n, Options{}.placement(n))
		data, err := marshalConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.FailCgroupV1 == nil || *cfg.FailCgroupV1 != on || !strings.Contains(string(data), fmt.Sprintf("failCgroupV1: %t\n", on)) {
			t.Errorf("failCgroupV1 %t:\n%s", on, data)
		}
	}
}

// urls parses mirror endpoints as the checks do.
func urls(s ...string) []*url.URL {
	var out []*url.URL
	for _, e := range s {
		u, err := url.Parse(e)
		if err != nil {
			panic(err)
		}
		out = append(out, u)
	}
	return out
}
