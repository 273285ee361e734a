package systemd

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/fixture"

	"github.com/containernetworking/cni/libcni"
)

func TestRuntimeConfigMatchesKubelet(t *testing.T) {
	for _, name := range fixture.Examples() {
		c := compileExample(t, name)
		path, data, err := runtimeConfig(c)
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
	}
	c := compileExample(t, "single-node")
	c.Runtime.Engine, c.Runtime.CgroupDriver = "cri-o", "cgroupfs"
	path, data, err := runtimeConfig(c)
	if err != nil || path != "etc/crio/crio.conf.d/10-kcompile.conf" || !strings.Contains(string(data), "cgroup_manager = 'cgroupfs'") {
		t.Errorf("CRI-O config %s:\n%s %v", path, data, err)
	}
}

func TestCNIConfList(t *testing.T) {
	want := map[string]string{"single-node": "cbr0", "ha-stacked": "k8s-pod-network", "external-etcd": "cilium", "dual-stack": "cbr0"}
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
