package compiler

import (
	"fmt"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

const (
	CodeOSPackages = "KC1801"
	CodeOSBinaries = "KC1802"
	CodeOSEngine   = "KC1803"
)

func osFamily() family {
	return family{name: "operating system", check: checkOS, rules: []diag.Rule{
		rule(CodeOSPackages, diag.Error, "a node needs a program its operating system does not ship (keepalived, HAProxy for the endpoint modes vip and nodeLocal)"),
		rule(CodeOSBinaries, diag.Error, "a Flatcar or Fedora CoreOS node with install.source \"preinstalled\": the stock images ship none of the cluster's binaries"),
		rule(CodeOSEngine, diag.Error, "a Flatcar or Fedora CoreOS node with a container runtime its family cannot run from an Ignition config (cri-o)"),
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
func checkOS(m *model) {
	checkOSEndpoint(m)
	checkOSInstall(m)
}

// checkOSInstall holds the nodes of Ignition systems to what their
// images carry and their configs can add. Stock Flatcar and Fedora
// CoreOS images ship containerd and runc in /usr, of their own release,
// and none of etcd, the Kubernetes programs or the CNI plugins: a node
// gets them from install.source "download", whose artifacts its Ignition
// config fetches and verifies before the first boot. CRI-O is in neither
// image; Flatcar has it only as a systemd-sysext image of the Flatcar
// sysext-bakery, Fedora CoreOS only layered with rpm-ostree (a second
// deployment and a reboot), neither of which an Ignition config of
// kcompile's makes.
func checkOSInstall(m *model) {
	reported := map[string]bool{}
	for _, n := range m.nodes {
		os, path := osNode(m, n)
		if !os.Ignition() || reported[path] {
			continue
		}
		reported[path] = true
		if m.spec.Install.Source != "download" {
			where := "/usr/local/bin (a link to /var/usrlocal/bin)"
			if os == ir.OSFlatcar {
				where = os.BinDir()
			}
			m.report(CodeOSBinaries, path, fmt.Sprintf("node %s runs %s with install.source %q, but stock %s images ship none of etcd, the Kubernetes programs or the CNI plugins, and the install unit would find nothing in %s", n.name, os.Name(), m.spec.Install.Source, os.Name(), where),
				`set install: source: "download" with an artifact (URL and sha256) for each binary, served for example from Matchbox's assets: the node's Ignition config fetches and verifies them before the first boot`,
				"install.source")
		}
		if m.spec.Runtime.Engine == "cri-o" {
			how := "Flatcar has it only as a systemd-sysext image of the Flatcar sysext-bakery"
			if os == ir.OSFedoraCoreOS {
				how = "Fedora CoreOS only layered with rpm-ostree, a second deployment and a reboot"
			}
			m.report(CodeOSEngine, path, fmt.Sprintf("node %s runs %s, whose image has no CRI-O (%s), which an Ignition config cannot add", n.name, os.Name(), how),
				`use runtime: engine: "containerd" (its binaries downloaded as artifacts), or run these nodes on "debian"`,
				"runtime.engine")
		}
	}
}

// checkOSEndpoint: Ignition systems (Flatcar, Fedora CoreOS) ship
// neither keepalived nor HAProxy, and their /usr cannot take them; the
// endpoint's proxies are the only programs kcompile takes from the OS
// rather than installing.
func checkOSEndpoint(m *model) {
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
