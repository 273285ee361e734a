package compiler

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
)

const (
	CodeEtcdEven        = "KC0401"
	CodeEtcdSingle      = "KC0402"
	CodeEtcdStackedNode = "KC0403"
	CodeEtcdNoAddress   = "KC0404"
	CodeEtcdZone        = "KC0405"
	CodeEtcdRack        = "KC0406"
	CodeEtcdNoMembers   = "KC0407"
	CodeEtcdTooMany     = "KC0408"
	CodeEtcdStackedAddr = "KC0409"
	CodeEtcdJoining     = "KC0410"
)

func etcdFamily() family {
	return family{name: "etcd", check: checkEtcd, rules: []diag.Rule{
		rule(CodeEtcdEven, diag.Error, "etcd has an even number of members: no more fault tolerance than one fewer, and more ways to lose quorum"),
		rule(CodeEtcdSingle, diag.Warning, "etcd has a single member: losing it loses the cluster's state"),
		rule(CodeEtcdStackedNode, diag.Error, "a stacked etcd member is not a control-plane node"),
		rule(CodeEtcdNoAddress, diag.Error, "an external etcd member has no address"),
		rule(CodeEtcdZone, diag.Warning, "losing one zone loses etcd quorum"),
		rule(CodeEtcdRack, diag.Warning, "losing one rack loses etcd quorum"),
		rule(CodeEtcdNoMembers, diag.Error, "the etcd topology is external but no member is declared"),
		rule(CodeEtcdTooMany, diag.Warning, "etcd has more than 7 members: every write waits for a majority"),
		rule(CodeEtcdStackedAddr, diag.Error, "a stacked etcd member sets its own address, MAC, zone or rack instead of its node's"),
		rule(CodeEtcdJoining, diag.Error, "etcd.joining names no member of the cluster, or every member: a member joins one that runs"),
	}}
}

func checkEtcd(m *model) {
	s := m.spec
	invalid := false
	if s.Etcd.Topology == "external" {
		if len(s.Etcd.Members) == 0 {
			m.report(CodeEtcdNoMembers, "etcd.topology", "etcd topology is external but etcd.members is empty",
				"declare the external members with their addresses, or use topology \"stacked\"")
			return
		}
		for _, name := range sortedKeys(s.Etcd.Members) {
			if s.Etcd.Members[name].Address == "" {
				m.report(CodeEtcdNoAddress, "etcd.members."+quoteLabel(name), fmt.Sprintf("external etcd member %s has no address", name),
					"set address: the API servers and the other members dial it")
			}
		}
	} else {
		for _, name := range sortedKeys(s.Etcd.Members) {
			path := "etcd.members." + quoteLabel(name)
			if _, ok := s.ControlPlane.Nodes[name]; !ok {
				m.report(CodeEtcdStackedNode, path, fmt.Sprintf("stacked etcd member %s is not a control-plane node", name),
					"stacked members run on control-plane nodes: name one of "+strings.Join(sortedKeys(s.ControlPlane.Nodes), ", ")+", or use topology \"external\"")
				invalid = true
				continue
			}
			// Reported at the first field set, and naming them all, so the
			// user sees which values to move.
			mem := s.Etcd.Members[name]
			var set []string
			for _, f := range []struct{ field, v string }{{"address", mem.Address}, {"mac", mem.MAC}, {"zone", mem.Zone}, {"rack", mem.Rack}} {
				if f.v != "" {
					set = append(set, f.field)
				}
			}
			if len(set) > 0 {
				m.report(CodeEtcdStackedAddr, path+"."+set[0], fmt.Sprintf("stacked etcd member %s sets its own %s", name, strings.Join(set, ", ")),
					"a stacked member takes these from its control-plane node: remove them here and set them on controlPlane.nodes."+quoteLabel(name))
			}
		}
	}
	members := m.etcdMembers()
	n := len(members)
	checkJoining(m, members)
	if n == 0 || invalid {
		// Counting the members that remain would misstate the topology
		// the user wrote.
		return
	}
	where := "etcd.topology"
	if s.Etcd.Topology == "external" || len(s.Etcd.Members) > 0 {
		where = "etcd.members"
	} else if !m.written("etcd.topology") {
		where = "controlPlane.nodes"
	}
	switch {
	case n == 1:
		m.report(CodeEtcdSingle, where, "etcd has a single member: it tolerates no failure, and losing its disk loses the cluster",
			"run 3 members (or 5) for a cluster that must survive a machine failure")
	case n%2 == 0:
		m.report(CodeEtcdEven, where, fmt.Sprintf("etcd has %d members: quorum is %d, so it tolerates %d failure(s), no more than %d members would, and a network split can leave no side with quorum",
			n, quorum(n), n-quorum(n), n-1),
			fmt.Sprintf("use an odd number of members: %d or %d", n-1, n+1))
	case n > 7:
		m.report(CodeEtcdTooMany, where, fmt.Sprintf("etcd has %d members; every write waits for %d of them", n, quorum(n)),
			"etcd recommends at most 7 members; run 5 and make the rest learners or remove them")
	}
	// With one or two members losing any member loses quorum, which
	// CodeEtcdSingle or CodeEtcdEven already report; no spreading over
	// zones or racks would help.
	if n > 2 {
		domainLoss(m, members, "zone", CodeEtcdZone, func(e etcdMember) string { return e.zone })
		domainLoss(m, members, "rack", CodeEtcdRack, func(e etcdMember) string { return e.rack })
	}
}

// domainLoss warns for each failure domain whose loss leaves fewer than a
// quorum of members.
func domainLoss(m *model, members []etcdMember, kind, code string, of func(etcdMember) string) {
	count := map[string][]etcdMember{}
	for _, e := range members {
		if d := of(e); d != "" {
			count[d] = append(count[d], e)
		}
	}
	if len(count) == 0 {
		return
	}
	q := quorum(len(members))
	domains := sortedKeys(count)
	sort.Strings(domains)
	for _, d := range domains {
		lost := count[d]
		if len(members)-len(lost) >= q {
			continue
		}
		var names, paths []string
		for _, e := range lost {
			names = append(names, e.name)
			paths = append(paths, e.node+"."+kind)
		}
		m.report(code, paths[0], fmt.Sprintf("losing %s %s loses etcd quorum: it holds %d of %d members (%s) and %d are needed",
			kind, diag.Quote(d), len(lost), len(members), strings.Join(names, ", "), q),
			fmt.Sprintf("spread the members so that no %s holds %d or more of them", kind, len(members)-q+1), paths[1:]...)
	}
}

// checkJoining holds etcd.joining to the members: each a member, and at
// least one member not joining, whose cluster the others join.
func checkJoining(m *model, members []etcdMember) {
	joining := m.spec.Etcd.Joining
	if len(joining) == 0 {
		return
	}
	names := map[string]bool{}
	for _, e := range members {
		names[e.name] = true
	}
	for i, j := range joining {
		if !names[j] {
			var all []string
			for _, e := range members {
				all = append(all, e.name)
			}
			m.report(CodeEtcdJoining, fmt.Sprintf("etcd.joining[%d]", i), fmt.Sprintf("etcd.joining names %s, which is no etcd member", diag.Quote(j)),
				"name members of the cluster ("+strings.Join(all, ", ")+"), or remove it")
			return
		}
	}
	staying := 0
	for _, e := range members {
		if !slices.Contains(joining, e.name) {
			staying++
		}
	}
	if staying == 0 {
		m.report(CodeEtcdJoining, "etcd.joining", "every etcd member is joining: none runs the cluster they would join",
			"leave out of etcd.joining the members that bootstrap the cluster (a first boot joins none)")
	}
}
