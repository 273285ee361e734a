package compiler

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
)

func compileExample(t *testing.T, name string) *ir.Cluster {
	t.Helper()
	c, diags := Compile(Source{Dir: "../examples/" + name})
	if c == nil {
		t.Fatalf("%s does not compile:\n%s", name, lines(diags))
	}
	return c
}

func setting(t *testing.T, c *ir.Cluster, path string) ir.Setting {
	t.Helper()
	for _, s := range c.Settings {
		if s.Path == path {
			return s
		}
	}
	t.Fatalf("no setting %s", path)
	return ir.Setting{}
}

func TestLowerHAStacked(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	var names []string
	for _, n := range c.Nodes {
		names = append(names, n.Name)
	}
	if got, want := strings.Join(names, " "), "cp1 cp2 cp3 w01 w02 w03 w04 w05 w06"; got != want {
		t.Errorf("node order %q, want %q", got, want)
	}
	if c.Endpoint.URL() != "https://10.0.0.10:6443" || c.Endpoint.Address != netip.MustParseAddr("10.0.0.10") {
		t.Errorf("endpoint %+v", c.Endpoint)
	}
	if got := c.Network.FirstServiceIPs; len(got) != 1 || got[0].String() != "10.96.0.1" {
		t.Errorf("first service IPs %v", got)
	}
	if c.Network.DNSServiceIP.String() != "10.96.0.10" {
		t.Errorf("DNS IP %v", c.Network.DNSServiceIP)
	}
	if c.Network.PodMTU != 1450 {
		t.Errorf("calico vxlan pod MTU %d, want 1500-50", c.Network.PodMTU)
	}
	if c.Network.KubeProxyMode != "nftables" {
		t.Errorf("kube-proxy mode %q", c.Network.KubeProxyMode)
	}
	if c.Etcd.InitialCluster() != "cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380,cp3=https://10.0.0.13:2380" {
		t.Errorf("initial cluster %q", c.Etcd.InitialCluster())
	}
	cp1, w01 := c.Nodes[0], c.Nodes[3]
	wantCP := []ir.Component{ir.ComponentEtcd, ir.ComponentAPIServer, ir.ComponentControllerManager, ir.ComponentScheduler,
		ir.ComponentRuntime, ir.ComponentKubelet, ir.ComponentKubeProxy}
	if !slices.Equal(cp1.Components, wantCP) {
		t.Errorf("cp1 components %v", cp1.Components)
	}
	if !slices.Contains(cp1.Taints, ir.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: "NoSchedule"}) {
		t.Errorf("cp1 taints %v", cp1.Taints)
	}
	if w01.Role != ir.RoleWorker || w01.Pool != "general" || w01.Zone != "a" || w01.MAC != "52:54:00:00:01:10" || w01.Address().String() != "10.0.1.10" {
		t.Errorf("w01 %+v", w01)
	}
	if c.Nodes[8].Zone != "c" || c.Nodes[8].Address().String() != "10.0.1.15" {
		t.Errorf("w06 %+v", c.Nodes[8])
	}
	if !slices.Contains(w01.Labels, ir.Label{Key: "topology.kubernetes.io/zone", Value: "a"}) ||
		!slices.Contains(w01.Labels, ir.Label{Key: "node.kubernetes.io/pool", Value: "general"}) {
		t.Errorf("w01 labels %v", w01.Labels)
	}
	if w01.Runs(ir.ComponentAPIServer) || !w01.RunsPods() {
		t.Errorf("w01 components %v", w01.Components)
	}
	if c.PKI.KeyAlgorithm != "ECDSA-P256" || c.PKI.LeafValidity.Hours() != 365*24 || c.PKI.CAValidity.Hours() != 10*365*24 {
		t.Errorf("PKI %+v", c.PKI)
	}
	if c.Runtime.Engine != "containerd" || c.Runtime.CgroupDriver != "systemd" || c.Kubelet.CgroupDriver != "systemd" {
		t.Errorf("runtime %+v kubelet %+v", c.Runtime, c.Kubelet)
	}

	// Provenance: spec values at the user's position, defaults at the
	// schema's, derived values naming their inputs.
	if s := setting(t, c, "network.cni.plugin"); s.Origin.Kind != ir.FromSpec || !strings.HasSuffix(s.Origin.Pos.File, "examples/ha-stacked/network.cue") || s.Origin.Pos.Line != 6 {
		t.Errorf("cni plugin origin %+v", s)
	}
	if s := setting(t, c, "network.serviceCIDR"); s.Origin.Kind != ir.FromDefault || s.Origin.Pos.File != "schema/v1alpha1/network.cue" || s.Value != `"10.96.0.0/12"` {
		t.Errorf("service CIDR origin %+v", s)
	}
	if s := setting(t, c, "network.dnsServiceIP"); s.Origin.Kind != ir.FromDerived || !strings.Contains(s.Origin.From, "network.serviceCIDR") {
		t.Errorf("DNS IP origin %+v", s)
	}
	if s := setting(t, c, "nodes.w02.address"); s.Value != `"10.0.1.11"` || s.Origin.From != "workers.pools.general.firstAddress" || s.Origin.Pos.Line != 6 {
		t.Errorf("w02 address origin %+v", s)
	}
	if !slices.IsSortedFunc(c.Settings, func(a, b ir.Setting) int { return strings.Compare(a.Path, b.Path) }) {
		t.Error("settings are not sorted by path")
	}
}

