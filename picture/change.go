package picture

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
)

// Change is what a change does to a cluster's shape: the nodes it adds,
// removes, moves between zones or changes the files of, and its API
// endpoint and etcd membership before and after. kcompile diff draws it
// above its text summary.
type Change struct {
	Nodes    []NodeChange `json:"nodes,omitempty"`
	Endpoint *BeforeAfter `json:"endpoint,omitempty"`
	Etcd     *BeforeAfter `json:"etcd,omitempty"`
	// unchanged counts, per zone of the head, the nodes the change does
	// not touch: the picture shows them as one box for context.
	unchanged map[string]int
}

// NodeChange is one touched node.
type NodeChange struct {
	Node string `json:"node"`
	// Status is "added", "removed", "moved" or "changed" (its files).
	Status string `json:"status"`
	// Zone is where the node is after the change (before, when removed);
	// From is the zone a moved node was in.
	Zone string  `json:"zone"`
	From string  `json:"from,omitempty"`
	Pool string  `json:"pool,omitempty"`
	Role ir.Role `json:"role"`
	// Effect is what a changed node's new files do to it, e.g.
	// "restarts kubelet".
	Effect string `json:"effect,omitempty"`
}

// BeforeAfter is a setting on both sides.
type BeforeAfter struct {
	Before string `json:"before"`
	After  string `json:"after"`
}

// Node statuses in a Change.
const (
	Added   = "added"
	Removed = "removed"
	Moved   = "moved"
	Changed = "changed"
)

// Compare says what the change from base to head does to the cluster's
// shape; changed maps the nodes whose files differ to what that does to
// them ("restarts kubelet").
func Compare(base, head *Topology, changed map[string]string) *Change {
	c := &Change{unchanged: map[string]int{}}
	old := map[string]Node{}
	for _, n := range base.Nodes {
		old[n.Name] = n
	}
	now := map[string]bool{}
	for _, n := range head.Nodes {
		now[n.Name] = true
		o, ok := old[n.Name]
		nc := NodeChange{Node: n.Name, Zone: n.Zone, Pool: n.Pool, Role: n.Role}
		switch {
		case !ok:
			nc.Status = Added
		case o.Zone != n.Zone:
			nc.Status, nc.From = Moved, o.Zone
		case changed[n.Name] != "":
			nc.Status, nc.Effect = Changed, changed[n.Name]
		default:
			c.unchanged[n.Zone]++
			continue
		}
		c.Nodes = append(c.Nodes, nc)
	}
	for _, n := range base.Nodes {
		if !now[n.Name] {
			c.Nodes = append(c.Nodes, NodeChange{Node: n.Name, Status: Removed, Zone: n.Zone, Pool: n.Pool, Role: n.Role})
		}
	}
	if a, b := base.Endpoint.describe(), head.Endpoint.describe(); a != b {
		c.Endpoint = &BeforeAfter{Before: a, After: b}
	}
	if a, b := base.etcdMembers(), head.etcdMembers(); a != b {
		c.Etcd = &BeforeAfter{Before: a, After: b}
	}
	return c
}

// Empty reports whether the change leaves the shape as it was.
func (c *Change) Empty() bool { return len(c.Nodes) == 0 && c.Endpoint == nil && c.Etcd == nil }

// Mermaid is the change as a Mermaid flowchart, for a pull request.
func (c *Change) Mermaid() string { return c.diagram().mermaid() }

func (e Endpoint) describe() string { return e.URL + ", served " + e.Served }

// etcdMembers is the membership in a line: who and where, and its quorum.
func (t *Topology) etcdMembers() string {
	var who []string
	for _, n := range t.Nodes {
		if n.Etcd {
			who = append(who, n.Name+" ("+zoneTitle(n.Zone)+")")
		}
	}
	if len(who) == 0 {
		return "no members"
	}
	return t.etcdSummary() + ": " + strings.Join(who, ", ")
}

