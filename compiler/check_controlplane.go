package compiler

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

const (
	CodeNoControlPlane   = "KC0501"
	CodeEndpointRequired = "KC0502"
	CodeEndpointIsNode   = "KC0503"
	CodeEndpointShape    = "KC0504"
	CodeEndpointInvalid  = "KC0505"
	CodeExtraSAN         = "KC0506"
	CodeEndpointReserved = "KC0507"
	CodePortClash        = "KC0508"
	CodeNoPodNode        = "KC0509"
	CodeVIPAddress       = "KC0510"
	CodeVIPNetwork       = "KC0511"
	CodeVIPSingle        = "KC0512"
	CodeEndpointPort     = "KC0513"
	CodeEndpointLoopback = "KC0514"
	CodeEndpointUnused   = "KC0515"
)

func controlPlaneFamily() family {
	return family{name: "control plane", check: checkControlPlane, rules: []diag.Rule{
		rule(CodeNoControlPlane, diag.Error, "there is no control-plane node"),
		rule(CodeEndpointRequired, diag.Error, "more than one control-plane node but no API endpoint (VIP or DNS name)"),
		rule(CodeEndpointIsNode, diag.Error, "the API endpoint address is a node's address"),
		rule(CodeEndpointShape, diag.Error, "the API endpoint sets both or neither of address and host"),
		rule(CodeEndpointInvalid, diag.Error, "the API endpoint address is not an IP address or its host is not a DNS name"),
		rule(CodeExtraSAN, diag.Error, "an extra API server SAN is neither an IP address nor a DNS name"),
		rule(CodeEndpointReserved, diag.Error, "the API endpoint address is the network, broadcast or gateway address of a node network, or a VIP is a nameserver's or the Matchbox host's"),
		rule(CodePortClash, diag.Error, "the API server's port is a port another component of its node listens on"),
		rule(CodeNoPodNode, diag.Warning, "no node can run ordinary pods: every pod-running node is tainted NoSchedule or NoExecute"),
		rule(CodeVIPAddress, diag.Error, "endpoint mode vip without an endpoint address"),
		rule(CodeVIPNetwork, diag.Error, "the VIP lies in no node network, or a control-plane node has no address on the VIP's network"),
		rule(CodeVIPSingle, diag.Warning, "a VIP in front of a single control-plane node"),
		rule(CodeEndpointPort, diag.Error, "the port the endpoint's proxy listens on is taken on its nodes (sshd's 22, the kubelet's 10248 and 10250, kube-controller-manager's 10257, kube-scheduler's 10259, stacked etcd's 2379-2381, kube-proxy's 10249 and 10256, the CNI plugin's, the NodePort range 30000-32767), or cannot be shared with the API servers"),
		rule(CodeEndpointLoopback, diag.Error, "endpoint mode nodeLocal with a loopback or unspecified endpoint address (or localhost): the endpoint is what clients outside the cluster dial, the node-local proxy has its own 127.0.0.1"),
		rule(CodeEndpointUnused, diag.Error, "settings of one endpoint mode (vip.routerID, vip.advertInterval, nodeLocal.port) written while another mode is in force, which ignores them"),
	}}
}

