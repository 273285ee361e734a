package terraform

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/ignition"
)

// Codes of the target's diagnostics.
const (
	CodeNoBoot   = "KC1401"
	CodeNoMAC    = "KC1402"
	CodeTooLarge = "KC1403"
	CodeOSKernel = "KC1404"
)

// MaxConfigBytes is the most of one node's configuration the module may
// hand Matchbox: the provider sends a group's metadata (the cloud-init
// files) and a profile's Ignition config in one gRPC message each, and
// Matchbox's gRPC server takes at most 4 MiB (gRPC's default); 64 KiB
// are left for the rest of the message.
const MaxConfigBytes = 4<<20 - 64<<10

// Rules lists the target's diagnostics.
func Rules() []diag.Rule {
	return []diag.Rule{
		{Code: CodeNoBoot, Severity: diag.Error, Family: "terraform target", Summary: "the terraform target needs a boot section (Matchbox URL, kernel, initrds, arguments)"},
		{Code: CodeNoMAC, Severity: diag.Error, Family: "terraform target", Summary: "the terraform target needs every node's MAC address, by which Matchbox selects its configuration"},
		{Code: CodeOSKernel, Severity: diag.Error, Family: "terraform target", Summary: "nodes of several operating system families, more than one of them without a kernel of its own (boot.os)"},
		{Code: CodeTooLarge, Severity: diag.Error, Family: "terraform target", Summary: "a node's configuration (cloud-init files or Ignition config) is larger than Matchbox's API takes in one message (4 MiB)"},
	}
}

// Check reports what the spec lacks for this target, at spec positions.
func Check(c *ir.Cluster) diag.List {
	var out diag.List
	if c.Boot == nil {
		d := diag.Diagnostic{Code: CodeNoBoot, Severity: diag.Error, Path: "boot",
			Message: "the spec has no boot section: the terraform target cannot say what machines boot",
			Hint:    `add boot: {matchboxURL: "http://matchbox.example.com:8080", kernel: "/assets/vmlinuz", initrd: ["/assets/initrd.img"]} beside the cluster's name`}
		// The section is missing, so point at the cluster it belongs to.
		d.Positions = at(c, "name")
		out = append(out, d)
	}
	// One kernel cannot boot two families: every family but one needs
	// its own (the one left boots the cluster's).
	if c.Boot != nil {
		var without []string
		for _, os := range []ir.OS{ir.OSDebian, ir.OSFlatcar, ir.OSFedoraCoreOS} {
			if slices.ContainsFunc(c.Nodes, func(n ir.Node) bool { return n.OS == os }) && !slices.Contains(c.Boot.OwnKernel, os) {
				without = append(without, string(os))
			}
		}
		if len(without) > 1 {
			out = append(out, diag.Diagnostic{Code: CodeOSKernel, Severity: diag.Error, Path: "boot.kernel", Positions: at(c, "boot.kernel"),
				Message: fmt.Sprintf("nodes run %s, and none of these families has a kernel of its own: all would boot the same kernel", strings.Join(without, " and ")),
				Hint:    fmt.Sprintf("give every family but the one boot.kernel is for its own, e.g. boot: os: %q: {kernel: ..., initrd: [...], args: [...]}", without[len(without)-1])})
		}
	}
	// One diagnostic per place in the spec: a pool without macs is one
	// mistake, however many nodes it has.
	var order []string
	missing := map[string][]string{}
	for _, n := range c.Nodes {
		if n.MAC != "" {
			continue
		}
		if _, ok := missing[n.SpecPath]; !ok {
			order = append(order, n.SpecPath)
		}
		missing[n.SpecPath] = append(missing[n.SpecPath], n.Name)
	}
	for _, p := range order {
		names := missing[p]
		d := diag.Diagnostic{Code: CodeNoMAC, Severity: diag.Error, Path: p,
			Message: fmt.Sprintf("node %s has no MAC address: Matchbox selects a machine's configuration by it", names[0]),
			Hint:    "set mac to the MAC address of the node's provisioning interface"}
		if len(names) > 1 {
			d.Message = fmt.Sprintf("%d nodes (%s) have no MAC address: Matchbox selects a machine's configuration by it", len(names), abbreviate(names))
			d.Hint = "give the pool macs, one per node in node order"
		}
		d.Positions = at(c, p)
		out = append(out, d)
	}
	return out
}

func abbreviate(names []string) string {
	if len(names) <= 4 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, ... %s", strings.Join(names[:3], ", "), names[len(names)-1])
}

func at(c *ir.Cluster, path string) []diag.Pos {
	if p, ok := c.Position(path); ok {
		return []diag.Pos{{File: p.File, Line: p.Line, Column: p.Column}}
	}
	return nil
}

// Sizes are the bytes of each node's configuration the module hands
// Matchbox: its three cloud-init files, or its Ignition config.
func Sizes(c *ir.Cluster, tree *targets.Tree) []targets.NodeSize {
	var out []targets.NodeSize
	for _, n := range c.Nodes {
		size := 0
		names := []string{ignition.ConfigName}
		if !n.OS.Ignition() {
			names = nil
			for _, f := range nodeFiles {
				names = append(names, f.file)
			}
		}
		for _, name := range names {
			f, _ := tree.Get(layout.NodeTree(n.Name, name))
			size += len(f.Data)
		}
		out = append(out, targets.NodeSize{Node: n.Name, Bytes: size})
	}
	return out
}

// CheckSizes reports the nodes whose configuration Matchbox's API would
// refuse, at the node (or pool) in the spec.
func CheckSizes(c *ir.Cluster, tree *targets.Tree) diag.List {
	var out diag.List
	seen := map[string]bool{}
	for i, s := range Sizes(c, tree) {
		n := c.Nodes[i]
		if s.Bytes <= MaxConfigBytes || seen[n.SpecPath] {
			continue
		}
		seen[n.SpecPath] = true
		out = append(out, diag.Diagnostic{Code: CodeTooLarge, Severity: diag.Error, Path: n.SpecPath, Positions: at(c, n.SpecPath),
			Message: fmt.Sprintf("the configuration of node %s is %d bytes: Matchbox's API takes at most %d in one message, so OpenTofu could not store it", n.Name, s.Bytes, MaxConfigBytes),
			Hint:    "serve the node's configuration another way (a config server Ignition or cloud-init fetches from), or make what the node carries smaller (fewer or smaller files)"})
	}
	return out
}