func TestLowerExternalEtcd(t *testing.T) {
	c := compileExample(t, "external-etcd")
	if c.Endpoint.URL() != "https://api.core.example.com:6443" || c.Endpoint.Address.IsValid() {
		t.Errorf("endpoint %+v", c.Endpoint)
	}
	if len(c.Etcd.Members) != 5 || c.Etcd.Members[0].ClientURL() != "https://10.10.1.11:2379" {
		t.Errorf("etcd members %+v", c.Etcd.Members)
	}
	for _, n := range c.Nodes {
		switch n.Role {
		case ir.RoleControlPlane:
			if n.Runs(ir.ComponentEtcd) || n.Runs(ir.ComponentKubeProxy) {
				t.Errorf("%s components %v: no stacked etcd, no kube-proxy with cilium replacement", n.Name, n.Components)
			}
		case ir.RoleEtcd:
			if !slices.Equal(n.Components, []ir.Component{ir.ComponentEtcd}) || n.RunsPods() {
				t.Errorf("%s components %v", n.Name, n.Components)
			}
		}
	}
	if c.Nodes[3].Name != "etcd1" || c.Nodes[8].Name != "compute-1" {
		t.Errorf("nodes not ordered by role then name: %s, %s", c.Nodes[3].Name, c.Nodes[8].Name)
	}
	if c.PKI.KeyAlgorithm != "ECDSA-P384" || c.Network.KubeProxyMode != "none" || !c.Network.CNI.KubeProxyReplacement {
		t.Errorf("pki %+v network %+v", c.PKI, c.Network)
	}
}

func TestLowerDualStack(t *testing.T) {
	c := compileExample(t, "dual-stack")
	if !c.Network.DualStack() {
		t.Fatal("not dual-stack")
	}
	if got := c.Network.FirstServiceIPs; len(got) != 2 || got[0].String() != "10.96.0.1" || got[1].String() != "fd00:10:96::1" {
		t.Errorf("first service IPs %v", got)
	}
	for _, n := range c.Nodes {
		if len(n.Addresses) != 2 || !n.Addresses[0].Is4() || !n.Addresses[1].Is6() {
			t.Errorf("%s addresses %v", n.Name, n.Addresses)
		}
	}
	if c.Nodes[5].Name != "edge3" || c.Nodes[5].Addresses[1].String() != "fd00:20::23" {
		t.Errorf("pool node %+v", c.Nodes[5])
	}
}

func TestLowerDefaultsFollowVersion(t *testing.T) {
	spec := func(version, etcd string) string {
		return `package cluster

apiVersion: "kcompile.dev/v1alpha1"
name:       "old"
kubernetes: version: "` + version + `"
etcd: version: "` + etcd + `"
controlPlane: {schedulable: true, nodes: only: address: "fd00::10"}
network: {
	nodes: ["fd00::/64"]
	podCIDR:     "fd01::/48"
	serviceCIDR: "fd02::/112"
}
`
	}
	for _, tc := range []struct{ version, etcd, mode string }{{"1.30.9", "3.5.17", "iptables"}, {"1.31.4", "3.5.17", "nftables"}} {
		dir := t.TempDir()
		c, diags := Compile(Source{Dir: dir, Overlay: map[string][]byte{"spec.cue": []byte(spec(tc.version, tc.etcd))}})
		if c == nil {
			t.Fatalf("%s: %s", tc.version, lines(diags))
		}
		if c.Network.KubeProxyMode != tc.mode {
			t.Errorf("Kubernetes %s: kube-proxy mode %q, want %q", tc.version, c.Network.KubeProxyMode, tc.mode)
		}
		if c.Endpoint.URL() != "https://[fd00::10]:6443" {
			t.Errorf("IPv6 endpoint URL %q", c.Endpoint.URL())
		}
		if c.Network.DNSServiceIP.String() != "fd02::a" || c.Etcd.InitialCluster() != "only=https://[fd00::10]:2380" {
			t.Errorf("DNS IP %v, initial cluster %q", c.Network.DNSServiceIP, c.Etcd.InitialCluster())
		}
	}
}

