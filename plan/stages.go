package plan

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/review"
)

// The units a rollout restarts by class: etcd's, the API server's, the
// controllers', and everything else of a node (its kubelet, kube-proxy,
// runtime, endpoint proxies).
const (
	unitEtcd       = "etcd.service"
	unitAPIServer  = "kube-apiserver.service"
	unitController = "kube-controller-manager.service"
	unitScheduler  = "kube-scheduler.service"
	unitKubelet    = "kubelet.service"
	unitKubeProxy  = "kube-proxy.service"
	// unitInstall checks (or fetches) a node's binaries before its
	// components start: a version step restarts it first.
	unitInstall = "kcompile-install.service"
)

// additions adds NEW's nodes, control-plane and etcd nodes one at a
// time, each worker group's new nodes in one step; a node whose address
// changes is replaced: removed, then added.
func (b *builder) additions() error {
	added, removed, moved := b.w.added, b.w.removed, b.w.moved
	st := b.stage("nodes added", "new capacity first: a group never runs short while nodes leave it")
	for _, n := range added {
		if n.Role == ir.RoleWorker || moved[n.Name] {
			continue
		}
		if err := b.addOne(st, n, "one-member-at-a-time"); err != nil {
			return err
		}
	}
	for _, g := range b.in.New.Cluster.Rollouts {
		var ns []ir.Node
		for _, n := range added {
			if n.Role == ir.RoleWorker && n.Pool == g.Pool && !moved[n.Name] {
				ns = append(ns, n)
			}
		}
		if len(ns) == 0 {
			continue
		}
		var names []string
		for _, n := range ns {
			b.w.fresh[n.Name] = true
			b.w.present[memberID(n)] = true
			b.w.ver[memberID(n)] = b.w.base.only(n)
			names = append(names, n.Name)
		}
		if err := b.step(st, Step{Kind: "add workers", Nodes: names, Rule: "add-before-remove",
			Actions: []string{"lay each node's files (as kcompile build gives them for this state) and boot it"},
			Gates:   []string{"each node Ready"}}); err != nil {
			return err
		}
	}
	if len(moved) == 0 {
		return nil
	}
	st = b.stage("members replaced", "a name stands for one member at a time: the member at the old address leaves before the one at the new address joins")
	for _, r := range removed {
		if !moved[r.Name] {
			continue
		}
		if err := b.removeOne(st, r, "replace-in-place"); err != nil {
			return err
		}
		i := slices.IndexFunc(added, func(a ir.Node) bool { return a.Name == r.Name })
		if err := b.addOne(st, added[i], "replace-in-place"); err != nil {
			return err
		}
	}
	return nil
}

// addOne adds one node that runs an etcd member or a control plane:
// member add before it starts, with the membership of this step.
func (b *builder) addOne(st *Stage, n ir.Node, rule string) error {
	b.w.fresh[n.Name] = true
	b.w.present[memberID(n)] = true
	b.w.ver[memberID(n)] = b.w.base.only(n)
	var actions, gates []string
	if m, ok := b.w.etcdMember(n); ok {
		members := b.w.etcdMembers()
		actions = append(actions,
			fmt.Sprintf("etcdctl member add %s --peer-urls=%s, on a running member", m.Name, m.PeerURL()),
			fmt.Sprintf("lay %s's files, its etcd started with --initial-cluster=%s and --initial-cluster-state=existing, and boot it", n.Name, members.InitialCluster()))
		gates = append(gates, fmt.Sprintf("etcd: %d of %d members healthy", len(members.Members), len(members.Members)))
	} else {
		actions = append(actions, fmt.Sprintf("lay %s's files (as kcompile build gives them for this state) and boot it", n.Name))
	}
	if n.Runs(ir.ComponentAPIServer) {
		gates = append(gates, "kube-apiserver of "+n.Name+" answers /readyz")
	}
	if n.RunsPods() {
		gates = append(gates, n.Name+" Ready")
	}
	if m, ok := b.w.etcdMember(n); ok {
		b.w.joinNow = m.Name
		defer func() { b.w.joinNow = "" }()
	}
	return b.step(st, Step{Kind: "add " + string(n.Role), Nodes: []string{n.Name}, Rule: rule, Actions: actions, Gates: gates, Tolerate: membership(n)})
}

