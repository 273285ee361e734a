package picture

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/zones"
)

// diagram is a picture laid out as boxes, groups (zones) and edges, which
// the Mermaid and SVG writers render alike. Every id is the diagram's
// own ("n3", "z1"): no spec string is ever an identifier.
type diagram struct {
	title string
	// top and bottom are boxes outside every group, drawn above and
	// below the zones.
	top, bottom []box
	groups      []group
	edges       []edge
}

type box struct {
	id string
	// lines are the label, its first line the box's name.
	lines []string
	style style
}

type group struct {
	id, title string
	boxes     []box
}

type edge struct {
	from, to, label string
	dashed          bool
	// invisible edges only keep the layout in order (a zone's loss
	// below its nodes, the networks below etcd).
	invisible bool
}

// style is what a box stands for; each writer gives it its colours.
type style string

const (
	styleEndpoint     style = "apiendpoint"
	styleControlPlane style = "controlplane"
	styleEtcd         style = "etcd"
	styleWorker       style = "worker"
	stylePool         style = "pool"
	styleLoss         style = "loss"
	styleNetwork      style = "network"
	styleAdded        style = "added"
	styleRemoved      style = "removed"
	styleMoved        style = "moved"
	styleMovedAway    style = "movedaway"
	styleChanged      style = "changed"
	styleUnchanged    style = "unchanged"
)

// styles are every style in the order the writers declare them.
func styles() []style {
	return []style{styleEndpoint, styleControlPlane, styleEtcd, styleWorker, stylePool, styleLoss, styleNetwork,
		styleAdded, styleRemoved, styleMoved, styleMovedAway, styleChanged, styleUnchanged}
}

// colours are each style's fill and stroke.
func colours(s style) (fill, stroke string) {
	switch s {
	case styleEndpoint:
		return "#fff4d6", "#b7791f"
	case styleControlPlane:
		return "#dbe9ff", "#2b6cb0"
	case styleEtcd:
		return "#e9e0ff", "#6b46c1"
	case styleWorker, stylePool:
		return "#e6f4ea", "#2f855a"
	case styleLoss:
		return "#fdecec", "#c53030"
	case styleNetwork:
		return "#eef2f7", "#4a5568"
	case styleAdded:
		return "#dafbe1", "#1a7f37"
	case styleRemoved:
		return "#ffebe9", "#cf222e"
	case styleMoved:
		return "#ddf4ff", "#0969da"
	case styleMovedAway:
		return "#f6f8fa", "#8c959f"
	case styleChanged:
		return "#fff8c5", "#9a6700"
	}
	return "#ffffff", "#8c959f"
}

// collapseAbove is how many workers of one pool in one zone are drawn
// one by one; more are one box with their count, so that 5,000 workers
// stay a picture.
const collapseAbove = 3

// maxZones is how many zones a picture draws one by one: beyond it the
// zones with the most nodes are drawn and the rest folded into one group
// that counts them, so that a cluster of thousands of zones stays a
// picture Graphviz lays out in a moment.
const maxZones = 24

// wrapAt is the width, in characters, of a long line in a box.
const wrapAt = 44

