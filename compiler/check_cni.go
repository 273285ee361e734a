package compiler

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

const (
	CodeFlannelPolicy    = "KC0801"
	CodeKPRNeedsNone     = "KC0802"
	CodeNoneNeedsKPR     = "KC0803"
	CodePodMTU           = "KC0804"
	CodeKPRNotCilium     = "KC0805"
	CodeFlannelWireGuard = "KC0806"
	CodeL2Mode           = "KC0807"
)

func cniFamily() family {
	return family{name: "CNI and kube-proxy", check: checkCNI, rules: []diag.Rule{
		rule(CodeFlannelPolicy, diag.Error, "flannel cannot enforce NetworkPolicy but the spec requires it"),
		rule(CodeKPRNeedsNone, diag.Error, "cilium replaces kube-proxy but kube-proxy mode is not \"none\""),
		rule(CodeNoneNeedsKPR, diag.Error, "kube-proxy mode is \"none\" but no CNI plugin replaces it"),
		rule(CodePodMTU, diag.Error, "the pod MTU does not fit the node MTU minus the encapsulation overhead"),
		rule(CodeKPRNotCilium, diag.Error, "kubeProxyReplacement is set for a plugin other than cilium"),
		rule(CodeFlannelWireGuard, diag.Error, "flannel encrypts with mode \"wireguard\", not the wireguard switch"),
		rule(CodeL2Mode, diag.Warning, "an unencapsulated pod network spans several node networks"),
	}}
}

func checkCNI(m *model) {
	n := m.spec.Network
	cni := n.CNI
	if cni.Plugin == "flannel" && n.NetworkPolicy {
		// flannel is the default plugin: then report at networkPolicy.
		at, more := m.conflict("network.cni.plugin", "network.networkPolicy")
		m.report(CodeFlannelPolicy, at, "flannel does not implement NetworkPolicy, but network.networkPolicy requires it: policies would be accepted and silently not enforced",
			`use plugin "calico" or "cilium", or set networkPolicy: false`, more...)
	}
	if cni.KubeProxyReplacement && cni.Plugin != "cilium" {
		m.report(CodeKPRNotCilium, "network.cni.kubeProxyReplacement", fmt.Sprintf("%s cannot replace kube-proxy; only cilium can", cni.Plugin),
			"remove kubeProxyReplacement, or use plugin \"cilium\"")
	}
	if cni.Plugin == "flannel" && cni.WireGuard {
		m.report(CodeFlannelWireGuard, "network.cni.wireguard", "flannel has no wireguard switch; its WireGuard support is a backend",
			`set mode: "wireguard" instead`)
	}
	replaces := cni.Plugin == "cilium" && cni.KubeProxyReplacement
	mode := n.KubeProxy.Mode
	switch {
	case replaces && mode != "none":
		// The mode is usually the version's default: then report at
		// kubeProxyReplacement.
		at, more := m.conflict("network.kubeProxy.mode", "network.cni.kubeProxyReplacement")
		m.report(CodeKPRNeedsNone, at, fmt.Sprintf("cilium replaces kube-proxy, but kube-proxy mode is %q: both would program Services", mode),
			`set network: kubeProxy: mode: "none"`, more...)
	case !replaces && mode == "none":
		m.report(CodeNoneNeedsKPR, "network.kubeProxy.mode", fmt.Sprintf("kube-proxy mode is \"none\" but %s does not implement Services: ClusterIPs would not work", cni.Plugin),
			`use plugin "cilium" with kubeProxyReplacement: true, or choose mode "nftables", "iptables" or "ipvs"`)
	}
	overhead, what := encapOverhead(cni.Plugin, cni.Mode, cni.WireGuard)
	if cni.MTU != 0 && cni.MTU > n.MTU-overhead {
		m.report(CodePodMTU, "network.cni.mtu", fmt.Sprintf("pod MTU %d does not fit node MTU %d minus %d bytes of %s: packets would fragment or drop", cni.MTU, n.MTU, overhead, what),
			fmt.Sprintf("set the pod MTU to at most %d, or leave it out to get that value", n.MTU-overhead), "network.mtu")
	}
	if cni.Mode != "host-gw" && cni.Mode != "native" && cni.Mode != "bgp" {
		return
	}
	// Count the node networks that hold pod-running nodes, per IP family:
	// a dual-stack node sits in one network of each family on the same
	// segment, and a declared network without such nodes splits nothing.
	used := map[bool][]netip.Prefix{}
	for _, p := range m.nodeNetworks() {
		for _, node := range m.nodes {
			if node.runsPods() && slices.ContainsFunc(node.addrs, p.Contains) {
				used[p.Addr().Is4()] = append(used[p.Addr().Is4()], p)
				break
			}
		}
	}
	nets := used[true]
	if len(used[false]) > len(nets) {
		nets = used[false]
	}
	if len(nets) > 1 {
		m.report(CodeL2Mode, "network.cni.mode", fmt.Sprintf("mode %q routes pod traffic unencapsulated, but the nodes are in %d networks (%s)", cni.Mode, len(nets), ir.Join(nets, ", ")),
			"unencapsulated modes need routes between every pair of nodes (one L2 segment, or BGP peering with the routers): use an encapsulating mode otherwise",
			"network.nodes")
	}
}