func checkControlPlane(m *model) {
	cp := m.spec.ControlPlane
	if len(cp.Nodes) == 0 {
		m.report(CodeNoControlPlane, "controlPlane.nodes", "the cluster has no control-plane node",
			`declare at least one, e.g. controlPlane: nodes: cp1: address: "10.0.0.11"`)
	}
	ep := cp.Endpoint
	if ep == nil {
		if len(cp.Nodes) > 1 {
			m.report(CodeEndpointRequired, "controlPlane.nodes", fmt.Sprintf("%d control-plane nodes but no API endpoint: clients would be tied to one API server", len(cp.Nodes)),
				`add controlPlane: endpoint: {address: "<VIP>"} or {host: "<DNS name>"} in front of the API servers`)
		}
	} else {
		switch {
		case ep.Address != "" && ep.Host != "":
			m.report(CodeEndpointShape, "controlPlane.endpoint", "the API endpoint sets both address and host",
				"keep one: address for a virtual IP, host for a DNS name", "controlPlane.endpoint.address", "controlPlane.endpoint.host")
		case ep.Address == "" && ep.Host == "":
			// An empty string written is the mistake to point at.
			at := "controlPlane.endpoint"
			for _, f := range []string{"address", "host"} {
				if m.written(at + "." + f) {
					at += "." + f
					break
				}
			}
			m.report(CodeEndpointShape, at, "the API endpoint sets neither address nor host",
				"set address (a virtual IP) or host (a DNS name)")
		case ep.Address != "":
			a, err := netip.ParseAddr(ep.Address)
			if err != nil {
				m.report(CodeEndpointInvalid, "controlPlane.endpoint.address", fmt.Sprintf("endpoint address %s is not an IP address", diag.Quote(ep.Address)),
					"write the virtual IP, or use host for a DNS name")
				break
			}
			checkVIPReserved(m, a)
			for _, n := range m.nodes {
				for i, na := range n.addrs {
					if na == a {
						m.report(CodeEndpointIsNode, "controlPlane.endpoint.address", fmt.Sprintf("endpoint address %s is the address of node %s", a, n.name),
							"the endpoint must be a virtual IP or load balancer in front of the API servers, not a machine that can fail",
							n.fieldPath([]string{"address", "secondaryAddress"}[min(i, 1)]))
					}
				}
			}
		default:
			if !isDNSSubdomain(ep.Host) {
				m.report(CodeEndpointInvalid, "controlPlane.endpoint.host", fmt.Sprintf("endpoint host %s is not a DNS name", diag.Quote(ep.Host)),
					"write a fully qualified DNS name such as api.example.com, or use address for an IP")
			}
		}
	}
	for i, san := range cp.APIServer.ExtraSANs {
		if _, err := netip.ParseAddr(san); err != nil && !isDNSSubdomain(san) && !isWildcard(san) {
			m.report(CodeExtraSAN, fmt.Sprintf("controlPlane.apiServer.extraSANs[%d]", i), fmt.Sprintf("extra SAN %s is neither an IP address nor a DNS name", diag.Quote(san)),
				"write an IP address or a DNS name such as api.example.com")
		}
	}
	checkPorts(m)
	checkEndpointMode(m)
	checkPodNodes(m)
}

// checkEndpointMode checks what serving the endpoint on the cluster's own
// nodes takes: a VIP that VRRP can move between every control-plane node,
// and ports the proxies can listen on.
func checkEndpointMode(m *model) {
	ep := m.spec.ControlPlane.Endpoint
	if ep == nil {
		return
	}
	checkEndpointUnused(m, ep)
	var cps []*mnode
	for _, n := range m.nodes {
		if n.role == ir.RoleControlPlane {
			cps = append(cps, n)
		}
	}
	switch ep.Mode {
	case string(ir.EndpointVIP):
		if ep.Address == "" {
			m.report(CodeVIPAddress, "controlPlane.endpoint.mode", "endpoint mode vip needs an address: keepalived holds an IP address, not a name",
				"set controlPlane.endpoint.address to a free address of the control-plane nodes' network (a DNS name may still point at it)", "controlPlane.endpoint.host")
			return
		}
		a, err := netip.ParseAddr(ep.Address)
		if err != nil {
			return
		}
		var on netip.Prefix
		for _, p := range m.nodeNetworks() {
			if p.Contains(a) {
				on = p
			}
		}
		if !on.IsValid() {
			m.report(CodeVIPNetwork, "controlPlane.endpoint.address", fmt.Sprintf("VIP %s lies in no node network: VRRP moves an address only within the control-plane nodes' link", a),
				"choose a free address of the control-plane nodes' network", "network.nodes")
		} else {
			for _, n := range cps {
				if !slices.ContainsFunc(n.addrs, on.Contains) {
					m.report(CodeVIPNetwork, n.fieldPath("address"), fmt.Sprintf("control-plane node %s has no address on the VIP's network %s: it can neither hold the VIP nor answer VRRP", n.name, on),
						"put every control-plane node on the VIP's network, or serve the endpoint another way (mode external or nodeLocal)", "controlPlane.endpoint.address")
				}
			}
		}
		if len(cps) == 1 && !m.unexpanded {
			m.report(CodeVIPSingle, "controlPlane.endpoint.mode", "a VIP in front of a single control-plane node has nowhere to fail over to",
				"add control-plane nodes (three tolerate the loss of one), or drop the VIP until then")
		}
		checkProxyPort(m, "controlPlane.endpoint.port", ep.Port, "the VIP's HAProxy", false)
		if ep.Port == m.spec.ControlPlane.APIServer.Port {
			for _, n := range cps {
				if n.spec.SecondaryAddress != "" {
					m.report(CodeEndpointPort, "controlPlane.endpoint.port", fmt.Sprintf("the VIP's port %d is the API servers' port, so each API server binds only its node's primary address to leave the VIP's free; control-plane node %s is dual-stack and would not serve its second address", ep.Port, n.name),
						"give the endpoint a port of its own, such as 8443", n.fieldPath("secondaryAddress"))
					break
				}
			}
		}
	case string(ir.EndpointNodeLocal):
		checkNodeLocalEndpoint(m, ep)
		checkProxyPort(m, "controlPlane.endpoint.nodeLocal.port", ep.NodeLocal.Port, "the node-local proxy", true)
	}
}