// TestLowerHostOptions: the host-specific options reach the IR as the
// spec writes them, and only when it does; mirrors keep their order.
func TestLowerHostOptions(t *testing.T) {
	c := compileExample(t, "single-node")
	if len(c.Runtime.Mirrors) != 0 || c.Runtime.RestrictOOMScoreAdj || !c.Kubelet.FailCgroupV1 {
		t.Errorf("defaults: mirrors %v, restrictOOMScoreAdj %t, failCgroupV1 %t", c.Runtime.Mirrors, c.Runtime.RestrictOOMScoreAdj, c.Kubelet.FailCgroupV1)
	}
	spec := header + one + `runtime: {restrictOOMScoreAdj: true, mirrors: {
	"registry.k8s.io": ["https://b.example.com", "http://a.example.com:5000"]
	"docker.io": ["https://c.example.com"]
}}
kubelet: failCgroupV1: false
`
	c, diags := Compile(Source{Dir: t.TempDir(), Overlay: map[string][]byte{"spec.cue": []byte(spec)}})
	if c == nil {
		t.Fatalf("does not compile:\n%s", lines(diags))
	}
	want := []struct {
		registry string
		urls     []string
	}{{"docker.io", []string{"https://c.example.com"}}, {"registry.k8s.io", []string{"https://b.example.com", "http://a.example.com:5000"}}}
	if !slices.EqualFunc(c.Runtime.Mirrors, want, func(a ir.Mirror, b struct {
		registry string
		urls     []string
	}) bool {
		return a.Registry == b.registry && slices.Equal(a.URLs(), b.urls)
	}) {
		t.Errorf("mirrors %v, want %v", c.Runtime.Mirrors, want)
	}
	if !c.Runtime.RestrictOOMScoreAdj || c.Kubelet.FailCgroupV1 {
		t.Errorf("restrictOOMScoreAdj %t, failCgroupV1 %t", c.Runtime.RestrictOOMScoreAdj, c.Kubelet.FailCgroupV1)
	}
}

// TestLowerKubeletShutdown: graceful node shutdown is on by default, set
// or turned off by the spec, and the critical pods' share cannot exceed
// the whole.
func TestLowerKubeletShutdown(t *testing.T) {
	c := compileExample(t, "single-node")
	if c.Kubelet.ShutdownGrace != 30*time.Second || c.Kubelet.ShutdownGraceCritical != 10*time.Second {
		t.Errorf("defaults: %v, critical %v; want 30s, 10s", c.Kubelet.ShutdownGrace, c.Kubelet.ShutdownGraceCritical)
	}
	for _, tc := range []struct {
		spec            string
		grace, critical time.Duration
		bad             bool
	}{
		{spec: "kubelet: shutdown: {gracePeriodSeconds: 120, criticalPodsSeconds: 30}", grace: 120 * time.Second, critical: 30 * time.Second},
		{spec: "kubelet: shutdown: gracePeriodSeconds: 90", grace: 90 * time.Second, critical: 30 * time.Second},
		{spec: "kubelet: shutdown: gracePeriodSeconds: 0"},
		{spec: "kubelet: shutdown: {gracePeriodSeconds: 5, criticalPodsSeconds: 10}", bad: true},
		{spec: "kubelet: shutdown: gracePeriodSeconds: -1", bad: true},
	} {
		c, diags := Compile(Source{Dir: t.TempDir(), Overlay: map[string][]byte{"spec.cue": []byte(header + one + tc.spec + "\n")}})
		switch {
		case tc.bad && c != nil:
			t.Errorf("%s: accepted", tc.spec)
		case tc.bad:
			if !strings.Contains(lines(diags), "kubelet.shutdown") {
				t.Errorf("%s: the error does not name the field:\n%s", tc.spec, lines(diags))
			}
		case c == nil:
			t.Errorf("%s: does not compile:\n%s", tc.spec, lines(diags))
		case c.Kubelet.ShutdownGrace != tc.grace || c.Kubelet.ShutdownGraceCritical != tc.critical:
			t.Errorf("%s: %v, critical %v", tc.spec, c.Kubelet.ShutdownGrace, c.Kubelet.ShutdownGraceCritical)
		}
	}
}
