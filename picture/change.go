package picture

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/zones"
)

// Change is what a change does to a cluster's shape: the nodes it adds,
// removes, moves between zones or changes the files of, its API
// endpoint and etcd membership before and after, and the zones whose
// loss it makes cost more or less. kcompile diff draws it above its
// text summary.
type Change struct {
	Nodes    []NodeChange `json:"nodes,omitempty"`
	Endpoint *BeforeAfter `json:"endpoint,omitempty"`
	Etcd     *BeforeAfter `json:"etcd,omitempty"`
	// Zones are the failure domains whose "if it fails" outcome differs
	// between the sides, sorted as the zone analysis sorts them.
	Zones []ZoneChange `json:"zones,omitempty"`
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

// ZoneChange is a failure domain whose loss leaves etcd with or without
// its quorum, or the API with or without a server, where the other side
// did the opposite: the same membership can be safe or not depending on
// where its members are, which no per-node line shows.
type ZoneChange struct {
	Zone   string      `json:"zone"`
	Before ZoneOutcome `json:"before"`
	After  ZoneOutcome `json:"after"`
	// Worse is set when losing the zone costs more after the change: a
	// quorum or the last API server lost that was kept before (also when
	// something else got better at the same time: a reviewer must look).
	Worse bool `json:"worse"`
}

// ZoneOutcome is what losing one zone leaves of etcd and the API
// servers. A zone a side does not have holds nothing: losing it costs
// nothing.
type ZoneOutcome struct {
	// EtcdMembers are the members in the zone, of Members in all.
	EtcdMembers int `json:"etcdMembers"`
	Members     int `json:"members"`
	// EtcdQuorumKept: the members in the other zones hold a quorum.
	EtcdQuorumKept bool `json:"etcdQuorumKept"`
	// APIServersLeft are the API servers in the other zones, of
	// APIServers in all.
	APIServersLeft int `json:"apiServersLeft"`
	APIServers     int `json:"apiServers"`
}

func outcomeOf(a zones.Analysis, name string) ZoneOutcome {
	o := ZoneOutcome{Members: a.Members, EtcdQuorumKept: a.Members > 0, APIServersLeft: a.APIServers, APIServers: a.APIServers}
	for _, z := range a.Zones {
		if z.Name == name {
			o.EtcdMembers, o.EtcdQuorumKept, o.APIServersLeft = z.EtcdMembers, z.EtcdQuorumAfterLoss, a.APIServers-z.APIServers
		}
	}
	return o
}

// compareZones lists the zones of either side whose loss keeps etcd's
// quorum, or an API server, on one side and not on the other.
func compareZones(base, head zones.Analysis) []ZoneChange {
	var names []string
	for _, a := range []zones.Analysis{base, head} {
		for _, z := range a.Zones {
			if !slices.Contains(names, z.Name) {
				names = append(names, z.Name)
			}
		}
	}
	slices.SortFunc(names, zoneOrder)
	var out []ZoneChange
	for _, name := range names {
		b, a := outcomeOf(base, name), outcomeOf(head, name)
		quorum := b.EtcdQuorumKept != a.EtcdQuorumKept
		api := (b.APIServersLeft > 0) != (a.APIServersLeft > 0)
		if !quorum && !api {
			continue
		}
		worse := b.EtcdQuorumKept && !a.EtcdQuorumKept || b.APIServersLeft > 0 && a.APIServersLeft == 0
		out = append(out, ZoneChange{Zone: name, Before: b, After: a, Worse: worse})
	}
	return out
}

// zoneOrder sorts zone names, the nodes without a zone ("") last.
func zoneOrder(a, b string) int {
	if (a == "") != (b == "") {
		return cmp.Compare(b, a)
	}
	return cmp.Compare(a, b)
}

// Lines say what losing the zone costs now and cost before.
func (z ZoneChange) Lines() []string {
	lines := []string{"if " + zoneTitle(z.Zone) + " fails:"}
	if z.Zone == "" {
		lines[0] = "if the nodes without a zone fail:"
	}
	b, a := z.Before, z.After
	if b.EtcdQuorumKept != a.EtcdQuorumKept {
		lines = append(lines, fmt.Sprintf("etcd quorum %s → %s", verdict(b.EtcdQuorumKept), verdict(a.EtcdQuorumKept)),
			fmt.Sprintf("%s of %s in it, was %s of %s", Thousands(a.EtcdMembers), counted(a.Members, "member"), Thousands(b.EtcdMembers), Thousands(b.Members)))
	}
	if (b.APIServersLeft > 0) != (a.APIServersLeft > 0) {
		lines = append(lines, fmt.Sprintf("API servers left: %s of %s → %s of %s", Thousands(b.APIServersLeft), Thousands(b.APIServers), Thousands(a.APIServersLeft), Thousands(a.APIServers)))
	}
	return lines
}

// String is the change in a line.
func (z ZoneChange) String() string {
	l := z.Lines()
	s := l[0] + " " + strings.Join(l[1:], "; ")
	if z.Worse {
		return s + " (worse)"
	}
	return s + " (better)"
}

func verdict(kept bool) string {
	if kept {
		return "kept"
	}
	return "lost"
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
	c.Zones = compareZones(base.Zones, head.Zones)
	return c
}

// Empty reports whether the change leaves the shape as it was.
func (c *Change) Empty() bool {
	return len(c.Nodes) == 0 && c.Endpoint == nil && c.Etcd == nil && len(c.Zones) == 0
}

// Outcome styles mark a zone whose loss costs more (worse) or less
// (better) after the change. Only the change's picture uses them, so they
// are declared here rather than among the writers' shared styles.
const (
	styleWorse  style = "worse"
	styleBetter style = "better"
)

// outcomeColours are the fill and stroke of a zone's outcome box and of
// its frame: a stronger red or green than a removed or added node's.
func outcomeColours(worse bool) (fill, stroke, frame string) {
	if worse {
		return "#ffcecb", "#a40e26", "#fff0ef"
	}
	return "#aceebb", "#116329", "#f0fff4"
}

// Mermaid is the change as a Mermaid flowchart, for a pull request. A
// zone whose outcome changed gets its frame filled too (a subgraph takes
// a style statement, not a class), so that the colour shows at a glance
// even in a large picture.
func (c *Change) Mermaid() string {
	d := c.diagram()
	var b strings.Builder
	b.WriteString(d.mermaid())
	used := map[bool]bool{}
	for _, z := range c.Zones {
		used[z.Worse] = true
		_, stroke, frame := outcomeColours(z.Worse)
		for _, g := range d.groups {
			if g.title == zoneTitle(z.Zone) {
				fmt.Fprintf(&b, "  style %s fill:%s,stroke:%s,stroke-width:3px\n", g.id, frame, stroke)
			}
		}
	}
	for _, worse := range []bool{true, false} {
		if used[worse] {
			fill, stroke, _ := outcomeColours(worse)
			fmt.Fprintf(&b, "  classDef %s fill:%s,stroke:%s,stroke-width:2px,color:#1f2328\n", outcomeStyle(worse), fill, stroke)
		}
	}
	return b.String()
}

func outcomeStyle(worse bool) style {
	if worse {
		return styleWorse
	}
	return styleBetter
}

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
	// A zone whose outcome changed is drawn even when none of its nodes
	// changed: moving a member away from it can be what changed it.
	outcomes := map[string]ZoneChange{}
	for _, z := range c.Zones {
		outcomes[z.Zone] = z
		if _, ok := byZone[z.Zone]; !ok {
			byZone[z.Zone] = nil
		}
	}
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
	slices.SortFunc(names, zoneOrder)
	ids := idSource{}
	// moves joins where a group of moved nodes went to where it was.
	type move struct {
		pool, from, to string
		i              int
	}
	arrived, left := map[move]string{}, map[move]string{}
	for zi, z := range names {
		g := group{id: fmt.Sprintf("z%d", zi), title: zoneTitle(z)}
		if o, ok := outcomes[z]; ok {
			g.boxes = append(g.boxes, box{id: ids.next(), style: outcomeStyle(o.Worse), lines: o.Lines()})
		}
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
	lines := []string{title, Thousands(len(ns)) + " " + statusLine(st, other), ns[0].Node + " … " + ns[len(ns)-1].Node}
	return append(lines, wrap(ns[0].Effect, wrapAt)...)
}