// diagram lays the cluster out: the endpoint on top, a group per zone with
// its nodes (pools collapsed) and what losing it costs, etcd and the
// networks below.
func (t *Topology) diagram() diagram {
	d := diagram{title: fmt.Sprintf("cluster %s, Kubernetes %s, %s nodes", t.Name, t.Version, Thousands(len(t.Nodes)))}
	ids := idSource{}
	endpoint := box{id: "api", style: styleEndpoint, lines: append([]string{"API endpoint", t.Endpoint.URL}, wrap("served "+t.Endpoint.Served, wrapAt)...)}
	d.top = append(d.top, endpoint)
	etcd := box{id: "etcdcluster", style: styleEtcd, lines: []string{"etcd (" + t.EtcdTopology + ")", t.etcdSummary()}}
	etcd.lines = append(etcd.lines, t.quorumLines()...)

	byZone := map[string][]Node{}
	for _, n := range t.Nodes {
		byZone[n.Zone] = append(byZone[n.Zone], n)
	}
	drawnZones, folded := t.foldZones()
	if len(folded) > 0 {
		d.title += fmt.Sprintf(", the %d largest of %s zones drawn", maxZones, Thousands(len(t.Zones.Zones)))
	}
	for zi, z := range drawnZones {
		g := group{id: fmt.Sprintf("z%d", zi), title: zoneTitle(z.Name)}
		var servers, members, workers []box
		for _, n := range byZone[z.Name] {
			if n.Role == ir.RoleWorker {
				continue
			}
			b := box{id: ids.next(), lines: nodeLines(n), style: styleControlPlane}
			if n.Role == ir.RoleEtcd {
				b.style = styleEtcd
			}
			if n.APIServer {
				servers = append(servers, b)
			}
			if n.Etcd {
				members = append(members, b)
			}
			g.boxes = append(g.boxes, b)
		}
		for _, p := range poolsOf(byZone[z.Name]) {
			if len(p.nodes) > collapseAbove {
				workers = append(workers, box{id: ids.next(), lines: p.lines(), style: stylePool})
				continue
			}
			for _, n := range p.nodes {
				workers = append(workers, box{id: ids.next(), lines: nodeLines(n), style: styleWorker})
			}
		}
		g.boxes = append(g.boxes, workers...)
		loss := box{id: fmt.Sprintf("loss%d", zi), lines: t.lossLines(z), style: styleLoss}
		g.boxes = append(g.boxes, loss)
		d.groups = append(d.groups, g)

		for _, s := range servers {
			d.edges = append(d.edges, edge{from: endpoint.id, to: s.id})
			if t.EtcdTopology == "external" {
				d.edges = append(d.edges, edge{from: s.id, to: etcd.id, label: "etcd client", dashed: true})
			}
		}
		for _, m := range members {
			d.edges = append(d.edges, edge{from: m.id, to: etcd.id, label: "member", dashed: true})
		}
		// The workers below the zone's control plane and etcd nodes, its
		// loss below all: ranks for the layout, not edges to draw.
		above := []string{endpoint.id}
		if n := len(g.boxes) - len(workers) - 1; n > 0 {
			above = above[:0]
			for _, b := range g.boxes[:n] {
				above = append(above, b.id)
			}
		}
		for _, w := range workers {
			for _, a := range above {
				d.edges = append(d.edges, edge{from: a, to: w.id, invisible: true})
			}
			d.edges = append(d.edges, edge{from: w.id, to: loss.id, invisible: true})
		}
		if len(workers) == 0 {
			for _, a := range above {
				d.edges = append(d.edges, edge{from: a, to: loss.id, invisible: true})
			}
		}
	}
	if len(folded) > 0 {
		zi := len(d.groups)
		g := group{id: fmt.Sprintf("z%d", zi), title: fmt.Sprintf("%s more zones (%s)", Thousands(len(folded)), counted(foldedNodes(folded), "node"))}
		rest := box{id: ids.next(), style: stylePool, lines: foldedLines(folded)}
		loss := box{id: fmt.Sprintf("loss%d", zi), style: styleLoss, lines: t.worstLossLines(folded)}
		g.boxes = append(g.boxes, rest, loss)
		d.groups = append(d.groups, g)
		d.edges = append(d.edges, edge{from: endpoint.id, to: rest.id, invisible: true}, edge{from: rest.id, to: loss.id, invisible: true})
	}
	network := box{id: "networks", style: styleNetwork, lines: t.networkLines()}
	below := network.id
	if t.Zones.Members > 0 {
		below = etcd.id
	}
	for zi := range d.groups {
		d.edges = append(d.edges, edge{from: fmt.Sprintf("loss%d", zi), to: below, invisible: true})
	}
	if t.Zones.Members > 0 {
		d.bottom = append(d.bottom, etcd)
		d.edges = append(d.edges, edge{from: etcd.id, to: network.id, invisible: true})
	}
	d.bottom = append(d.bottom, network)
	return d
}

