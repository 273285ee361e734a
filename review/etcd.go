package review

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kcompile/kcompile/picture"
)

// EtcdMember is one etcd member as the summary shows it.
type EtcdMember struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// Node runs the member (itself for external members).
	Node string `json:"node"`
	// PeerURL is the member's ir.EtcdMember.PeerURL, which the membership
	// commands of a change name.
	PeerURL string `json:"-"`
}

// EtcdChange is etcd's membership and quorum before and after.
type EtcdChange struct {
	Before Quorum `json:"before"`
	After  Quorum `json:"after"`
	// Added, Removed and Moved name members; Moved as
	// "name: old address → new address".
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Moved   []string `json:"moved,omitempty"`
	// Zones are the zones whose loss keeps the quorum on one side and
	// loses it on the other: moving a node between zones changes no
	// member, and can still leave a zone holding a quorum.
	Zones []picture.ZoneChange `json:"zones,omitempty"`
}

// Quorum is a membership's size, quorum and fault tolerance.
type Quorum struct {
	Members   []EtcdMember `json:"members"`
	Quorum    int          `json:"quorum"`
	Tolerates int          `json:"tolerates"`
}

func quorumOf(ms []EtcdMember) Quorum {
	q := Quorum{Members: ms}
	if len(ms) > 0 {
		q.Quorum = len(ms)/2 + 1
		q.Tolerates = len(ms) - q.Quorum
	}
	return q
}

// Changed reports whether the membership changed.
func (e *EtcdChange) Changed() bool {
	return len(e.Added)+len(e.Removed)+len(e.Moved) > 0
}

func (q Quorum) String() string {
	return fmt.Sprintf("%d members (quorum %d, tolerates %d failure%s)", len(q.Members), q.Quorum, q.Tolerates, plural(q.Tolerates))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func compareEtcd(a, b []EtcdMember) *EtcdChange {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	e := &EtcdChange{Before: quorumOf(a), After: quorumOf(b)}
	byName := func(ms []EtcdMember, name string) (EtcdMember, bool) {
		i := slices.IndexFunc(ms, func(m EtcdMember) bool { return m.Name == name })
		if i < 0 {
			return EtcdMember{}, false
		}
		return ms[i], true
	}
	for _, m := range b {
		old, ok := byName(a, m.Name)
		switch {
		case !ok:
			e.Added = append(e.Added, m.Name)
		case old.Address != m.Address:
			e.Moved = append(e.Moved, fmt.Sprintf("%s: %s → %s", m.Name, old.Address, m.Address))
		}
	}
	for _, m := range a {
		if _, ok := byName(b, m.Name); !ok {
			e.Removed = append(e.Removed, m.Name)
		}
	}
	return e
}

// Summary is one line on the membership and on the zones whose loss it
// survives differently.
func (e *EtcdChange) Summary() string {
	var zones string
	for _, z := range e.Zones {
		what := "zone " + z.Zone + " fails"
		if z.Zone == "" {
			what = "the nodes without a zone fail"
		}
		was, now := "kept", "lost"
		if z.After.EtcdQuorumKept {
			was, now = now, was
		}
		zones += fmt.Sprintf("; quorum %s if %s (%s before)", now, what, was)
	}
	if !e.Changed() {
		if zones != "" {
			return e.After.String() + ", membership unchanged" + zones
		}
		return e.After.String() + ", unchanged"
	}
	s := e.Before.String() + " → " + e.After.String()
	var parts []string
	if len(e.Added) > 0 {
		parts = append(parts, "added "+strings.Join(e.Added, ", "))
	}
	if len(e.Removed) > 0 {
		parts = append(parts, "removed "+strings.Join(e.Removed, ", "))
	}
	if len(e.Moved) > 0 {
		parts = append(parts, "moved "+strings.Join(e.Moved, ", "))
	}
	return s + "; " + strings.Join(parts, "; ") + zones
}

// notes warns about rolling out the change: restarting more members at
// once than the quorum tolerates stops the cluster, and a membership
// change is made with etcdctl, one member at a time, not by restarting.
func (e *EtcdChange) notes(nodes []NodeChange) []string {
	var out []string
	members := map[string]bool{}
	for _, m := range e.Before.Members {
		members[m.Node] = true
	}
	var restarting []string
	for _, n := range nodes {
		if members[n.Node] && slices.Contains(n.Restarts, "etcd.service") {
			restarting = append(restarting, n.Node)
		}
	}
	if len(restarting) > e.Before.Tolerates {
		out = append(out, fmt.Sprintf("etcd restarts on %d members (%s) but the cluster tolerates %d failure%s: restart them one at a time, waiting for each to rejoin",
			len(restarting), strings.Join(restarting, ", "), e.Before.Tolerates, plural(e.Before.Tolerates)))
	}
	if e.Changed() {
		out = append(out, "etcd membership changes: apply them with etcdctl member add/remove/update one member at a time before starting the new members")
	}
	if e.After.Tolerates < e.Before.Tolerates {
		out = append(out, fmt.Sprintf("etcd fault tolerance drops from %d to %d", e.Before.Tolerates, e.After.Tolerates))
	}
	return out
}
