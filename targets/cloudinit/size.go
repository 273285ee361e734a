package cloudinit

import (
	"fmt"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
)

// CodeUserDataSize is reported when a node's user-data is larger than the
// spec allows.
const CodeUserDataSize = "KC1301"

// CodeNoServiceRoute is reported when the network-config it writes gives
// the nodes no route to a Service CIDR.
const CodeNoServiceRoute = "KC1302"

// Rules lists the target's diagnostics.
func Rules() []diag.Rule {
	return []diag.Rule{
		{Code: CodeUserDataSize, Severity: diag.Error, Family: "cloud-init target", Summary: "a node's user-data is larger than cloudInit.maxUserDataBytes"},
		{Code: CodeNoServiceRoute, Severity: diag.Warning, Family: "cloud-init target", Summary: "no gateway of a Service CIDR's IP family: the network-config gives the nodes no route to Service addresses"},
		{Code: CodeIgnitionNodes, Severity: diag.Warning, Family: "cloud-init target", Summary: "nodes run an Ignition system (Flatcar, Fedora CoreOS): the cloud-init target leaves them out"},
		{Code: CodeNoCloudInitNode, Severity: diag.Error, Family: "cloud-init target", Summary: "every node runs an Ignition system: the cloud-init target would write no node configuration"},
	}
}

// Sizes reports every cloud-init node's user-data size, in node order.
func Sizes(c *ir.Cluster, tree *targets.Tree) []targets.NodeSize {
	return targets.Sizes(c, tree, layout.UserData, func(n ir.Node) bool { return !n.OS.Ignition() })
}

// CheckSizes reports the nodes whose user-data exceeds the spec's limit,
// at the limit's position in the spec.
func CheckSizes(c *ir.Cluster, sizes []targets.NodeSize) diag.List {
	if c.MaxUserDataBytes == 0 {
		return nil
	}
	var over []string
	largest := 0
	for _, s := range sizes {
		if s.Bytes > c.MaxUserDataBytes {
			over = append(over, fmt.Sprintf("%s (%d bytes)", s.Node, s.Bytes))
			largest = max(largest, s.Bytes)
		}
	}
	if len(over) == 0 {
		return nil
	}
	var ps []diag.Pos
	if p, ok := c.Position("cloudInit.maxUserDataBytes"); ok {
		ps = append(ps, diag.Pos{File: p.File, Line: p.Line, Column: p.Column})
	}
	return diag.List{{Code: CodeUserDataSize, Severity: diag.Error, Path: "cloudInit.maxUserDataBytes", Positions: ps,
		Message: fmt.Sprintf("user-data of %d node(s) exceeds %d bytes: %s", len(over), c.MaxUserDataBytes, strings.Join(over, ", ")),
		Hint:    fmt.Sprintf("raise the limit to at least %d if the platform allows it, or serve the configuration another way (e.g. Matchbox)", largest)}}
}

// CheckRoutes reports each Service CIDR family without a gateway. A node
// reaches a ClusterIP only if the kernel routes the packet before
// kube-proxy's rules rewrite it: without a default route of that family
// the node itself, and host-network pods such as the CNI plugin's (which
// reach the API server through the kubernetes Service), get "network is
// unreachable".
func CheckRoutes(c *ir.Cluster) diag.List {
	var out diag.List
	for _, svc := range c.Network.ServiceCIDRs {
		routed := false
		for _, g := range c.Network.Gateways {
			routed = routed || g.Is4() == svc.Addr().Is4()
		}
		if routed {
			continue
		}
		path := "network.nodes"
		if len(c.Network.Gateways) > 0 {
			path = "network.gateways"
		}
		var ps []diag.Pos
		if p, ok := c.Position(path); ok {
			ps = append(ps, diag.Pos{File: p.File, Line: p.Line, Column: p.Column})
		}
		family := "IPv6"
		if svc.Addr().Is4() {
			family = "IPv4"
		}
		out = append(out, diag.Diagnostic{Code: CodeNoServiceRoute, Severity: diag.Warning, Path: path, Positions: ps,
			Message: fmt.Sprintf("no %s gateway: the network-config gives the nodes no route to the Service CIDR %s, so the nodes and host-network pods (the CNI plugin's among them, which reach the API server through the kubernetes Service) cannot reach a Service", family, svc),
			Hint:    "add the node network's router to network.gateways"})
	}
	return out
}

// CodeIgnitionNodes is reported when the cloud-init target is asked for
// and some nodes run an Ignition system.
const CodeIgnitionNodes = "KC1303"

// CodeNoCloudInitNode is reported when the cloud-init target is asked for
// and every node runs an Ignition system.
const CodeNoCloudInitNode = "KC1304"

// CheckCoverage reports the nodes the target leaves out: those that run
// an Ignition system, at the field that chose it.
func CheckCoverage(c *ir.Cluster) diag.List {
	return targets.CheckCoverage(c, CodeIgnitionNodes, CodeNoCloudInitNode, func(n ir.Node) bool { return n.OS.Ignition() },
		"configured by Ignition, not cloud-init: the cloud-init target leaves them out", "build them with --target ignition (the terraform target serves both kinds)")
}