// checkNodeLocalEndpoint refuses a loopback endpoint in mode nodeLocal.
// There the nodes dial their own proxy on 127.0.0.1:nodeLocal.port by
// themselves; address or host is what everything else dials: the admin
// kubeconfigs, the API server certificate's SANs, kcompile up's and the
// simulator's readiness checks. A loopback address (or localhost, which
// resolves to one) reaches only the client's own machine, never the API
// servers, and on a control-plane node it is where the node's own
// listeners live (the API server, etcd's and the controllers' local
// ports), not a balancer.
func checkNodeLocalEndpoint(m *model, ep *specEndpoint) {
	const hint = "set address or host to what clients outside the cluster reach the API servers by (a load balancer or a DNS name); the node-local proxy needs no address, only nodeLocal.port"
	if a, err := netip.ParseAddr(ep.Address); err == nil && (a.Unmap().IsLoopback() || a.IsUnspecified()) {
		what := "a loopback address"
		if a.IsUnspecified() {
			what = "the unspecified address"
		}
		m.report(CodeEndpointLoopback, "controlPlane.endpoint.address", fmt.Sprintf("endpoint address %s is %s: in mode nodeLocal the endpoint is what clients outside the cluster dial (admin kubeconfig, certificate SAN), and there it reaches only the client's own machine; every node already dials its own proxy on 127.0.0.1:%d", a, what, ep.NodeLocal.Port),
			hint, "controlPlane.endpoint.mode")
	}
	if h := strings.ToLower(strings.TrimSuffix(ep.Host, ".")); h == "localhost" || strings.HasSuffix(h, ".localhost") {
		m.report(CodeEndpointLoopback, "controlPlane.endpoint.host", fmt.Sprintf("endpoint host %s names the loopback address (RFC 6761): in mode nodeLocal the endpoint is what clients outside the cluster dial (admin kubeconfig, certificate SAN), and there it reaches only the client's own machine; every node already dials its own proxy on 127.0.0.1:%d", diag.Quote(ep.Host), ep.NodeLocal.Port),
			hint, "controlPlane.endpoint.mode")
	}
}

// endpointModeFields are the settings only one endpoint mode reads.
var endpointModeFields = []struct{ path, mode string }{
	{"controlPlane.endpoint.vip.routerID", string(ir.EndpointVIP)},
	{"controlPlane.endpoint.vip.advertInterval", string(ir.EndpointVIP)},
	{"controlPlane.endpoint.nodeLocal.port", string(ir.EndpointNodeLocal)},
}

