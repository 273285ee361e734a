package plan

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
)

// versions are the Kubernetes components' versions of one node, or the
// cluster's.
type versions struct {
	APIServer, ControllerManager, Scheduler, Kubelet, KubeProxy string
}

func nodeVersions(n ir.Node) versions {
	return versions{n.APIServerVersion, n.ControllerManagerVersion, n.SchedulerVersion, n.KubeletVersion, n.KubeProxyVersion}
}

// only keeps of v what node n runs.
func (v versions) only(n ir.Node) versions {
	keep := func(c ir.Component, s string) string {
		if n.Runs(c) {
			return s
		}
		return ""
	}
	return versions{keep(ir.ComponentAPIServer, v.APIServer), keep(ir.ComponentControllerManager, v.ControllerManager),
		keep(ir.ComponentScheduler, v.Scheduler), keep(ir.ComponentKubelet, v.Kubelet), keep(ir.ComponentKubeProxy, v.KubeProxy)}
}

func clusterVersions(k ir.Kubernetes) versions {
	return versions{k.APIServer, k.ControllerManager, k.Scheduler, k.Kubelet, k.KubeProxy}
}

func allAt(v string) versions { return versions{v, v, v, v, v} }

// member is a node as one side has it; a node whose address changes is
// two members of one name, one per side.
type member struct {
	node ir.Node
	// old says the node is OLD's (present in OLD, gone or moved in NEW).
	old bool
	// inNew says NEW has the node, at the same address.
	inNew bool
}

func memberID(n ir.Node) string { return n.Name + "@" + n.Address().String() }

// world is the cluster as it is at one point of the plan: which nodes
// exist, each one's versions, the version of etcd and of the addons.
type world struct {
	in Input
	// members are every node of either side, by id.
	members map[string]member
	present map[string]bool
	ver     map[string]versions
	// base are the cluster-wide versions a state is written with; nodes
	// that differ carry their own.
	base  versions
	etcd  string
	addon bool
	// rolled says a version stage has rolled through the nodes, with
	// the configuration's restarts.
	rolled bool
	// fresh are the nodes this plan boots: their files are already the
	// change's, and they need no restart for it.
	fresh map[string]bool
	// joinNow is the etcd member the step being made adds.
	joinNow string
	// added are NEW's nodes OLD does not have (by name and address), in
	// NEW's order; removed OLD's that NEW does not have, in OLD's; moved
	// the names on both lists (a member whose address changes).
	added, removed []ir.Node
	moved          map[string]bool
	// keepSANs are the kubernetes Service's addresses of OLD's ranges
	// that NEW drops: every running pod reaches the API there until it
	// restarts, so the API servers' certificates keep them in every
	// state until the service CIDR move has ended (servicesMoved).
	keepSANs []string
	// servicesChange: NEW's service ranges are not OLD's; servicesMoved:
	// the change has ended (servicesMove).
	servicesChange, servicesMoved bool
}