// removeOne removes one node of the control plane or of etcd: drained,
// its member removed, powered off.
func (b *builder) removeOne(st *Stage, n ir.Node, rule string) error {
	var actions, gates []string
	if n.RunsPods() {
		actions = append(actions, drainAction(n.Name))
	}
	if n.Runs(ir.ComponentEtcd) {
		actions = append(actions, fmt.Sprintf("etcdctl member remove <ID of %s>, on another member", n.Name))
	}
	actions = append(actions, fmt.Sprintf("stop %s's units and power it off", n.Name))
	if n.RunsPods() {
		actions = append(actions, "kubectl delete node "+n.Name)
	}
	b.w.present[memberID(n)] = false
	if n.Runs(ir.ComponentEtcd) {
		m := len(b.w.etcdMembers().Members)
		gates = append(gates, fmt.Sprintf("etcd: %d of %d members healthy", m, m))
	}
	if n.Runs(ir.ComponentAPIServer) {
		gates = append(gates, "the API answers /readyz through the endpoint")
	}
	return b.step(st, Step{Kind: "remove " + string(n.Role), Nodes: []string{n.Name}, Rule: rule, Drain: n.RunsPods(), Actions: actions, Gates: gates, Tolerate: membership(n)})
}

// membership are the codes a step that adds or removes an etcd member
// tolerates in its state: one member at a time passes through an even
// count.
func membership(n ir.Node) []string {
	if n.Runs(ir.ComponentEtcd) {
		return []string{compiler.CodeEtcdEven}
	}
	return nil
}

// removals removes OLD's nodes NEW does not have: workers in their
// group's budget, last of each pool first; then the control plane and
// etcd, one at a time.
func (b *builder) removals() error {
	st := b.stage("nodes removed", "each leaving node drained first; a pool shrinks from its end")
	for _, g := range b.in.Old.Cluster.Rollouts {
		var ns []ir.Node
		for _, n := range b.w.removed {
			if n.Role == ir.RoleWorker && n.Pool == g.Pool && !b.w.moved[n.Name] {
				ns = append(ns, n)
			}
		}
		if len(ns) == 0 {
			continue
		}
		// A pool's nodes are numbered by address: the last leaves first.
		sort.Slice(ns, func(i, j int) bool { return ns[j].Address().Less(ns[i].Address()) })
		batches, err := batch(g, ns)
		if err != nil {
			return err
		}
		for _, bn := range batches {
			names := []string{}
			var actions []string
			for _, n := range bn {
				names = append(names, n.Name)
				b.w.present[memberID(n)] = false
			}
			if g.Drain {
				actions = append(actions, drainAction(names...))
			}
			actions = append(actions, "power off "+strings.Join(names, ", "), "kubectl delete node "+strings.Join(names, " "))
			if err := b.step(st, Step{Kind: "remove workers", Nodes: names, Rule: "add-before-remove", Drain: g.Drain,
				DrainTimeout: drainTimeout(g, g.Drain), Actions: actions, Gates: []string{"the pods evicted from them running elsewhere"}}); err != nil {
				return err
			}
		}
	}
	for _, n := range b.w.removed {
		if n.Role == ir.RoleWorker || b.w.moved[n.Name] {
			continue
		}
		if err := b.removeOne(st, n, "one-member-at-a-time"); err != nil {
			return err
		}
	}
	return nil
}

