package compiler

import (
	"strconv"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
)

// What the checks and the lowering both compute from the decoded spec:
// the etcd members of the topology, a mode's encapsulation overhead,
// validities. Computed in one place, so that the checks judge what the
// lowering builds.

// etcdMember is a member as the checks see it.
type etcdMember struct {
	name, path, zone, rack string
	// node is the path that sets zone and rack: the member itself when
	// external, its control-plane node when stacked.
	node string
}

// etcdMembers returns the members of the topology: for stacked etcd the
// listed control-plane nodes, or all of them.
func (m *model) etcdMembers() []etcdMember {
	s := m.spec
	var out []etcdMember
	if s.Etcd.Topology == "external" {
		for _, name := range sortedKeys(s.Etcd.Members) {
			mem := s.Etcd.Members[name]
			path := "etcd.members." + quoteLabel(name)
			out = append(out, etcdMember{name, path, mem.Zone, mem.Rack, path})
		}
		return out
	}
	names := sortedKeys(s.Etcd.Members)
	if len(names) == 0 {
		names = sortedKeys(s.ControlPlane.Nodes)
	}
	for _, name := range names {
		if n, ok := s.ControlPlane.Nodes[name]; ok {
			node := "controlPlane.nodes." + quoteLabel(name)
			path := node
			if _, listed := s.Etcd.Members[name]; listed {
				path = "etcd.members." + quoteLabel(name)
			}
			out = append(out, etcdMember{name, path, n.Zone, n.Rack, node})
		}
	}
	return out
}

func quorum(n int) int { return n/2 + 1 }

// encapOverhead is the bytes a mode adds to every pod packet on the wire.
func encapOverhead(plugin, mode string, wireguard bool) (int, string) {
	if wireguard {
		// Cilium encrypts the tunnelled packet, so both headers count.
		if plugin == "cilium" && (mode == "vxlan" || mode == "geneve") {
			return 130, "WireGuard over " + strings.ToUpper(mode)
		}
		return 80, "WireGuard"
	}
	switch mode {
	case "vxlan":
		return 50, "VXLAN"
	case "ipip":
		return 20, "IP-in-IP"
	case "geneve":
		return 50, "Geneve"
	case "wireguard":
		return 80, "WireGuard"
	}
	return 0, "no encapsulation"
}

// maxValidity bounds certificate validities: a time.Duration holds only
// about 292 years, and longer values would wrap around.
const maxValidity = 200 * 365 * 24 * time.Hour

// parseValidity reads the schema's duration form: a whole number of hours,
// days or 365-day years. It returns 0 for a value above maxValidity.
func parseValidity(s string) time.Duration {
	if len(s) < 2 {
		return 0
	}
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	unit := map[byte]time.Duration{'h': time.Hour, 'd': 24 * time.Hour, 'y': 365 * 24 * time.Hour}[s[len(s)-1]]
	// The count is bounded, not the product, which could overflow.
	if err != nil || unit == 0 || n > int64(maxValidity/unit) {
		return 0
	}
	return time.Duration(n) * unit
}

// parseSkew reads the schema's skew form: a whole number of seconds,
// minutes or hours. It returns -1 for a value above ir.MaxClockSkew, so that
// zero (no backdating) stays a valid choice.
func parseSkew(s string) time.Duration {
	if len(s) < 2 {
		return -1
	}
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour}[s[len(s)-1]]
	// The count is bounded, not the product, which could overflow.
	if err != nil || unit == 0 || n < 0 || n > int64(ir.MaxClockSkew/unit) {
		return -1
	}
	return time.Duration(n) * unit
}