// foldZones splits the zones into those drawn one by one, in the
// analysis's order, and those folded: at most maxZones are drawn, the
// ones with the most nodes (the first in order on a tie).
func (t *Topology) foldZones() (drawn, folded []zones.Zone) {
	zs := t.Zones.Zones
	if len(zs) <= maxZones {
		return zs, nil
	}
	order := make([]int, len(zs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return zs[b].Nodes - zs[a].Nodes })
	keep := make([]bool, len(zs))
	for _, i := range order[:maxZones] {
		keep[i] = true
	}
	for i, z := range zs {
		if keep[i] {
			drawn = append(drawn, z)
		} else {
			folded = append(folded, z)
		}
	}
	return drawn, folded
}

func foldedNodes(zs []zones.Zone) int {
	n := 0
	for _, z := range zs {
		n += z.Nodes
	}
	return n
}

// foldedLines label the folded zones: how many, what runs in them and
// the bound that folded them.
func foldedLines(zs []zones.Zone) []string {
	var workers, servers, members int
	for _, z := range zs {
		workers += z.Workers
		servers += z.APIServers
		members += z.EtcdMembers
	}
	lines := []string{counted(len(zs), "more zone") + " not drawn", counted(foldedNodes(zs), "node") + ", " + counted(workers, "worker")}
	if servers > 0 || members > 0 {
		lines = append(lines, counted(servers, "API server")+", "+counted(members, "etcd member"))
	}
	return append(lines, fmt.Sprintf("(a picture draws at most %d zones,", maxZones), "those with the most nodes)")
}

// worstLossLines say what losing the worst of the folded zones costs:
// etcd's quorum first, then etcd members, API servers and workers' CPUs.
func (t *Topology) worstLossLines(zs []zones.Zone) []string {
	worst := zs[0]
	score := func(z zones.Zone) []int {
		lost := 0
		if t.Zones.Members > 0 && !z.EtcdQuorumAfterLoss {
			lost = 1
		}
		return []int{lost, z.EtcdMembers, z.APIServers, z.WorkerCapacityLostPercent}
	}
	for _, z := range zs[1:] {
		if slices.Compare(score(z), score(worst)) > 0 {
			worst = z
		}
	}
	lines := t.lossLines(worst)
	lines[0] = "if one of them fails, at worst"
	return append([]string{lines[0], zoneTitle(worst.Name) + ":"}, lines[1:]...)
}

// idSource hands out the diagram's node ids.
type idSource struct{ n int }

func (s *idSource) next() string {
	s.n++
	return fmt.Sprintf("n%d", s.n)
}

func zoneTitle(z string) string {
	if z == "" {
		return "no zone"
	}
	return "zone " + z
}

// nodeLines label one node: its name, addresses, what runs on it.
func nodeLines(n Node) []string {
	lines := []string{n.Name}
	if len(n.Addresses) > 0 {
		lines = append(lines, strings.Join(n.Addresses, ", "))
	}
	var does []string
	switch n.Role {
	case ir.RoleControlPlane:
		does = append(does, "control plane")
	case ir.RoleWorker:
		does = append(does, "worker")
	}
	if n.Etcd {
		does = append(does, "etcd member")
	}
	if n.Pool != "" {
		does = append(does, "pool "+n.Pool)
	}
	lines = append(lines, strings.Join(does, ", "))
	if n.Role == ir.RoleWorker {
		if c := capacity(n); c != "" {
			lines = append(lines, c)
		}
	}
	return lines
}