// checkEndpointUnused refuses settings of an endpoint mode the spec does
// not use: kcompile would drop them without a word while their author
// believes keepalived or the node-local proxy configured. An error, not a
// warning: the spec says two contradicting things, and which one the
// author meant (the mode or the settings) is not kcompile's to guess.
func checkEndpointUnused(m *model, ep *specEndpoint) {
	for _, f := range endpointModeFields {
		if ep.Mode == f.mode || !m.written(f.path) {
			continue
		}
		m.report(CodeEndpointUnused, f.path, fmt.Sprintf("%s configures endpoint mode %q, but the endpoint's mode is %q, which ignores it", strings.TrimPrefix(f.path, "controlPlane.endpoint."), f.mode, ep.Mode),
			fmt.Sprintf("set controlPlane.endpoint.mode: %q, or remove the setting", f.mode), "controlPlane.endpoint.mode")
	}
}

// checkProxyPort refuses a port for the endpoint's HAProxy that another
// component of its nodes listens on. onAPIServers says the proxy runs on
// control-plane nodes beside an API server listening on every address.
func checkProxyPort(m *model, path string, port int, who string, onAPIServers bool) {
	if onAPIServers && port == m.spec.ControlPlane.APIServer.Port {
		m.report(CodeEndpointPort, path, fmt.Sprintf("%s's port %d is the API servers' port, which they listen on at every address of the control-plane nodes", who, port),
			"choose another port, such as 6444", "controlPlane.apiServer.port")
		return
	}
	switch owner, nodePort := portTaken(m, port); {
	case owner != "":
		m.report(CodeEndpointPort, path, fmt.Sprintf("%s's port %d is the port of %s", who, port, owner),
			"choose another port, such as 6444")
	case nodePort:
		m.report(CodeEndpointPort, path, fmt.Sprintf("%s's port %d lies in the NodePort range 30000-32767, which Services take on every node", who, port),
			"choose a port outside the NodePort range, such as 6444")
	}
}

// checkVIPReserved refuses a VIP no host may answer for.
func checkVIPReserved(m *model, a netip.Addr) {
	for _, in := range m.nodeNetworks() {
		if !in.Contains(a) {
			continue
		}
		if what := reservedIn(a, in); what != "" {
			m.report(CodeEndpointReserved, "controlPlane.endpoint.address", fmt.Sprintf("endpoint address %s is the %s address of node network %s", a, what, in),
				"choose a free address strictly inside the node network for the VIP", "network.nodes")
		}
	}
	for i, g := range m.spec.Network.Gateways {
		if ga, err := netip.ParseAddr(g); err == nil && ga == a {
			m.report(CodeEndpointReserved, "controlPlane.endpoint.address", fmt.Sprintf("endpoint address %s is the gateway's", a),
				"choose a free address for the VIP; the router keeps its own", fmt.Sprintf("network.gateways[%d]", i))
		}
	}
	// keepalived would take the address from a host the nodes need at
	// boot: name resolution, or their configurations from Matchbox. (A
	// load balancer outside the cluster may well share a lab's DNS or
	// Matchbox host.)
	if ep := m.spec.ControlPlane.Endpoint; ep == nil || ep.Mode != string(ir.EndpointVIP) {
		return
	}
	for i, ns := range m.spec.Network.Nameservers {
		if na, err := netip.ParseAddr(ns); err == nil && na.Unmap() == a.Unmap() {
			m.report(CodeEndpointReserved, "controlPlane.endpoint.address", fmt.Sprintf("endpoint address %s is a nameserver's", a),
				"choose a free address for the VIP; the nameserver keeps its own", fmt.Sprintf("network.nameservers[%d]", i))
		}
	}
	if b := m.spec.Boot; b != nil && b.MatchboxURL != "" {
		if u, err := url.Parse(b.MatchboxURL); err == nil {
			if ha, err := netip.ParseAddr(u.Hostname()); err == nil && ha.Unmap() == a.Unmap() {
				m.report(CodeEndpointReserved, "controlPlane.endpoint.address", fmt.Sprintf("endpoint address %s is the Matchbox host's (boot.matchboxURL)", a),
					"choose a free address for the VIP; the machines fetch their configurations from Matchbox at that address", "boot.matchboxURL")
			}
		}
	}
}

// portOwner is a port some component of a node listens on.
type portOwner struct {
	port  int
	owner string
}

