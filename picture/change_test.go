package picture

import (
	"html"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/internal/fixture"
)

// edited compiles an example with files edited by string replacements
// (file → old, new, old, new...).
func edited(t *testing.T, example string, edits map[string][]string) *Topology {
	t.Helper()
	overlay := map[string]string{}
	for file, replace := range edits {
		data, err := os.ReadFile(fixture.Path("examples/" + example + "/" + file))
		if err != nil {
			t.Fatal(err)
		}
		src := string(data)
		for i := 0; i+1 < len(replace); i += 2 {
			if !strings.Contains(src, replace[i]) {
				t.Fatalf("%s/%s has no %q", example, file, replace[i])
			}
			src = strings.ReplaceAll(src, replace[i], replace[i+1])
		}
		overlay[file] = src
	}
	return Of(fixture.Cluster(t, example, overlay))
}

// TestChangeShowsAddedAndMoved compares ha-stacked with itself plus a
// seventh worker (zones round-robin: zone a) and cp3 moved from zone c to
// zone b, as a pull request would: both are in the change, in Mermaid's
// rendering too, and etcd's membership line says where the member went.
func TestChangeShowsAddedAndMoved(t *testing.T) {
	base := Of(fixture.Cluster(t, "ha-stacked", nil))
	head := edited(t, "ha-stacked", map[string][]string{
		"workers.cue": {"count:        6", "count:        7", `"52:54:00:00:01:15",`, `"52:54:00:00:01:15", "52:54:00:00:01:16",`},
		"cluster.cue": {`cp3: {address: "10.0.0.13", mac: "52:54:00:00:00:13", zone: "c"}`, `cp3: {address: "10.0.0.13", mac: "52:54:00:00:00:13", zone: "b"}`},
	})
	c := Compare(base, head, map[string]string{"cp1": "restarts etcd", "w07": "ignored: added"})
	want := map[string]NodeChange{
		"w07": {Node: "w07", Status: Added, Zone: "a", Pool: "general", Role: "worker"},
		"cp3": {Node: "cp3", Status: Moved, Zone: "b", From: "c", Role: "control-plane"},
		"cp1": {Node: "cp1", Status: Changed, Zone: "a", Role: "control-plane", Effect: "restarts etcd"},
	}
	if len(c.Nodes) != len(want) {
		t.Fatalf("changed nodes %+v, want %+v", c.Nodes, want)
	}
	for _, n := range c.Nodes {
		if want[n.Node] != n {
			t.Errorf("%s: %+v, want %+v", n.Node, n, want[n.Node])
		}
	}
	if c.Endpoint != nil {
		t.Errorf("the endpoint did not change: %+v", c.Endpoint)
	}
	if c.Etcd == nil || !strings.Contains(c.Etcd.Before, "cp3 (zone c)") || !strings.Contains(c.Etcd.After, "cp3 (zone b)") {
		t.Errorf("etcd: %+v, want cp3 in zone c before and in zone b after", c.Etcd)
	}

	svg := html.UnescapeString(fixture.Mermaid(t, fixture.MermaidBlock(c.Mermaid()))[0])
	for _, s := range []string{"zone a", "zone b", "zone c", "w07", "added", "cp3", "moved here from zone c", "moved to zone b",
		"cp1", "restarts etcd", "etcd", "before: 3 members", "2 nodes unchanged", "3 nodes unchanged"} {
		if !strings.Contains(svg, s) {
			t.Errorf("Mermaid's picture of the change has no %q", s)
		}
	}
}

// TestChangeCollapsesPools adds 100 workers to a pool of examples/large:
// each zone shows one box with the pool and its count, as the picture of
// the cluster does.
func TestChangeCollapsesPools(t *testing.T) {
	base := Of(fixture.Cluster(t, "large", nil))
	head := edited(t, "large", map[string][]string{"workers.cue": {"count:        1000\n\t\tnamePattern:  \"echo-%04d\"", "count:        1100\n\t\tnamePattern:  \"echo-%04d\""}})
	c := Compare(base, head, nil)
	perZone := map[string]int{}
	for _, n := range c.Nodes {
		if n.Status != Added || n.Pool != "echo" {
			t.Fatalf("unexpected change %+v", n)
		}
		perZone[n.Zone]++
	}
	if len(c.Nodes) != 100 || len(perZone) != 3 {
		t.Fatalf("%d nodes added in %d zones, want 100 in 3", len(c.Nodes), len(perZone))
	}
	m := c.Mermaid()
	for zone, n := range perZone {
		if !strings.Contains(m, "pool echo<br/>"+Thousands(n)+" added") {
			t.Errorf("zone %s: no box of %d added echo workers in\n%s", zone, n, m)
		}
	}
	if strings.Contains(m, "echo-1001<br/>") {
		t.Errorf("a worker of a collapsed pool is drawn alone:\n%s", m)
	}
}

