package compiler

import (
	"fmt"
	"net/netip"

	"github.com/kcompile/kcompile/compiler/diag"
)

const (
	CodeNoControlPlane   = "KC0501"
	CodeEndpointRequired = "KC0502"
	CodeEndpointIsNode   = "KC0503"
	CodeEndpointShape    = "KC0504"
	CodeEndpointInvalid  = "KC0505"
	CodeExtraSAN         = "KC0506"
)

func controlPlaneFamily() family {
	return family{name: "control plane", check: checkControlPlane, rules: []Rule{
		rule(CodeNoControlPlane, diag.Error, "there is no control-plane node"),
		rule(CodeEndpointRequired, diag.Error, "more than one control-plane node but no API endpoint (VIP or DNS name)"),
		rule(CodeEndpointIsNode, diag.Error, "the API endpoint address is a node's address"),
		rule(CodeEndpointShape, diag.Error, "the API endpoint sets both or neither of address and host"),
		rule(CodeEndpointInvalid, diag.Error, "the API endpoint address is not an IP address or its host is not a DNS name"),
		rule(CodeExtraSAN, diag.Error, "an extra API server SAN is neither an IP address nor a DNS name"),
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
			m.report(CodeEndpointShape, "controlPlane.endpoint", "the API endpoint sets neither address nor host",
				"set address (a virtual IP) or host (a DNS name)")
		case ep.Address != "":
			a, err := netip.ParseAddr(ep.Address)
			if err != nil {
				m.report(CodeEndpointInvalid, "controlPlane.endpoint.address", fmt.Sprintf("endpoint address %q is not an IP address", ep.Address),
					"write the virtual IP, or use host for a DNS name")
				break
			}
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
				m.report(CodeEndpointInvalid, "controlPlane.endpoint.host", fmt.Sprintf("endpoint host %q is not a DNS name", ep.Host),
					"write a fully qualified DNS name such as api.example.com, or use address for an IP")
			}
		}
	}
	for i, san := range cp.APIServer.ExtraSANs {
		if _, err := netip.ParseAddr(san); err != nil && !isDNSSubdomain(san) && !isWildcard(san) {
			m.report(CodeExtraSAN, fmt.Sprintf("controlPlane.apiServer.extraSANs[%d]", i), fmt.Sprintf("extra SAN %q is neither an IP address nor a DNS name", san),
				"write an IP address or a DNS name such as api.example.com")
		}
	}
}

func isWildcard(s string) bool { return len(s) > 2 && s[:2] == "*." && isDNSSubdomain(s[2:]) }