func newWorld(in Input) (*world, error) {
	w := &world{in: in, members: map[string]member{}, present: map[string]bool{}, ver: map[string]versions{}, fresh: map[string]bool{},
		base: clusterVersions(in.Old.Cluster.Kubernetes), etcd: in.Old.Cluster.Etcd.Version}
	for _, n := range in.Old.Cluster.Nodes {
		w.members[memberID(n)] = member{node: n, old: true}
		w.present[memberID(n)] = true
		w.ver[memberID(n)] = nodeVersions(n)
	}
	for _, n := range in.New.Cluster.Nodes {
		// NEW's node: the versions it ends with.
		m := w.members[memberID(n)]
		if !m.old {
			w.added = append(w.added, n)
		}
		m.node, m.inNew = n, true
		w.members[memberID(n)] = m
	}
	for _, a := range in.Old.Cluster.Network.FirstServiceIPs {
		if !slices.Contains(in.New.Cluster.Network.FirstServiceIPs, a) && !slices.Contains(in.New.Cluster.Kubernetes.ExtraSANs, a.String()) {
			w.keepSANs = append(w.keepSANs, a.String())
		}
	}
	w.servicesChange = !slices.Equal(in.Old.Cluster.Network.ServiceCIDRs, in.New.Cluster.Network.ServiceCIDRs)
	w.moved = map[string]bool{}
	for _, n := range in.Old.Cluster.Nodes {
		if !w.members[memberID(n)].inNew {
			w.removed = append(w.removed, n)
		}
	}
	for _, n := range w.added {
		if slices.ContainsFunc(w.removed, func(r ir.Node) bool { return r.Name == n.Name }) {
			w.moved[n.Name] = true
		}
	}
	// A state gives a pool the count of its present nodes: the nodes of
	// the side with fewer must be the first ones of the other.
	pools := func(c *ir.Cluster) map[string][]string {
		out := map[string][]ir.Node{}
		for _, n := range c.Nodes {
			if n.Pool != "" {
				out[n.Pool] = append(out[n.Pool], n)
			}
		}
		ids := map[string][]string{}
		for p, ns := range out {
			sort.Slice(ns, func(i, j int) bool { return ns[i].Address().Less(ns[j].Address()) })
			for _, n := range ns {
				ids[p] = append(ids[p], memberID(n))
			}
		}
		return ids
	}
	oldPools, newPools := pools(in.Old.Cluster), pools(in.New.Cluster)
	for p, a := range oldPools {
		b, ok := newPools[p]
		if !ok {
			continue
		}
		short, long := a, b
		if len(b) < len(a) {
			short, long = b, a
		}
		if !slices.Equal(short, long[:len(short)]) {
			return nil, refuse("pool %s changes more than its count (its names, addresses or numbering): no state can hold its old and new nodes in one pool; add the new nodes as a pool of another name, and remove the old pool in a later change", p)
		}
	}
	return w, nil
}

// final says the world is NEW.
func (w *world) final() bool {
	return w.reached() && (!w.servicesChange || w.servicesMoved)
}

// reached says the world has NEW's nodes, versions and addons.
func (w *world) reached() bool {
	for id, m := range w.members {
		if w.present[id] != m.inNew || (m.inNew && w.ver[id] != nodeVersions(m.node)) {
			return false
		}
	}
	return w.etcd == w.in.New.Cluster.Etcd.Version && (w.addon || !w.addonsChange())
}

func (w *world) addonsChange() bool {
	return w.in.Old.Cluster.Addons.CoreDNS.Version != w.in.New.Cluster.Addons.CoreDNS.Version
}

