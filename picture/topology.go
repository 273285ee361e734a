// Package picture draws a compiled cluster for review: its zones, nodes
// (pools collapsed to a box with a count), etcd members, the API endpoint
// and how it is served, its address ranges and what losing each zone
// costs; and, for a diff, what a change does to that shape. A Topology is
// the plain data a picture is drawn from; a diagram is its layout, which
// the Mermaid and SVG (Graphviz) writers render alike.
package picture

import (
	"fmt"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/zones"
)

// Topology is what a picture of a cluster shows.
type Topology struct {
	Name, Version string
	Endpoint      Endpoint
	Nodes         []Node
	// EtcdTopology is "stacked" or "external"; the membership's size,
	// quorum and tolerance are in Zones.
	EtcdTopology string
	Network      Network
	// Zones are what losing each zone costs.
	Zones zones.Analysis
}

// Endpoint is where clients reach the API and what serves it.
type Endpoint struct {
	URL    string
	Mode   ir.EndpointMode
	Served string
}

// Network is the cluster's address ranges and pod network.
type Network struct {
	Nodes, Pods, Services  []string
	DNS                    []string
	Domain, CNI, KubeProxy string
}

// Node is one machine as a picture shows it.
type Node struct {
	Name, Zone, Pool string
	Role             ir.Role
	Addresses        []string
	// APIServer and Etcd say the node runs an API server and an etcd
	// member (stacked on a control-plane node, or an external member).
	APIServer, Etcd bool
	CPU             int
	Memory          string
}

// Of takes what a picture shows from a compiled cluster.
func Of(c *ir.Cluster) *Topology {
	t := &Topology{
		Name:         c.Name,
		Version:      c.Kubernetes.Version,
		Endpoint:     Endpoint{URL: c.Endpoint.URL(), Mode: c.Endpoint.Mode, Served: c.Endpoint.Served()},
		EtcdTopology: c.Etcd.Topology,
		Zones:        zones.Of(c),
	}
	members := map[string]bool{}
	for _, m := range c.Etcd.Members {
		members[m.Node] = true
	}
	t.Nodes = make([]Node, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		p := Node{Name: n.Name, Zone: n.Zone, Pool: n.Pool, Role: n.Role, APIServer: n.Runs(ir.ComponentAPIServer),
			Etcd: members[n.Name], CPU: n.Capacity.CPU, Memory: n.Capacity.Memory}
		p.Addresses = texts(n.Addresses)
		t.Nodes = append(t.Nodes, p)
	}
	nw := c.Network
	t.Network = Network{Nodes: texts(nw.NodeNetworks), Pods: texts(nw.PodCIDRs), Services: texts(nw.ServiceCIDRs),
		Domain: nw.Domain, CNI: cniOf(nw.CNI), KubeProxy: nw.KubeProxyMode}
	t.Network.DNS = texts(nw.DNSServiceIPs)
	return t
}

func texts[S fmt.Stringer](ps []S) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func cniOf(c ir.CNI) string {
	s := c.Plugin
	if c.Mode != "" {
		s += " " + c.Mode
	}
	if c.WireGuard {
		s += ", WireGuard"
	}
	if c.KubeProxyReplacement {
		s += ", replaces kube-proxy"
	}
	return s
}

// etcdSummary is etcd's membership in a few words.
func (t *Topology) etcdSummary() string {
	a := t.Zones
	if a.Members == 0 {
		return "no members"
	}
	return fmt.Sprintf("%s, quorum %d, tolerates %s", counted(a.Members, "member"), a.Quorum, counted(a.Tolerates, "failure"))
}

// counted is n things, with thousands separators.
func counted(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return Thousands(n) + " " + thing + "s"
}

// Thousands writes n with thousands separators, as the docs' tables do.
func Thousands(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + Thousands(-n)
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}