// TestChangeMarksZoneOutcome moves cp3 of ha-stacked from zone c into
// zone b, which then holds two of the three etcd members: losing zone b
// loses quorum where it did not. The change says so, and its picture
// fills zone b (its frame and a box in it) in a colour no unchanged zone
// has; the reverse change marks the same zone as better, in another.
func TestChangeMarksZoneOutcome(t *testing.T) {
	base := Of(fixture.Cluster(t, "ha-stacked", nil))
	head := edited(t, "ha-stacked", map[string][]string{
		"cluster.cue": {`cp3: {address: "10.0.0.13", mac: "52:54:00:00:00:13", zone: "c"}`, `cp3: {address: "10.0.0.13", mac: "52:54:00:00:00:13", zone: "b"}`},
	})
	worse := Compare(base, head, nil)
	want := ZoneChange{Zone: "b", Worse: true,
		Before: ZoneOutcome{EtcdMembers: 1, Members: 3, EtcdQuorumKept: true, APIServersLeft: 2, APIServers: 3},
		After:  ZoneOutcome{EtcdMembers: 2, Members: 3, EtcdQuorumKept: false, APIServersLeft: 1, APIServers: 3}}
	if len(worse.Zones) != 1 || worse.Zones[0] != want {
		t.Fatalf("zones %+v, want only %+v", worse.Zones, want)
	}
	if got := worse.Zones[0].String(); got != "if zone b fails: etcd quorum kept → lost; 2 of 3 members in it, was 1 of 3 (worse)" {
		t.Errorf("String() = %q", got)
	}
	better := Compare(head, base, nil)
	if len(better.Zones) != 1 || better.Zones[0].Worse || better.Zones[0].Zone != "b" {
		t.Fatalf("reverse: zones %+v, want zone b better", better.Zones)
	}

	for _, c := range []struct {
		change      *Change
		class, fill string
	}{{worse, "worse", "#ffcecb"}, {better, "better", "#aceebb"}} {
		m := c.change.Mermaid()
		sub := regexp.MustCompile(`(?m)^  subgraph (z\d+)\["zone b"\]\n((?:    .*\n)*)  end\n`).FindStringSubmatch(m)
		if sub == nil || !strings.Contains(sub[2], "[\"if zone b fails:<br/>etcd quorum ") || !strings.Contains(sub[2], "\"]:::"+c.class+"\n") {
			t.Fatalf("%s: zone b has no %s outcome box:\n%s", c.class, c.class, m)
		}
		if !strings.Contains(m, "  classDef "+c.class+" fill:"+c.fill+",") {
			t.Errorf("%s: no classDef with fill %s:\n%s", c.class, c.fill, m)
		}
		if strings.Count(m, "  style ") != 1 || !strings.Contains(m, "  style "+sub[1]+" fill:") {
			t.Errorf("%s: only zone b's frame is filled:\n%s", c.class, m)
		}
		fill, _ := colours(styleUnchanged)
		if fill == c.fill {
			t.Errorf("%s: the outcome colour is the unchanged one", c.class)
		}
	}

	// Adding a worker changes no zone's outcome.
	grown := edited(t, "ha-stacked", map[string][]string{
		"workers.cue": {"count:        6", "count:        7", `"52:54:00:00:01:15",`, `"52:54:00:00:01:15", "52:54:00:00:01:16",`},
	})
	if c := Compare(base, grown, nil); len(c.Zones) != 0 || strings.Contains(c.Mermaid(), "classDef worse") {
		t.Errorf("a worker added: zones %+v", c.Zones)
	}
}