// diagram draws the touched nodes in the zones they are in (removed ones
// where they were, moved ones in both, joined by an edge), each zone's
// untouched nodes as one box, and the endpoint and etcd when they change.
func (c *Change) diagram() diagram {
	d := diagram{title: "what the change touches"}
	if c.Endpoint != nil {
		d.top = append(d.top, box{id: "api", style: styleChanged, lines: beforeAfter("API endpoint", *c.Endpoint)})
	}
	type entry struct {
		st style
		// other is the zone a moved node came from or went to.
		other, pool, effect string
		nodes               []NodeChange
	}
	byZone := map[string][]*entry{}
	add := func(zone string, st style, n NodeChange, other string) {
		for _, e := range byZone[zone] {
			if e.st == st && e.other == other && e.pool == n.Pool && e.effect == n.Effect {
				e.nodes = append(e.nodes, n)
				return
			}
		}
		byZone[zone] = append(byZone[zone], &entry{st: st, other: other, pool: n.Pool, effect: n.Effect, nodes: []NodeChange{n}})
	}
	for _, n := range c.Nodes {
		switch n.Status {
		case Added:
			add(n.Zone, styleAdded, n, "")
		case Removed:
			add(n.Zone, styleRemoved, n, "")
		case Changed:
			add(n.Zone, styleChanged, n, "")
		case Moved:
			add(n.Zone, styleMoved, n, n.From)
			add(n.From, styleMovedAway, n, n.Zone)
		}
	}
	var names []string
	for z := range byZone {
		names = append(names, z)
	}
	slices.SortFunc(names, func(a, b string) int {
		if (a == "") != (b == "") {
			return cmp.Compare(b, a)
		}
		return cmp.Compare(a, b)
	})
	ids := idSource{}
	// moves joins where a group of moved nodes went to where it was.
	type move struct {
		pool, from, to string
		i              int
	}
	arrived, left := map[move]string{}, map[move]string{}
	for zi, z := range names {
		g := group{id: fmt.Sprintf("z%d", zi), title: zoneTitle(z)}
		order := []style{styleMoved, styleAdded, styleChanged, styleRemoved, styleMovedAway}
		entries := byZone[z]
		slices.SortStableFunc(entries, func(a, b *entry) int {
			return cmp.Compare(slices.Index(order, a.st), slices.Index(order, b.st))
		})
		for _, e := range entries {
			var made []string
			if len(e.nodes) > collapseAbove {
				b := box{id: ids.next(), style: e.st, lines: collapsedChange(e.pool, e.nodes, e.st, e.other)}
				g.boxes = append(g.boxes, b)
				made = append(made, b.id)
			} else {
				for _, n := range e.nodes {
					b := box{id: ids.next(), style: e.st, lines: nodeChangeLines(n, e.st, e.other)}
					g.boxes = append(g.boxes, b)
					made = append(made, b.id)
				}
			}
			// Moved nodes pair up one to one, or box to box when collapsed.
			for i, id := range made {
				switch e.st {
				case styleMoved:
					arrived[move{e.pool, e.other, z, i}] = id
				case styleMovedAway:
					left[move{e.pool, z, e.other, i}] = id
				}
			}
		}
		if n := c.unchanged[z]; n > 0 {
			g.boxes = append(g.boxes, box{id: ids.next(), style: styleUnchanged, lines: []string{unchangedLine(n)}})
		}
		d.groups = append(d.groups, g)
	}
	var moves []move
	for m := range left {
		moves = append(moves, m)
	}
	slices.SortFunc(moves, func(a, b move) int {
		return cmp.Or(cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to), cmp.Compare(a.pool, b.pool), cmp.Compare(a.i, b.i))
	})
	for _, m := range moves {
		if to, ok := arrived[m]; ok {
			d.edges = append(d.edges, edge{from: left[m], to: to, label: "moved", dashed: true})
		}
	}
	if c.Etcd != nil {
		d.bottom = append(d.bottom, box{id: "etcdcluster", style: styleChanged, lines: beforeAfter("etcd", *c.Etcd)})
	}
	return d
}

func unchangedLine(n int) string { return counted(n, "node") + " unchanged" }

func beforeAfter(title string, ba BeforeAfter) []string {
	lines := []string{title}
	lines = append(lines, wrap("before: "+ba.Before, wrapAt)...)
	return append(lines, wrap("after: "+ba.After, wrapAt)...)
}

// statusLine says what happened to a node, in the zone drawn.
func statusLine(st style, other string) string {
	switch st {
	case styleMoved:
		return "moved here from " + zoneTitle(other)
	case styleMovedAway:
		return "moved to " + zoneTitle(other)
	}
	return string(st)
}

func nodeChangeLines(n NodeChange, st style, other string) []string {
	does := string(n.Role)
	if n.Pool != "" {
		does += ", pool " + n.Pool
	}
	return append([]string{n.Node, statusLine(st, other), does}, wrap(n.Effect, wrapAt)...)
}

func collapsedChange(poolName string, ns []NodeChange, st style, other string) []string {
	title := "pool " + poolName
	if poolName == "" {
		title = "nodes"
	}
	lines := []string{title, count(len(ns)) + " " + statusLine(st, other), ns[0].Node + " … " + ns[len(ns)-1].Node}
	return append(lines, wrap(ns[0].Effect, wrapAt)...)
}
