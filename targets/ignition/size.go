package ignition

import (
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/targets"
)

// CodeCloudInitNodes is reported when the Ignition target is asked for
// and some nodes run a cloud-init system.
const CodeCloudInitNodes = "KC1901"

// CodeNoIgnitionNode is reported when the Ignition target is asked for and
// every node runs a cloud-init system.
const CodeNoIgnitionNode = "KC1902"

// Rules lists the target's diagnostics.
func Rules() []diag.Rule {
	return []diag.Rule{
		{Code: CodeCloudInitNodes, Severity: diag.Warning, Family: "ignition target", Summary: "nodes run a cloud-init system (os \"debian\"): the Ignition target leaves them out"},
		{Code: CodeNoIgnitionNode, Severity: diag.Error, Family: "ignition target", Summary: "every node runs a cloud-init system (os \"debian\"): the Ignition target would write no node configuration"},
	}
}

// CheckCoverage reports the nodes the target leaves out: those that run
// a Debian-like system, at the field that chose it.
func CheckCoverage(c *ir.Cluster) diag.List {
	return targets.CheckCoverage(c, CodeCloudInitNodes, CodeNoIgnitionNode, func(n ir.Node) bool { return !n.OS.Ignition() },
		"configured by cloud-init, not Ignition: the Ignition target leaves them out", `build them with --target cloudinit (the terraform target serves both kinds), or set os: "flatcar" or "fedora-coreos"`)
}

// Sizes reports every Ignition node's config size, in node order.
func Sizes(c *ir.Cluster, tree *targets.Tree) []targets.NodeSize {
	return targets.Sizes(c, tree, ConfigName, func(n ir.Node) bool { return n.OS.Ignition() })
}