// batch splits a group's nodes into its budget.
func batch(g ir.Rollout, ns []ir.Node) ([][]ir.Node, error) {
	if g.MaxUnavailable <= 0 {
		return nil, refuse("%s has rollout.maxUnavailable 0, and the change takes %s out of it: raise %s.maxUnavailable to at least 1 for the change, or leave its nodes alone",
			groupName(g), joinNodes(ns), g.Path)
	}
	var out [][]ir.Node
	for i := 0; i < len(ns); i += g.MaxUnavailable {
		out = append(out, ns[i:min(i+g.MaxUnavailable, len(ns))])
	}
	return out, nil
}

func groupName(g ir.Rollout) string {
	if g.Pool == "" {
		return "the workers written one by one"
	}
	return "pool " + g.Pool
}

// drainTimeout is the group's bound on a drain, for a step that drains.
func drainTimeout(g ir.Rollout, drain bool) string {
	if !drain {
		return ""
	}
	return g.DrainTimeout.String()
}

// drainAction cordons and drains nodes, as kubectl does.
func drainAction(names ...string) string {
	return "kubectl drain " + strings.Join(names, " ") + " --ignore-daemonsets --delete-emptydir-data"
}

// versions moves the Kubernetes versions, one minor per stage.
func (b *builder) versions() error {
	oldMinor, newMinor := 1<<30, 0
	for _, n := range b.in.Old.Cluster.Nodes {
		if n.Runs(ir.ComponentAPIServer) {
			oldMinor = min(oldMinor, minorOf(n.APIServerVersion))
		}
	}
	for _, n := range b.in.New.Cluster.Nodes {
		if n.Runs(ir.ComponentAPIServer) {
			newMinor = max(newMinor, minorOf(n.APIServerVersion))
		}
	}
	if newMinor < oldMinor {
		return refuse("the change moves the API servers back from 1.%d to 1.%d: Kubernetes does not support a downgrade (its storage may already hold the newer minor's objects); restore a backup of the older cluster instead", oldMinor, newMinor)
	}
	var targets []string
	for m := oldMinor + 1; m < newMinor; m++ {
		v, ok := b.in.Via[m]
		if !ok || minorOf(v) != m {
			return refuse("Kubernetes moves one minor at a time, and 1.%d → 1.%d passes through 1.%d: give the release to pass through, such as --via 1.%d.PATCH (the minor's latest patch)", oldMinor, newMinor, m, m)
		}
		targets = append(targets, v)
	}
	changed := b.w.etcd != b.in.New.Cluster.Etcd.Version
	for _, n := range b.in.New.Cluster.Nodes {
		if b.w.ver[memberID(n)] != nodeVersions(n) {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	// etcd moves at the start of the first stage whose control plane
	// supports its new release (the last one when none does, where the
	// state's check says why).
	newEtcd := b.in.New.Cluster.Etcd.Version
	froms := append([]string{b.w.base.APIServer}, targets...)
	etcdAt := len(targets)
	for i, f := range froms {
		if compiler.EtcdSupports(minorOf(f), newEtcd) {
			etcdAt = i
			break
		}
	}
	from := b.w.base.APIServer
	for i, v := range targets {
		st := b.stage(fmt.Sprintf("Kubernetes %s → %s", from, v), "a stage of its own: Kubernetes supports moving one minor at a time")
		if err := b.roll(st, func(n ir.Node) versions { return allAt(v).only(n) }, false, i == etcdAt); err != nil {
			return err
		}
		b.w.base = allAt(v)
		from = v
	}
	name := fmt.Sprintf("Kubernetes %s → %s", from, b.in.New.Cluster.Kubernetes.APIServer)
	if from == b.in.New.Cluster.Kubernetes.APIServer {
		name = "component versions"
	}
	st := b.stage(name, "")
	if err := b.roll(st, nodeVersions, true, etcdAt == len(targets)); err != nil {
		return err
	}
	b.w.base = clusterVersions(b.in.New.Cluster.Kubernetes)
	b.w.rolled = true
	return nil
}

// configuration restarts what a change without a version change needs
// restarted, in the same order and budgets.
func (b *builder) configuration() error {
	if b.w.rolled {
		return nil
	}
	st := b.stage("configuration", "the units whose files changed restart, in the order and budgets of a version change")
	b.configOnly = true
	return b.roll(st, nodeVersions, true, b.w.etcd != b.in.New.Cluster.Etcd.Version)
}

// roll takes every present node of NEW to its target versions: etcd
// first (to NEW's release, with etcd set), then the API servers, the
// controllers, and last the nodes' own components, within their
// budgets. With diff, the units whose files changed restart too.
func (b *builder) roll(st *Stage, target func(ir.Node) versions, diff, etcd bool) error {
	w := b.w
	// Without a version change, every step is a restart of what changed.
	rule := func(r string) string {
		if w.rolled || b.configOnly {
			return "restart-what-changed"
		}
		return r
	}
	nodes := b.in.New.Cluster.Nodes
	changed := map[string][]string{}
	if diff && b.in.Report != nil {
		for _, c := range b.in.Report.Nodes {
			if c.Status != review.Added {
				changed[c.Node] = append(slices.Clone(c.Restarts), c.Starts...)
			}
		}
	}
	// A node this plan booted has its step's files: what restarts on it
	// is what changes from that state to NEW.
	born, err := b.sinceBorn()
	if err != nil {
		return err
	}
	restarts := func(n ir.Node) []string {
		if w.fresh[n.Name] {
			return born[n.Name]
		}
		return changed[n.Name]
	}
	has := func(n ir.Node, unit string) bool { return slices.Contains(restarts(n), unit) }
	// lays says n's files change, whatever restarts: a node no step of
	// this roll touches is given a step that lays them (a unit that reads
	// them only at its first start, as etcd its --initial-cluster).
	lays := func(n ir.Node) bool {
		if !diff {
			return false
		}
		if w.fresh[n.Name] {
			_, ok := born[n.Name]
			return ok
		}
		_, ok := changed[n.Name]
		return ok
	}
	touched := map[string]bool{}
	// etcd, one member at a time.
	newEtcd := b.in.New.Cluster.Etcd.Version
	var members []ir.Node
	for _, n := range nodes {
		// An external member has no later step to lay its files in.
		if n.Runs(ir.ComponentEtcd) && ((etcd && w.etcd != newEtcd) || has(n, unitEtcd) || (n.Role == ir.RoleEtcd && lays(n))) {
			members = append(members, n)
		}
	}
	for i, n := range members {
		if etcd && i == len(members)-1 {
			w.etcd = newEtcd
		}
		m := len(w.etcdMembers().Members)
		touched[n.Name] = true
		if !(etcd && w.etcd != newEtcd) && !has(n, unitEtcd) {
			if err := b.step(st, Step{Kind: "etcd", Nodes: []string{n.Name}, Rule: rule("etcd-first"),
				Actions: []string{fmt.Sprintf("lay %s's files: etcd reads what changes in them only when a member bootstraps, so nothing restarts", n.Name)}}); err != nil {
				return err
			}
			continue
		}
		if err := b.step(st, Step{Kind: "etcd", Nodes: []string{n.Name}, Restarts: withInstall(has(n, unitInstall), unitEtcd), Rule: rule("etcd-first"),
			Actions: []string{fmt.Sprintf("lay %s's files and restart etcd (etcd %s)", n.Name, w.etcdAt(etcd, newEtcd))},
			Gates:   []string{fmt.Sprintf("etcd member %s healthy; %d of %d members healthy", n.Name, m, m)}}); err != nil {
			return err
		}
	}
	// The API servers, one node at a time.
	for _, n := range nodes {
		if !n.Runs(ir.ComponentAPIServer) {
			continue
		}
		id, t := memberID(n), target(n)
		if w.ver[id].APIServer == t.APIServer && !has(n, unitAPIServer) {
			continue
		}
		v := w.ver[id]
		v.APIServer = t.APIServer
		w.ver[id] = v
		touched[n.Name] = true
		if err := b.step(st, Step{Kind: "api server", Nodes: []string{n.Name}, Restarts: withInstall(has(n, unitInstall), unitAPIServer), Rule: rule("api-servers-first"),
			Actions: []string{fmt.Sprintf("lay %s's files and %s (kube-apiserver %s)", n.Name, restartText(withInstall(has(n, unitInstall), unitAPIServer)), t.APIServer)},
			Gates:   []string{"kube-apiserver of " + n.Name + " answers /readyz"}}); err != nil {
			return err
		}
	}
	// The controllers, one node at a time.
	for _, n := range nodes {
		if !n.Runs(ir.ComponentControllerManager) {
			continue
		}
		id, t := memberID(n), target(n)
		v := w.ver[id]
		if v.ControllerManager == t.ControllerManager && v.Scheduler == t.Scheduler && !has(n, unitController) && !has(n, unitScheduler) {
			continue
		}
		v.ControllerManager, v.Scheduler = t.ControllerManager, t.Scheduler
		w.ver[id] = v
		touched[n.Name] = true
		if err := b.step(st, Step{Kind: "controllers", Nodes: []string{n.Name}, Restarts: withInstall(has(n, unitInstall), unitController, unitScheduler), Rule: rule("controllers-after-api-servers"),
			Actions: []string{fmt.Sprintf("lay %s's files and restart kube-controller-manager (%s) and kube-scheduler (%s)", n.Name, t.ControllerManager, t.Scheduler)},
			Gates:   []string{"kube-controller-manager and kube-scheduler of " + n.Name + " lead (or another node leads) since the restart, and stay up"}}); err != nil {
			return err
		}
	}
	// The nodes' own components: the control plane's one at a time, then
	// each worker group within its budget.
	nodeUnits := func(n ir.Node) ([]string, bool) {
		id, t := memberID(n), target(n)
		v := w.ver[id]
		var units []string
		version := v.Kubelet != t.Kubelet || v.KubeProxy != t.KubeProxy
		if version {
			units = append(units, unitKubelet)
			if n.Runs(ir.ComponentKubeProxy) {
				units = append(units, unitKubeProxy)
			}
		}
		for _, u := range restarts(n) {
			if !slices.Contains([]string{unitEtcd, unitAPIServer, unitController, unitScheduler}, u) && !slices.Contains(units, u) {
				units = append(units, u)
			}
		}
		sort.Strings(units)
		// A new kubelet minor or a new runtime restarts the pods: the
		// node is drained first.
		drain := minorOf(v.Kubelet) != minorOf(t.Kubelet) || slices.ContainsFunc(units, func(u string) bool {
			return u == "containerd.service" || u == "crio.service"
		})
		return units, drain
	}
	move := func(n ir.Node) {
		id, t := memberID(n), target(n)
		v := w.ver[id]
		v.Kubelet, v.KubeProxy = t.Kubelet, t.KubeProxy
		w.ver[id] = v
	}
	for _, n := range nodes {
		if n.Role != ir.RoleControlPlane {
			continue
		}
		units, drain := nodeUnits(n)
		if len(units) == 0 && (!lays(n) || touched[n.Name]) {
			continue
		}
		move(n)
		s := Step{Kind: "node", Nodes: []string{n.Name}, Restarts: units, Rule: rule("nodes-in-budget"), Drain: drain,
			Gates: []string{n.Name + " Ready", "kube-apiserver of " + n.Name + " answers /readyz"}}
		s.Actions = nodeActions(s, n.Name)
		if len(units) == 0 {
			s.Gates = nil
		}
		if err := b.step(st, s); err != nil {
			return err
		}
	}
	for _, g := range b.in.New.Cluster.Rollouts {
		var todo, layOnly []ir.Node
		drains := map[string]bool{}
		units := map[string][]string{}
		for _, n := range nodes {
			if n.Role != ir.RoleWorker || n.Pool != g.Pool {
				continue
			}
			us, drain := nodeUnits(n)
			switch {
			case len(us) > 0:
				todo = append(todo, n)
				units[n.Name], drains[n.Name] = us, drain
			case lays(n):
				layOnly = append(layOnly, n)
			}
		}
		var batches [][]ir.Node
		if len(todo) > 0 {
			var err error
			if batches, err = batch(g, todo); err != nil {
				return err
			}
		}
		// Nodes that only have files laid are not taken out of the pool:
		// one step, outside its budget.
		if len(layOnly) > 0 {
			batches = append(batches, layOnly)
		}
		for _, bn := range batches {
			s := Step{Kind: "workers", Rule: rule("nodes-in-budget")}
			for _, n := range bn {
				s.Nodes = append(s.Nodes, n.Name)
				s.Drain = s.Drain || (drains[n.Name] && g.Drain)
				for _, u := range units[n.Name] {
					if !slices.Contains(s.Restarts, u) {
						s.Restarts = append(s.Restarts, u)
					}
				}
				move(n)
			}
			sort.Strings(s.Restarts)
			s.DrainTimeout = drainTimeout(g, s.Drain)
			s.Actions = nodeActions(s, strings.Join(s.Nodes, " "))
			s.Gates = []string{"each node Ready"}
			if len(s.Restarts) == 0 {
				s.Gates = nil
			}
			if s.Drain {
				s.Gates = append(s.Gates, "the pods evicted from them running elsewhere")
			}
			if err := b.step(st, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// withInstall puts the install unit first where the node's binaries
// change.
func withInstall(install bool, units ...string) []string {
	if install {
		return append([]string{unitInstall}, units...)
	}
	return units
}

// restartText says how units are restarted. The install unit is not
// restarted but its command run: every component Requires= it, so a
// restart of it would restart them all.
func restartText(units []string) string {
	if len(units) > 0 && units[0] == unitInstall {
		return "run " + unitInstall + "'s command (which checks the new programs; restarting the unit would restart every component that requires it), then restart " + strings.Join(units[1:], ", ")
	}
	return "restart " + strings.Join(units, ", ")
}

func nodeActions(s Step, names string) []string {
	var out []string
	if s.Drain {
		out = append(out, drainAction(names))
	}
	if len(s.Restarts) == 0 {
		return append(out, "lay the files of "+names+": nothing that reads them restarts for it")
	}
	out = append(out, "lay the files of "+names+" and "+restartText(s.Restarts))
	if s.Drain {
		out = append(out, "kubectl uncordon "+names)
	}
	return out
}

// explicit takes the steps a restart does not apply, from diff's
// analysis; labels only once the nodes run the new configuration (late).
// etcd's membership is the plan's own (additions, removals).
func (b *builder) explicit(late bool) error {
	if b.in.Report == nil {
		return nil
	}
	name := "settings a restart does not apply"
	if late {
		name = "once every node runs the change"
	}
	st := b.stage(name, "")
	for _, s := range b.in.Report.Steps {
		// The plan's own: etcd's membership (additions, removals), the
		// service ranges (servicesOpen, servicesMove).
		lateKind := s.Kind == review.StepNodeLabels || s.Kind == review.StepTokens || s.Kind == review.StepRootCA
		if s.Kind == review.StepEtcdMembership || s.Kind == review.StepServiceCIDR || lateKind != late {
			continue
		}
		step := Step{Kind: "explicit", Rule: "explicit-step", Actions: append([]string{s.Setting + ": " + s.Why}, s.Actions...)}
		if s.Kind == review.StepNodeLabels {
			// apply sets them through the API, from OLD's and NEW's nodes.
			step.Kind, step.Nodes = KindLabels, s.Nodes
			step.Gates = []string{"each node's labels and taints are those of the spec"}
		}
		if s.Kind == review.StepTokens || s.Kind == review.StepRootCA {
			// Every API server signs with the new key, and every
			// controller-manager publishes the new bundle, by now.
			step.Kind = KindPods
			step.Gates = []string{"no pod started before the step; every workload rolled out"}
			if s.Kind == review.StepRootCA {
				step.Gates = append([]string{"every namespace's kube-root-ca.crt is NEW's cluster CA bundle, before any pod restarts"}, step.Gates...)
			}
		}
		if err := b.step(st, step); err != nil {
			return err
		}
	}
	return nil
}

// servicesOpen begins a change of the service ranges, before any node
// or API server runs NEW's: NEW's ranges are opened to allocation (a
// ServiceCIDR object) and, where the DNS address moves, a Service at the
// new one selects CoreDNS's pods, so that a pod a restarted kubelet
// starts (its resolver is the new address) is answered.
func (b *builder) servicesOpen() error {
	w := b.w
	if !w.servicesChange {
		return nil
	}
	o, n := w.in.Old.Cluster.Network, w.in.New.Cluster.Network
	st := b.stage("the service CIDR change begins", "NEW's range takes Services, and CoreDNS answers at NEW's DNS address, before anything runs NEW's range")
	s := Step{Kind: KindServiceRange, Rule: "service-range-first",
		Actions: []string{
			fmt.Sprintf("service CIDR %s → %s: %s", ir.Join(o.ServiceCIDRs, ","), ir.Join(n.ServiceCIDRs, ","), "the API servers' --service-cluster-ip-range allocates new Services only: every existing Service, the kubernetes Service and CoreDNS's among them, keeps its old ClusterIP"),
			fmt.Sprintf("create the ServiceCIDR %s (networking.k8s.io/v1) of %s", ServiceRangeName, ir.Join(n.ServiceCIDRs, ",")),
		},
		Gates: []string{"the ServiceCIDR " + ServiceRangeName + " Ready"}}
	if !slices.Equal(o.DNSServiceIPs, n.DNSServiceIPs) {
		s.Actions = append(s.Actions, fmt.Sprintf("create the Service kube-system/%s at %s, selecting CoreDNS's pods as kube-dns does (at %s)", DNSBridgeName, ir.Join(n.DNSServiceIPs, ","), ir.Join(o.DNSServiceIPs, ",")))
		s.Gates = append(s.Gates, "CoreDNS's pods ready behind "+DNSBridgeName)
	}
	if len(w.keepSANs) > 0 {
		s.Actions = append(s.Actions, fmt.Sprintf("every state until the change ends keeps the kubernetes Service's old address (%s) in the API servers' certificates: running pods reach the API there until they restart", strings.Join(w.keepSANs, ", ")))
	}
	return b.step(st, s)
}

// servicesMove ends a change of the service ranges once every node runs
// NEW's: the Services outside them are handed over into them, their
// names answered and their old addresses reaching them until no pod or
// cached answer holds those (kube-dns goes to NEW's DNS address once no
// pod asks the old one), every pod started before restarts through its controller,
// and the old default ServiceCIDR gives way to NEW's. Then no pod
// reaches the API at the kubernetes Service's old address, and the API
// servers restart, one at a time, with certificates without it.
func (b *builder) servicesMove() error {
	w := b.w
	if !w.servicesChange {
		return nil
	}
	o, n := w.in.Old.Cluster.Network, w.in.New.Cluster.Network
	st := b.stage("the service CIDR change ends", "every node runs NEW's range: the Services move into it, and the pods holding old addresses restart")
	s := Step{Kind: KindServiceMove, Rule: "service-range-first"}
	moves := !slices.Equal(o.FirstServiceIPs, n.FirstServiceIPs) || !slices.Equal(o.DNSServiceIPs, n.DNSServiceIPs)
	s.Actions = append(s.Actions,
		"hand over every Service with an address outside "+ir.Join(n.ServiceCIDRs, ",")+" but kube-dns, its name answered throughout: a stand-in of it takes an address there, it becomes an ExternalName of the stand-in (its old address freed), another stand-in takes the old address and reaches its endpoints from there, and it takes an address of "+ir.Join(n.ServiceCIDRs, ",")+" again as it was (each kept in the work directory until its stand-ins go)",
		"delete the ServiceCIDR kubernetes ("+ir.Join(o.ServiceCIDRs, ",")+"), which then allocates nothing more")
	if !slices.Equal(o.FirstServiceIPs, n.FirstServiceIPs) {
		s.Actions = append(s.Actions, fmt.Sprintf("the kubernetes Service goes to %s, NEW's first address; its stand-ins reach the API servers", ir.Join(n.FirstServiceIPs[:1], ",")))
	}
	restart := "Deployments, DaemonSets and StatefulSets rolled out again (kubectl rollout restart), other controllers' pods evicted; a pod without a controller refuses the step before it changes anything"
	if moves {
		s.Actions = append(s.Actions, "restart every pod started before: "+restart)
	} else {
		s.Actions = append(s.Actions, "where a Service was handed over (its old address is in the environment of pods of its namespace), the pods started before restart: "+restart)
	}
	if !slices.Equal(o.DNSServiceIPs, n.DNSServiceIPs) {
		s.Actions = append(s.Actions, fmt.Sprintf("once no pod asks %s: delete kube-dns there and %s, and apply NEW's kube-dns at %s", ir.Join(o.DNSServiceIPs, ","), DNSBridgeName, ir.Join(n.DNSServiceIPs, ",")))
	}
	s.Actions = append(s.Actions, "delete the stand-ins once the pods have restarted and no answer CoreDNS gave before the last hand-over is kept (its answers' lifetime)")
	s.Actions = append(s.Actions, "once the API servers have made the ServiceCIDR kubernetes again of "+ir.Join(n.ServiceCIDRs, ",")+", delete "+ServiceRangeName)
	s.Gates = []string{"no Service outside " + ir.Join(n.ServiceCIDRs, ","), "the ServiceCIDR kubernetes is " + ir.Join(n.ServiceCIDRs, ",") + " and Ready"}
	if moves {
		s.Gates = append(s.Gates, "no pod started before the move; every Deployment, DaemonSet and StatefulSet rolled out")
	}
	if err := b.step(st, s); err != nil {
		return err
	}
	before := w.data()
	w.servicesMoved = true
	if len(w.keepSANs) == 0 {
		return nil
	}
	units := map[string][]string{}
	if b.in.Since != nil {
		var err error
		if units, err = b.in.Since(before, nil); err != nil {
			return fmt.Errorf("the service CIDR move's end: %w", err)
		}
	}
	for _, n := range b.in.New.Cluster.Nodes {
		if !n.Runs(ir.ComponentAPIServer) {
			continue
		}
		restarts := units[n.Name]
		if b.in.Since == nil {
			restarts = []string{unitAPIServer}
		}
		if len(restarts) == 0 {
			continue
		}
		if err := b.step(st, Step{Kind: "api server", Nodes: []string{n.Name}, Restarts: restarts, Rule: "sans-until-moved",
			Actions: []string{fmt.Sprintf("lay %s's files (its serving certificate without %s) and %s", n.Name, strings.Join(w.keepSANs, ", "), restartText(restarts))},
			Gates:   []string{"kube-apiserver of " + n.Name + " answers /readyz"}}); err != nil {
			return err
		}
	}
	return nil
}

// addons applies NEW's addon manifests last.
func (b *builder) addons() error {
	changed := b.w.addonsChange()
	if b.in.Report != nil {
		for _, f := range b.in.Report.Files {
			if strings.HasPrefix(f.Path, layout.ClusterTree("addons/")) {
				changed = true
			}
		}
	}
	if !changed {
		return nil
	}
	b.w.addon = true
	st := b.stage("addons", "")
	return b.step(st, Step{Kind: "addons", Rule: "addons-last",
		Actions: []string{"kubectl apply --server-side -f the cluster tree's addons/, in file order"},
		Gates:   []string{"every addon's Deployments and DaemonSets rolled out"}})
}