// nodePorts lists the TCP ports the components of a control-plane node
// listen on besides the API server, as the targets configure them, and
// the services of the node's operating system that listen on every
// address: sshd's 22 (every image runs it, access.users log in through
// it). Services that listen on a loopback address of their own, such as
// systemd-resolved's stub on 127.0.0.53:53, and UDP-only ones (chronyd's
// 123 and 323) clash with no proxy or API server; rpcbind's 111 runs on
// no image kcompile targets.
func nodePorts(s *specCluster, stacked bool) []portOwner {
	out := []portOwner{
		{22, "sshd, which every node's operating system runs (access.users log in through it)"},
		{10248, "the kubelet's health endpoint"}, {10250, "the kubelet"},
		{10257, "kube-controller-manager"}, {10259, "kube-scheduler"},
	}
	if stacked {
		out = append(out, portOwner{2379, "etcd's clients"}, portOwner{2380, "etcd's peers"}, portOwner{2381, "etcd's metrics"})
	}
	if s.Network.KubeProxy.Mode != "none" {
		out = append(out, portOwner{10249, "kube-proxy's metrics"}, portOwner{10256, "kube-proxy's health endpoint"})
	}
	switch s.Network.CNI.Plugin {
	case "calico":
		out = append(out, portOwner{179, "calico-node's BGP"}, portOwner{9099, "calico-node's health endpoint"})
	case "cilium":
		out = append(out, portOwner{4240, "cilium's cluster health"}, portOwner{9234, "cilium-operator's health endpoint"},
			portOwner{9879, "cilium-agent's health endpoint"}, portOwner{9963, "cilium-operator's metrics"}, portOwner{9964, "cilium's proxy metrics"})
	}
	return out
}

// checkPorts refuses an API server port another component of the node
// already listens on: one of them would not start.
func checkPorts(m *model) {
	port := m.spec.ControlPlane.APIServer.Port
	owner, nodePort := portTaken(m, port)
	switch {
	case owner != "":
		var more []string
		if strings.HasPrefix(owner, "etcd") && m.written("etcd.topology") {
			more = append(more, "etcd.topology")
		}
		m.report(CodePortClash, "controlPlane.apiServer.port", fmt.Sprintf("the API server's port %d is the port of %s on every control-plane node", port, owner),
			"choose another port for the API servers, such as 6443", more...)
	case nodePort:
		m.report(CodePortClash, "controlPlane.apiServer.port", fmt.Sprintf("the API server's port %d lies in the NodePort range 30000-32767, which Services take on every node", port),
			"choose a port outside the NodePort range, such as 6443")
	}
}

// portTaken says what else listens on port on a control-plane node: a
// component (its owner), or Services of type NodePort, which take the
// ports 30000-32767 on every node address.
func portTaken(m *model, port int) (owner string, nodePort bool) {
	for _, p := range nodePorts(&m.spec, m.spec.Etcd.Topology != "external") {
		if p.port == port {
			return p.owner, false
		}
	}
	return "", port >= 30000 && port <= 32767
}

// checkPodNodes warns when ordinary pods have nowhere to run: a cluster
// of tainted control-plane nodes and nothing else runs no workload, and
// CoreDNS stays Pending on clusters whose nodes are all NoExecute.
func checkPodNodes(m *model) {
	if m.unexpanded {
		return
	}
	runs := 0
	for _, n := range m.nodes {
		if !n.runsPods() {
			continue
		}
		runs++
		if n.role == "control-plane" && !m.spec.ControlPlane.Schedulable {
			continue
		}
		if !slices.ContainsFunc(n.spec.Taints, func(t specTaint) bool { return t.Effect == "NoSchedule" || t.Effect == "NoExecute" }) {
			return
		}
	}
	if runs == 0 {
		return
	}
	at := "controlPlane.schedulable"
	if len(m.spec.Workers.Nodes)+len(m.spec.Workers.Pools) > 0 {
		at = "workers"
	}
	m.report(CodeNoPodNode, at, "no node can run ordinary pods: the control-plane nodes are tainted NoSchedule and every worker is tainted NoSchedule or NoExecute (or there is none)",
		"add workers without such taints, or set controlPlane.schedulable: true for a cluster of control-plane nodes only")
}

func isWildcard(s string) bool { return len(s) > 2 && s[:2] == "*." && isDNSSubdomain(s[2:]) }
