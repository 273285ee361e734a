package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
)

// writeNode lays node n's files of tree under a new directory, whose path
// it returns.
func writeNode(t *testing.T, tree *targets.Tree, n string) string {
	t.Helper()
	root := t.TempDir()
	layNode(t, tree, n, root)
	return root
}

// layNode writes node n's files of tree under root, with their modes.
func layNode(t *testing.T, tree *targets.Tree, n, root string) {
	t.Helper()
	prefix := layout.NodeTree(n, "")
	for _, f := range tree.Files() {
		rel, ok := strings.CutPrefix(f.Path, prefix)
		if !ok {
			continue
		}
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, f.Mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.Mode); err != nil {
			t.Fatal(err)
		}
	}
}

// checkHAProxy has HAProxy check the node's configuration, its paths
// moved under root (the CA and the client certificate are read).
func checkHAProxy(t *testing.T, root string) {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join(root, layout.HAProxyConfig))
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(moved, []byte(strings.ReplaceAll(string(cfg), " /etc/", " "+root+"/etc/")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("haproxy", "-c", "-f", moved).CombinedOutput(); err != nil {
		t.Errorf("haproxy -c: %v\n%s\n%s", err, out, cfg)
	}
}

func endpointMaterial(t *testing.T, name string, extra map[string]string) (*ir.Cluster, *targets.Tree) {
	t.Helper()
	m := fixture.Material(t, name, extra)
	tree, err := Build(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m.Cluster, tree
}

// TestEndpointVIP checks ha-stacked's VIP with the real HAProxy and
// keepalived: each control-plane node balances to every API server's
// /readyz, and its keepalived configuration, with the interface the
// tree's own script finds for the node's address in a network namespace,
// passes keepalived's configuration test.
func TestEndpointVIP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("keepalived's configuration test needs a network namespace with the node's address: run as root (CI does)")
	}
	c, tree := endpointMaterial(t, "ha-stacked", nil)
	if c.Endpoint.Mode != ir.EndpointVIP {
		t.Fatalf("ha-stacked's endpoint is %s, not a VIP", c.Endpoint.Mode)
	}
	var servers []string
	for _, n := range apiServers(c) {
		servers = append(servers, "server "+n.Name+" "+n.Address().String()+":6443")
	}
	for _, n := range c.Nodes {
		_, hasProxy := tree.Get(layout.NodeTree(n.Name, layout.HAProxyConfig))
		_, hasVRRP := tree.Get(layout.NodeTree(n.Name, layout.KeepalivedConfig))
		cp := n.Runs(ir.ComponentAPIServer)
		if hasProxy != cp || hasVRRP != cp {
			t.Errorf("node %s: HAProxy %t, keepalived %t; want both only on control-plane nodes", n.Name, hasProxy, hasVRRP)
		}
		if !cp {
			continue
		}
		root := writeNode(t, tree, n.Name)
		cfg, _ := os.ReadFile(filepath.Join(root, layout.HAProxyConfig))
		for _, want := range append(servers, "bind 10.0.0.10:6443 transparent", "http-check send meth GET uri /readyz", "check-ssl verify required verifyhost kubernetes") {
			if !strings.Contains(string(cfg), want) {
				t.Errorf("%s's haproxy.cfg lacks %q", n.Name, want)
			}
		}
		checkHAProxy(t, root)

		// keepalived -t checks the interface exists: a namespace with
		// the node's address on a veth, and the interface found by the
		// tree's own script.
		conf := filepath.Join(root, layout.KeepalivedConfig)
		iface := filepath.Join(t.TempDir(), "interface.conf")
		data, _ := os.ReadFile(conf)
		if err := os.WriteFile(conf, []byte(strings.Replace(string(data), "include "+layout.Abs(layout.KeepalivedInterface), "include "+iface, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		script := `set -e
ip link add eth7 type veth peer name eth8
ip link set eth7 up
ip addr add "$1/16" dev eth7
"$2" "$1" "$3"
keepalived -t -l -f "$4"`
		out, err := exec.Command("unshare", "-n", "sh", "-c", script, "sh", n.Address().String(), filepath.Join(root, ir.OSDebian.LibDir(), layout.VRRPInterfaceScript), iface, conf).CombinedOutput()
		if err != nil {
			t.Errorf("%s: keepalived -t: %v\n%s\n%s", n.Name, err, out, data)
		}
		if got, _ := os.ReadFile(iface); string(got) != "$KC_INTERFACE=eth7\n" {
			t.Errorf("%s: vrrp-interface wrote %q", n.Name, got)
		}
		for _, want := range []string{"virtual_router_id 51", "10.0.0.10/16", "unicast_src_ip " + n.Address().String()} {
			if !strings.Contains(string(data), want) {
				t.Errorf("%s's keepalived.conf lacks %q", n.Name, want)
			}
		}
		for _, p := range apiServers(c) {
			if has := strings.Contains(string(data), "\t\t"+p.Address().String()+"\n"); has == (p.Name == n.Name) {
				t.Errorf("%s's keepalived.conf: peer %s listed %t", n.Name, p.Name, has)
			}
		}
		// The API server leaves the VIP's port free at the VIP.
		unit, _ := tree.Get(layout.NodeTree(n.Name, layout.UnitDir+"kube-apiserver.service"))
		if !strings.Contains(string(unit.Data), "--bind-address="+n.Address().String()) {
			t.Errorf("%s's API server listens on every address, the VIP's too", n.Name)
		}
	}
}

// TestEndpointNodeLocal: every node with a kubelet reaches the API
// servers through HAProxy on its loopback, and its node-level
// kubeconfigs say so.
func TestEndpointNodeLocal(t *testing.T) {
	c, tree := endpointMaterial(t, "dual-stack", map[string]string{"local.cue": "package cluster\ncontrolPlane: endpoint: mode: \"nodeLocal\"\n"})
	for _, n := range c.Nodes {
		if !n.RunsPods() {
			continue
		}
		if _, ok := tree.Get(layout.NodeTree(n.Name, layout.KeepalivedConfig)); ok {
			t.Errorf("%s has keepalived in mode nodeLocal", n.Name)
		}
		root := writeNode(t, tree, n.Name)
		cfg, err := os.ReadFile(filepath.Join(root, layout.HAProxyConfig))
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		if !strings.Contains(string(cfg), "bind 127.0.0.1:6444\n") || strings.Count(string(cfg), "\tserver ") != len(apiServers(c)) {
			t.Errorf("%s's haproxy.cfg:\n%s", n.Name, cfg)
		}
		checkHAProxy(t, root)
		kubeconfigs := []string{layout.KubeletKubeconfig}
		if n.Runs(ir.ComponentKubeProxy) {
			kubeconfigs = append(kubeconfigs, layout.KubeProxyKubeconfig)
		}
		for _, kc := range kubeconfigs {
			f, ok := tree.Get(layout.NodeTree(n.Name, kc))
			if !ok || !strings.Contains(string(f.Data), `server: "https://127.0.0.1:6444"`) {
				t.Errorf("%s's %s does not dial the node-local proxy (present: %t)", n.Name, kc, ok)
			}
		}
	}
	admin, _ := tree.Get(layout.ClusterTree("admin.conf"))
	if !strings.Contains(string(admin.Data), `server: "`+c.Endpoint.URL()+`"`) {
		t.Errorf("admin.conf does not dial the endpoint %s", c.Endpoint.URL())
	}
}