// etcdMembers are the present members of etcd, sorted by name: their
// InitialCluster is the --initial-cluster a member started now is given.
func (w *world) etcdMembers() ir.Etcd {
	var out ir.Etcd
	for _, e := range []ir.Etcd{w.in.Old.Cluster.Etcd, w.in.New.Cluster.Etcd} {
		for _, m := range e.Members {
			id := m.Node + "@" + m.Address.String()
			if w.present[id] && !slices.ContainsFunc(out.Members, func(o ir.EtcdMember) bool { return o.Node+"@"+o.Address.String() == id }) {
				out.Members = append(out.Members, m)
			}
		}
	}
	slices.SortFunc(out.Members, func(a, b ir.EtcdMember) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// etcdMember is the member node n runs, as its side has it.
func (w *world) etcdMember(n ir.Node) (ir.EtcdMember, bool) {
	for _, e := range []ir.Etcd{w.in.New.Cluster.Etcd, w.in.Old.Cluster.Etcd} {
		for _, m := range e.Members {
			if m.Node == n.Name && m.Address == n.Address() {
				return m, true
			}
		}
	}
	return ir.EtcdMember{}, false
}

// joining lists in etcd.joining the member the step being made adds:
// it starts by joining the running cluster, not by bootstrapping one.
// Later states leave it out (etcd reads the flag only while the member's
// data directory is empty): the member restarts onto NEW's files.
func (w *world) joining(d map[string]any) {
	if w.joinNow == "" {
		return
	}
	var names []any
	if had, ok := get(d, "etcd", "joining").([]any); ok {
		names = had
	}
	if !slices.Contains(names, any(w.joinNow)) {
		set(d, append(names, w.joinNow), "etcd", "joining")
	}
}

// data is the spec of the world: NEW's, edited where the world is not
// NEW yet.
func (w *world) data() map[string]any {
	d := clone(w.in.New.Data)
	if !w.reached() {
		w.topology(d)
		w.versions(d)
		set(d, w.etcd, "etcd", "version")
		if !w.addon && w.addonsChange() {
			set(d, w.in.Old.Cluster.Addons.CoreDNS.Version, "addons", "coredns", "version")
		}
	}
	w.joining(d)
	if !w.servicesMoved && len(w.keepSANs) > 0 {
		sans, _ := get(d, "controlPlane", "apiServer", "extraSANs").([]any)
		sans = slices.Clone(sans)
		for _, a := range w.keepSANs {
			if !slices.Contains(sans, any(a)) {
				sans = append(sans, a)
			}
		}
		set(d, sans, "controlPlane", "apiServer", "extraSANs")
	}
	return d
}

// topology leaves out NEW's nodes that are not there yet and puts back
// OLD's that are still there: nodes written one by one are copied from
// OLD's spec, pools are given the count of their present nodes.
func (w *world) topology(d map[string]any) {
	pools := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(w.members)) {
		m := w.members[id]
		n := m.node
		if n.Pool != "" {
			pools[n.Pool] = true
			continue
		}
		at := nodePath(n)
		switch {
		case !m.old && !w.present[id]:
			// A NEW node of a name an OLD one still holds is written over
			// by the OLD one below.
			if !w.presentName(n.Name, id) {
				del(d, at...)
				if n.Role == ir.RoleControlPlane {
					del(d, "etcd", "members", n.Name)
				}
			}
		case m.old && w.present[id] && !m.inNew:
			set(d, clone(get(w.in.Old.Data, at...)), at...)
			if n.Role == ir.RoleControlPlane {
				if mem := get(w.in.Old.Data, "etcd", "members", n.Name); mem != nil && len(asMap(get(d, "etcd", "members"))) > 0 {
					set(d, clone(mem), "etcd", "members", n.Name)
				}
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(pools)) {
		count := 0
		for id, m := range w.members {
			if m.node.Pool == p && w.present[id] {
				count++
			}
		}
		if get(d, "workers", "pools", p) == nil {
			if count == 0 {
				continue
			}
			set(d, clone(get(w.in.Old.Data, "workers", "pools", p)), "workers", "pools", p)
		}
		if count == 0 {
			del(d, "workers", "pools", p)
			// workers.order may name only pools the state has.
			if order, ok := get(d, "workers", "order").([]any); ok {
				set(d, slices.DeleteFunc(slices.Clone(order), func(v any) bool { return v == p }), "workers", "order")
			}
			continue
		}
		set(d, json.Number(fmt.Sprint(count)), "workers", "pools", p, "count")
		// A pool gives one MAC per node: as many as the nodes present,
		// the old side's for nodes only it has.
		if macs, ok := get(d, "workers", "pools", p, "macs").([]any); ok && len(macs) != count {
			if len(macs) < count {
				if old, ok := get(w.in.Old.Data, "workers", "pools", p, "macs").([]any); ok && len(old) >= count {
					macs = clone(old)
				}
			}
			set(d, macs[:min(count, len(macs))], "workers", "pools", p, "macs")
		}
	}
}

func (w *world) presentName(name, except string) bool {
	for id, m := range w.members {
		if id != except && m.node.Name == name && w.present[id] {
			return true
		}
	}
	return false
}

// versions writes the cluster's versions (base) and each node's own
// where it differs.
func (w *world) versions(d map[string]any) {
	set(d, w.base.APIServer, "kubernetes", "version")
	comps := map[string]string{"apiServer": w.base.APIServer, "controllerManager": w.base.ControllerManager,
		"scheduler": w.base.Scheduler, "kubelet": w.base.Kubelet, "kubeProxy": w.base.KubeProxy}
	for _, k := range slices.Sorted(maps.Keys(comps)) {
		if comps[k] == w.base.APIServer {
			del(d, "kubernetes", "components", k)
		} else {
			set(d, comps[k], "kubernetes", "components", k)
		}
	}
	// A pool carries the versions most of its nodes have, and its nodes
	// only where they differ: a state stays as small as the pool in
	// progress, whatever the size of the pools already done.
	type pair struct{ kubelet, proxy string }
	counts := map[string]map[pair]int{}
	for id, m := range w.members {
		if m.node.Pool != "" && w.present[id] {
			if counts[m.node.Pool] == nil {
				counts[m.node.Pool] = map[pair]int{}
			}
			v := w.ver[id]
			counts[m.node.Pool][pair{v.Kubelet, v.KubeProxy}]++
		}
	}
	pools := map[string]pair{}
	for p, c := range counts {
		best := pair{w.base.Kubelet, w.base.KubeProxy}
		for _, k := range slices.SortedFunc(maps.Keys(c), func(a, b pair) int { return strings.Compare(a.kubelet+a.proxy, b.kubelet+b.proxy) }) {
			if c[k] > c[best] {
				best = k
			}
		}
		pools[p] = best
		for field, v := range map[string][2]string{"kubeletVersion": {best.kubelet, w.base.Kubelet}, "kubeProxyVersion": {best.proxy, w.base.KubeProxy}} {
			if v[0] != v[1] && v[0] != "" {
				set(d, v[0], "workers", "pools", p, field)
			} else {
				del(d, "workers", "pools", p, field)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(w.members)) {
		m := w.members[id]
		if !w.present[id] {
			continue
		}
		n := m.node
		v, base := w.ver[id], w.base.only(n)
		if n.Pool != "" {
			base.Kubelet, base.KubeProxy = pools[n.Pool].kubelet, pools[n.Pool].proxy
		}
		at := nodePath(n)
		if n.Pool != "" {
			at = []string{"workers", "pools", n.Pool, "nodes", n.Name}
		}
		own := func(field, v, base string) {
			if v != base && v != "" {
				set(d, v, append(slices.Clone(at), field)...)
				return
			}
			del(d, append(slices.Clone(at), field)...)
			// A pool's nodes map keeps no empty entry.
			if n.Pool != "" && len(asMap(get(d, at...))) == 0 {
				del(d, at...)
			}
		}
		if n.Role == ir.RoleControlPlane {
			own("apiServerVersion", v.APIServer, base.APIServer)
			own("controllerManagerVersion", v.ControllerManager, base.ControllerManager)
			own("schedulerVersion", v.Scheduler, base.Scheduler)
		}
		if n.RunsPods() {
			own("kubeletVersion", v.Kubelet, base.Kubelet)
			own("kubeProxyVersion", v.KubeProxy, base.KubeProxy)
		}
	}
}

// nodePath is where a node written one by one is in a spec.
func nodePath(n ir.Node) []string {
	switch n.Role {
	case ir.RoleControlPlane:
		return []string{"controlPlane", "nodes", n.Name}
	case ir.RoleEtcd:
		return []string{"etcd", "members", n.Name}
	}
	return []string{"workers", "nodes", n.Name}
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func get(d map[string]any, path ...string) any {
	var v any = d
	for _, k := range path {
		m := asMap(v)
		if m == nil {
			return nil
		}
		v = m[k]
	}
	return v
}

func set(d map[string]any, v any, path ...string) {
	m := d
	for _, k := range path[:len(path)-1] {
		next := asMap(m[k])
		if next == nil {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

func del(d map[string]any, path ...string) {
	m := asMap(get(d, path[:len(path)-1]...))
	if m != nil {
		delete(m, path[len(path)-1])
	}
}

// clone copies spec data deeply.
func clone[T any](v T) T {
	c, _ := cloneAny(v).(T)
	return c
}

func cloneAny(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = cloneAny(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = cloneAny(e)
		}
		return out
	}
	return v
}

// minorOf is a version's minor; the schema has checked its shape.
func minorOf(v string) int {
	var major, minor, patch int
	fmt.Sscanf(v, "%d.%d.%d", &major, &minor, &patch)
	return minor
}

func joinNodes(ns []ir.Node) string {
	var names []string
	for _, n := range ns {
		names = append(names, n.Name)
	}
	return strings.Join(names, ", ")
}

// etcdAt is the etcd release a member restarted now runs: NEW's when the
// step moves etcd, the cluster's otherwise.
func (w *world) etcdAt(moving bool, release string) string {
	if moving {
		return release
	}
	return w.etcd
}