func capacity(n Node) string {
	var parts []string
	if n.CPU > 0 {
		parts = append(parts, fmt.Sprintf("%d CPU", n.CPU))
	}
	if n.Memory != "" {
		parts = append(parts, n.Memory)
	}
	return strings.Join(parts, ", ")
}

// pool is a zone's workers of one pool ("" for the workers declared one
// by one), in the order the cluster lists them.
type pool struct {
	name  string
	nodes []Node
}

func poolsOf(ns []Node) []pool {
	var out []pool
	for _, n := range ns {
		if n.Role != ir.RoleWorker {
			continue
		}
		i := slices.IndexFunc(out, func(p pool) bool { return p.name == n.Pool })
		if i < 0 {
			out = append(out, pool{name: n.Pool})
			i = len(out) - 1
		}
		out[i].nodes = append(out[i].nodes, n)
	}
	return out
}

// lines label a collapsed pool: its name, count, first and last node and
// their capacity when every node has the same.
func (p pool) lines() []string {
	title := "pool " + p.name
	if p.name == "" {
		title = "workers"
	}
	lines := []string{title, counted(len(p.nodes), "worker"), p.nodes[0].Name + " … " + p.nodes[len(p.nodes)-1].Name}
	c := capacity(p.nodes[0])
	for _, n := range p.nodes[1:] {
		if capacity(n) != c {
			return lines
		}
	}
	if c != "" {
		lines = append(lines, c+" each")
	}
	return lines
}

// lossLines say what losing the zone costs etcd, the API servers and
// the workers.
func (t *Topology) lossLines(z zones.Zone) []string {
	a := t.Zones
	lines := []string{"if " + zoneTitle(z.Name) + " fails:"}
	if z.Name == "" {
		lines[0] = "if the nodes without a zone fail:"
	}
	if a.Members > 0 {
		left := a.Members - z.EtcdMembers
		verdict := "quorum kept"
		if !z.EtcdQuorumAfterLoss {
			verdict = "quorum lost"
		}
		lines = append(lines, fmt.Sprintf("etcd: %s of %s left, %s", Thousands(left), counted(a.Members, "member"), verdict))
	}
	if a.APIServers > 0 {
		lines = append(lines, fmt.Sprintf("API servers: %s of %s left", Thousands(a.APIServers-z.APIServers), Thousands(a.APIServers)))
	}
	if a.Workers > 0 {
		lines = append(lines, fmt.Sprintf("workers: %s of %s lost, %d%% of the workers' CPUs", Thousands(z.Workers), Thousands(a.Workers), z.WorkerCapacityLostPercent))
	}
	return lines
}

// quorumLines say which zone's loss etcd survives.
func (t *Topology) quorumLines() []string {
	var lost []string
	for _, z := range t.Zones.Zones {
		if z.EtcdMembers > 0 && !z.EtcdQuorumAfterLoss {
			lost = append(lost, zoneTitle(z.Name))
		}
	}
	if len(lost) == 0 {
		return []string{"keeps quorum when any one zone fails"}
	}
	if len(lost) > maxZones {
		lost = append(lost[:maxZones:maxZones], counted(len(lost)-maxZones, "more zone"))
	}
	return wrap("loses quorum with "+strings.Join(lost, " or "), wrapAt)
}

// networkLines list the address ranges and the pod network.
func (t *Topology) networkLines() []string {
	n := t.Network
	lines := []string{"networks"}
	if len(n.Nodes) > 0 {
		lines = append(lines, "nodes "+strings.Join(n.Nodes, ", "))
	}
	lines = append(lines,
		"pods "+strings.Join(n.Pods, ", ")+" ("+n.CNI+")",
		"services "+strings.Join(n.Services, ", "),
		"cluster DNS "+strings.Join(n.DNS, ", ")+", "+n.Domain,
		"kube-proxy "+n.KubeProxy)
	return lines
}

// wrap breaks s into lines of at most width characters at spaces (a
// longer word stays whole).
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len([]rune(line))+1+len([]rune(w)) <= width:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
