// Package zones says what losing one failure domain costs a compiled
// cluster: etcd quorum, API servers and worker capacity. The policy facts
// (facts.zones) and the pictures of kcompile explain read the same
// analysis, so a picture never says what a policy would not.
package zones

import (
	"cmp"
	"slices"

	"github.com/kcompile/kcompile/compiler/ir"
)

// Quorum is how many of n etcd members must agree.
func Quorum(n int) int {
	if n == 0 {
		return 0
	}
	return n/2 + 1
}

// Zone is one failure domain and what its loss costs.
type Zone struct {
	// Name is the zone; "" gathers the nodes and members without one as
	// if they were one zone.
	Name                                    string
	Nodes, Workers, APIServers, EtcdMembers int
	// WorkerCPU is the CPUs of the zone's workers.
	WorkerCPU int
	// EtcdQuorumAfterLoss: the members in other zones still hold a
	// quorum (false when there are no members at all).
	EtcdQuorumAfterLoss bool
	// WorkerCapacityLostPercent is the zone's share of every worker's
	// CPUs, rounded up.
	WorkerCapacityLostPercent int
}

// Analysis is a cluster's failure domains.
type Analysis struct {
	// Members, Quorum and Tolerates describe etcd's membership.
	Members, Quorum, Tolerates int
	APIServers, Workers        int
	// Zones are sorted by name, the nodes without a zone last.
	Zones []Zone
}

// Of analyses a compiled cluster.
func Of(c *ir.Cluster) Analysis {
	a := Analysis{Members: len(c.Etcd.Members), Quorum: Quorum(len(c.Etcd.Members))}
	a.Tolerates = a.Members - a.Quorum
	byName := map[string]*Zone{}
	zone := func(name string) *Zone {
		if byName[name] == nil {
			byName[name] = &Zone{Name: name}
		}
		return byName[name]
	}
	totalCPU := 0
	for _, n := range c.Nodes {
		z := zone(n.Zone)
		z.Nodes++
		if n.Runs(ir.ComponentAPIServer) {
			z.APIServers++
			a.APIServers++
		}
		if n.Role == ir.RoleWorker {
			z.Workers++
			z.WorkerCPU += n.Capacity.CPU
			a.Workers++
			totalCPU += n.Capacity.CPU
		}
	}
	for _, m := range c.Etcd.Members {
		zone(m.Zone).EtcdMembers++
	}
	for _, z := range byName {
		z.EtcdQuorumAfterLoss = a.Members > 0 && a.Members-z.EtcdMembers >= a.Quorum
		if totalCPU > 0 {
			z.WorkerCapacityLostPercent = (z.WorkerCPU*100 + totalCPU - 1) / totalCPU
		}
		a.Zones = append(a.Zones, *z)
	}
	slices.SortFunc(a.Zones, func(x, y Zone) int {
		if (x.Name == "") != (y.Name == "") {
			if x.Name == "" {
				return 1
			}
			return -1
		}
		return cmp.Compare(x.Name, y.Name)
	})
	return a
}
