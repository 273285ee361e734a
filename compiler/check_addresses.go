package compiler

import (
	"fmt"
	"net/netip"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

const (
	CodeAddressParse      = "KC0201"
	CodeAddressNetwork    = "KC0202"
	CodeAddressFamily     = "KC0203"
	CodeAddressReserved   = "KC0204"
	CodeAddressDualStack  = "KC0205"
	CodeAddressUnassigned = "KC0206"
	CodeGatewayNetwork    = "KC0207"
	CodeGatewayFamily     = "KC0208"
	CodeAddressGateway    = "KC0209"
)

func addressesFamily() family {
	return family{name: "addresses", check: checkAddresses, rules: []diag.Rule{
		rule(CodeAddressParse, diag.Error, "a node address does not parse as an IP address"),
		rule(CodeAddressNetwork, diag.Error, "a node address lies outside every declared node network"),
		rule(CodeAddressFamily, diag.Error, "a node's secondary address is of the same IP family as its primary"),
		rule(CodeAddressReserved, diag.Error, "a node address is the network or broadcast address of its node network (for IPv6, its subnet-router anycast address)"),
		rule(CodeAddressDualStack, diag.Warning, "a pod-running node of a dual-stack cluster has no address of the second family"),
		rule(CodeAddressUnassigned, diag.Error, "a node address is unspecified, loopback, multicast or link-local"),
		rule(CodeGatewayNetwork, diag.Error, "a gateway lies outside every node network"),
		rule(CodeGatewayFamily, diag.Error, "two gateways of one IP family"),
		rule(CodeAddressGateway, diag.Error, "a node address is a gateway's address"),
	}}
}

// nodeNetworks parses network.nodes, reporting bad entries once.
func (m *model) nodeNetworks() []netip.Prefix {
	var out []netip.Prefix
	for i, s := range m.spec.Network.Nodes {
		if p, ok := m.prefix(fmt.Sprintf("network.nodes[%d]", i), s); ok {
			out = append(out, p)
		}
	}
	return out
}

func checkAddresses(m *model) {
	networks := m.nodeNetworks()
	checkGateways(m, networks)
	// Warn about single-family nodes only when the cluster really is
	// dual-stack: a secondary pod CIDR of the other family.
	dual := false
	if m.spec.Network.SecondaryPodCIDR != "" {
		pod, ok1 := m.prefix("network.podCIDR", m.spec.Network.PodCIDR)
		pod2, ok2 := m.prefix("network.secondaryPodCIDR", m.spec.Network.SecondaryPodCIDR)
		dual = ok1 && ok2 && pod.Addr().Is4() != pod2.Addr().Is4()
	}
	first := onceSet{}.first
	for _, n := range m.nodes {
		if n.role == "etcd" && n.spec.Address == "" {
			continue // reported by the etcd checks
		}
		primary, err := netip.ParseAddr(n.spec.Address)
		if err != nil {
			m.report(CodeAddressParse, n.fieldPath("address"), fmt.Sprintf("address %s of node %s is not an IP address", diag.Quote(n.spec.Address), n.name),
				`write an IPv4 or IPv6 address such as "10.0.0.11", without a prefix length`)
			continue
		}
		addrs := []netip.Addr{primary}
		fields := []string{"address"}
		if n.spec.SecondaryAddress != "" {
			second, err := netip.ParseAddr(n.spec.SecondaryAddress)
			switch {
			case err != nil:
				m.report(CodeAddressParse, n.fieldPath("secondaryAddress"), fmt.Sprintf("secondary address %s of node %s is not an IP address", diag.Quote(n.spec.SecondaryAddress), n.name),
					`write an address of the other IP family, such as "fd00::11"`)
			case second.Is4() == primary.Is4():
				if first(CodeAddressFamily + n.path) {
					m.report(CodeAddressFamily, n.fieldPath("secondaryAddress"), fmt.Sprintf("node %s has two %s addresses; the secondary address must be of the other family", n.name, familyOf(primary)),
						"a node has at most one address per IP family: make secondaryAddress an "+familyOf(otherFamily(primary))+" address", n.fieldPath("address"))
				}
			default:
				addrs = append(addrs, second)
				fields = append(fields, "secondaryAddress")
			}
		} else if dual && n.runsPods() && first(CodeAddressDualStack+n.path) {
			m.report(CodeAddressDualStack, n.fieldPath("address"), fmt.Sprintf("node %s has no %s address in a dual-stack cluster", n.name, familyOf(otherFamily(primary))),
				"give the node a secondaryAddress (or a pool a firstSecondaryAddress) so host-network pods and the kubelet get both families", "network.secondaryPodCIDR")
		}
		for i, a := range addrs {
			path := n.fieldPath(fields[i])
			if a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() {
				if first(CodeAddressUnassigned + path) {
					m.report(CodeAddressUnassigned, path, fmt.Sprintf("address %s of node %s cannot be a node address", a, n.name),
						"use a unicast address of the node network")
				}
				continue
			}
			var in netip.Prefix
			for _, p := range networks {
				if p.Contains(a) {
					in = p
					break
				}
			}
			if !in.IsValid() {
				if len(networks) > 0 && first(CodeAddressNetwork+path) {
					m.report(CodeAddressNetwork, path, fmt.Sprintf("address %s of node %s is outside every node network (%s)", a, n.name, ir.Join(networks, ", ")),
						"correct the address, or add its network to network.nodes", "network.nodes")
				}
				continue
			}
			if what := reservedIn(a, in); what != "" && first(CodeAddressReserved+path) {
				m.report(CodeAddressReserved, path, fmt.Sprintf("address %s of node %s is the %s address of %s", a, n.name, what, in),
					"choose an address strictly inside the node network", "network.nodes")
			}
			for i, g := range m.spec.Network.Gateways {
				if ga, err := netip.ParseAddr(g); err == nil && ga == a && first(CodeAddressGateway+path) {
					m.report(CodeAddressGateway, path, fmt.Sprintf("address %s of node %s is the gateway's: the node would answer for the router", a, n.name),
						"give the node another address, or correct network.gateways", fmt.Sprintf("network.gateways[%d]", i))
				}
			}
		}
	}
}

// reservedIn names what a is in its network when no machine may take it:
// the network or broadcast address of an IPv4 network, or the
// subnet-router anycast address (the network address) of an IPv6 one.
func reservedIn(a netip.Addr, in netip.Prefix) string {
	switch {
	case a.Is4() && in.Bits() < 31 && a == in.Addr():
		return "network"
	case a.Is4() && in.Bits() < 31 && a == lastAddr(in):
		return "broadcast"
	case a.Is6() && in.Bits() < 127 && a == in.Addr():
		return "subnet-router anycast"
	}
	return ""
}

func familyOf(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func otherFamily(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.IPv6Unspecified()
	}
	return netip.IPv4Unspecified()
}

// checkGateways holds the nodes' default routes and resolvers to the node
// networks: a gateway must be reachable on the link, one per family.
func checkGateways(m *model, networks []netip.Prefix) {
	seen := map[bool]string{}
	for i, g := range m.spec.Network.Gateways {
		path := fmt.Sprintf("network.gateways[%d]", i)
		a, err := netip.ParseAddr(g)
		if err != nil {
			m.report(CodeAddressParse, path, fmt.Sprintf("gateway %s is not an IP address", diag.Quote(g)), `write the router's address, such as "10.0.0.1"`)
			continue
		}
		if other, dup := seen[a.Is4()]; dup {
			m.report(CodeGatewayFamily, path, fmt.Sprintf("gateways %s and %s are both %s: a node has one default route per family", other, g, familyOf(a)),
				"keep one gateway per IP family")
			continue
		}
		seen[a.Is4()] = g
		inside := false
		for _, p := range networks {
			inside = inside || p.Contains(a)
		}
		if !inside && len(networks) > 0 {
			m.report(CodeGatewayNetwork, path, fmt.Sprintf("gateway %s is outside every node network (%s): the nodes cannot reach it", a, ir.Join(networks, ", ")),
				"use the router's address on the node network", "network.nodes")
		}
	}
	for i, ns := range m.spec.Network.Nameservers {
		if _, err := netip.ParseAddr(ns); err != nil {
			m.report(CodeAddressParse, fmt.Sprintf("network.nameservers[%d]", i), fmt.Sprintf("nameserver %s is not an IP address", diag.Quote(ns)),
				`write the resolver's address, such as "10.0.0.53"`)
		}
	}
}
