package compiler

import (
	"fmt"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

const CodeOSPackages = "KC1801"

func osFamily() family {
	return family{name: "operating system", check: checkOS, rules: []diag.Rule{
		rule(CodeOSPackages, diag.Error, "a node needs a program its operating system does not ship (keepalived, HAProxy for the endpoint modes vip and nodeLocal)"),
	}}
}

// osNode is a node's operating system family and the spec field that
// chose it.
func osNode(m *model, n *mnode) (ir.OS, string) {
	if n.spec.OS != "" {
		return ir.OS(n.spec.OS), n.fieldPath("os")
	}
	return ir.OS(m.spec.OS), "os"
}

// checkOS holds the spec to what each operating system family provides.
// Ignition systems (Flatcar, Fedora CoreOS) ship neither keepalived nor
// HAProxy, and their /usr cannot take them; the endpoint's proxies are
// the only programs kcompile takes from the OS rather than installing.
func checkOS(m *model) {
	ep := m.spec.ControlPlane.Endpoint
	reported := map[string]bool{}
	for _, n := range m.nodes {
		os, path := osNode(m, n)
		if ep == nil || os == ir.OSDebian || reported[path] {
			continue
		}
		var needs string
		switch {
		case ep.Mode == string(ir.EndpointVIP) && n.role == ir.RoleControlPlane:
			needs = "keepalived and HAProxy"
		case ep.Mode == string(ir.EndpointNodeLocal) && n.role != ir.RoleEtcd:
			needs = "HAProxy"
		default:
			continue
		}
		reported[path] = true
		m.report(CodeOSPackages, path, fmt.Sprintf("node %s runs %s, which ships no %s, but endpoint mode %q runs them on it", n.name, os.Name(), needs, ep.Mode),
			`serve the endpoint from outside the spec (controlPlane: endpoint: mode: "external"), or run these nodes on "debian"`,
			"controlPlane.endpoint.mode")
	}
}
