package nspawn

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
	change "github.com/kcompile/kcompile/plan"
	"github.com/kcompile/kcompile/targets"
)

// trees says the cluster was booted from systemd trees (up's
// --target systemd), the only machines apply can add to.
func (r *Running) trees() bool {
	_, tree := os.Stat(filepath.Join(r.Work, "tree"))
	_, seeds := os.Stat(filepath.Join(r.Work, "cloudinit"))
	return r.Up() && tree == nil && seeds != nil
}

// memberOf is node n's etcd member in state c, if it runs one.
func memberOf(c *ir.Cluster, node string) (ir.EtcdMember, bool) {
	i := slices.IndexFunc(c.Etcd.Members, func(m ir.EtcdMember) bool { return m.Name == node })
	if i < 0 {
		return ir.EtcdMember{}, false
	}
	return c.Etcd.Members[i], true
}

// startedUnits are the units a node runs from its boot, for its gates:
// every component's.
func startedUnits(n ir.Node) []string {
	units := []string{"containerd.service"}
	for comp, unit := range map[ir.Component]string{
		ir.ComponentEtcd: "etcd.service", ir.ComponentAPIServer: "kube-apiserver.service",
		ir.ComponentControllerManager: "kube-controller-manager.service", ir.ComponentScheduler: "kube-scheduler.service",
		ir.ComponentKubeProxy: "kube-proxy.service",
	} {
		if n.Runs(comp) {
			units = append(units, unit)
		}
	}
	if !n.RunsPods() {
		units = units[1:]
	}
	slices.Sort(units)
	return units
}

// add performs a step that adds machines: for each node, its etcd member
// added through a healthy member first (etcdctl member add), its
// compiled tree laid under the work directory, and a machine booted from
// it by the up that runs the cluster; then the node's gates, with every
// member of the state healthy.
func (a *applier) add(ctx context.Context, s change.Step, c *ir.Cluster, tree *targets.Tree) error {
	nodes := map[string]ir.Node{}
	for _, n := range c.Nodes {
		nodes[n.Name] = n
	}
	for _, name := range s.Nodes {
		if _, ok := nodes[name]; !ok {
			return fmt.Errorf("node %s is not in the step's state", name)
		}
	}
	if a.cfg.DryRun {
		for _, name := range s.Nodes {
			if m, ok := memberOf(c, name); ok {
				a.log("  would add etcd member %s (%s)", m.Name, m.PeerURL())
			}
			a.log("  would boot a machine for %s from this state's files", name)
		}
		return nil
	}
	ctl, err := Dial(a.cfg.Running.Work)
	if err != nil {
		return err
	}
	text, err := compiler.StateText(s.State)
	if err != nil {
		return err
	}
	booted := map[string]time.Time{}
	for _, name := range s.Nodes {
		if _, ok := a.machines[name]; ok {
			// An apply that resumes: the machine booted before it stopped.
			a.log("  %s: runs already", name)
			continue
		}
		if m, ok := memberOf(c, name); ok {
			// etcd refuses a member add ("unhealthy cluster") until every
			// member it lists has been connected to the leader for a few
			// seconds: a member whose machine was just powered back on is
			// waited for, within the gate's time.
			var running []ir.EtcdMember
			for _, o := range c.Etcd.Members {
				if o.Name != name {
					running = append(running, o)
				}
			}
			through, err := a.etcd.healthyMember(ctx, running, name)
			if err != nil {
				return err
			}
			var added bool
			var addErr error
			if err := a.await(ctx, fmt.Sprintf("etcd accepting member %s", name), func() (bool, string) {
				added, addErr = a.etcd.addMember(ctx, through, m)
				if addErr != nil && strings.Contains(addErr.Error(), "unhealthy cluster") {
					return false, addErr.Error()
				}
				return true, ""
			}); err != nil {
				return err
			}
			if addErr != nil {
				return fmt.Errorf("adding etcd member %s: %v", name, addErr)
			}
			if added {
				a.log("  etcd member %s added (%s), through %s", name, m.PeerURL(), through)
			}
		}
		if err := WriteNodeTree(a.cfg.Running.Work, tree, name); err != nil {
			return fmt.Errorf("node %s: %v", name, err)
		}
		booted[name] = a.cfg.Now()
		req := MachineRequest{Node: name, State: string(text), Tolerate: s.Tolerate}
		if a.cfg.Binaries != "" {
			if req.Binaries, err = filepath.Abs(a.cfg.Binaries); err != nil {
				return err
			}
		}
		st, err := ctl.AddMachine(ctx, req)
		if err != nil {
			return fmt.Errorf("booting a machine for %s: %v", name, err)
		}
		i := slices.IndexFunc(st.Nodes, func(ns NodeStatus) bool { return ns.Name == name && ns.PID > 0 })
		if i < 0 {
			return fmt.Errorf("up booted no machine for %s", name)
		}
		a.machines[name], a.addrs[name] = st.Nodes[i].PID, nodes[name].Address().String()
		if err := a.await(ctx, "machine "+name+" running", func() (bool, string) {
			_, err := a.run(ctx, name, "true")
			return err == nil, fmt.Sprint(err)
		}); err != nil {
			return err
		}
		a.log("  %s: machine booted", name)
	}
	for _, name := range s.Nodes {
		n := nodes[name]
		if err := a.gates(ctx, c, n, startedUnits(n), booted[name], booted[name]); err != nil {
			return err
		}
	}
	return a.allMembers(ctx, c)
}

// remove performs a step that removes machines: each node drained (as
// the step says), its etcd member removed through another member
// (etcdctl member remove), its machine powered off and removed by the up
// that runs the cluster, its Node object deleted; then every member the
// state keeps healthy, the API ready through the endpoint, and the
// drained pods running elsewhere.
func (a *applier) remove(ctx context.Context, s change.Step, prevC, c *ir.Cluster) error {
	nodes := map[string]ir.Node{}
	for _, n := range prevC.Nodes {
		nodes[n.Name] = n
	}
	for _, name := range s.Nodes {
		if _, ok := nodes[name]; !ok {
			return fmt.Errorf("node %s is not in the cluster the step starts from", name)
		}
	}
	if a.cfg.DryRun {
		for _, name := range s.Nodes {
			if s.Drain {
				a.log("  would drain %s (within %s)", name, s.DrainTimeout)
			}
			if m, ok := memberOf(prevC, name); ok {
				a.log("  would remove etcd member %s (%s)", m.Name, m.PeerURL())
			}
			a.log("  would power %s off, remove its machine and delete its Node", name)
		}
		return nil
	}
	ctl, err := Dial(a.cfg.Running.Work)
	if err != nil {
		return err
	}
	text, err := compiler.StateText(s.State)
	if err != nil {
		return err
	}
	st, err := ctl.Status(ctx)
	if err != nil {
		return err
	}
	if s.Drain {
		timeout := drainTimeout(s)
		for _, name := range s.Nodes {
			if !slices.ContainsFunc(st.Nodes, func(ns NodeStatus) bool { return ns.Name == name }) || !nodes[name].RunsPods() {
				continue
			}
			if err := a.drain(ctx, name, timeout); err != nil {
				return err
			}
		}
	}
	for _, name := range s.Nodes {
		if nodes[name].Runs(ir.ComponentAPIServer) && slices.ContainsFunc(st.Nodes, func(ns NodeStatus) bool { return ns.Name == name && ns.State == "running" }) {
			// Stopped while its etcd member still serves: it ends its
			// requests against a healthy etcd, and the endpoint moves to
			// the other API servers before the machine goes.
			if out, err := a.run(ctx, name, "systemctl", "stop", "kube-controller-manager.service", "kube-scheduler.service", "kube-apiserver.service"); err != nil {
				return fmt.Errorf("stopping the API server of %s: %v %s", name, err, out)
			}
			a.log("  %s: API server and controllers stopped", name)
		}
		if m, ok := memberOf(prevC, name); ok {
			through, err := a.etcd.healthyMember(ctx, c.Etcd.Members, name)
			if err != nil {
				return err
			}
			removed, err := a.etcd.removeMember(ctx, through, m)
			if err != nil {
				return fmt.Errorf("removing etcd member %s: %v", name, err)
			}
			if removed {
				a.log("  etcd member %s removed, through %s", name, through)
			}
		}
		if slices.ContainsFunc(st.Nodes, func(ns NodeStatus) bool { return ns.Name == name }) {
			began := a.cfg.Now()
			if _, err := ctl.RemoveMachine(ctx, MachineRequest{Node: name, State: string(text), Tolerate: s.Tolerate}); err != nil {
				return fmt.Errorf("removing machine %s: %v", name, err)
			}
			a.log("  %s: powered off, machine removed (%s)", name, a.cfg.Now().Sub(began).Round(100*time.Millisecond))
		}
		a.forget(name)
		if nodes[name].RunsPods() {
			_, err := a.kube.do(ctx, http.MethodDelete, "/api/v1/nodes/"+name, "", nil)
			var ae *apiError
			if err != nil && !(errors.As(err, &ae) && ae.code == http.StatusNotFound) {
				return fmt.Errorf("deleting Node %s: %v", name, err)
			}
			a.log("  Node %s deleted", name)
			// Its pods stay in the API until the pod garbage collector
			// finds them orphaned, 40 s after the Node went, and meanwhile
			// count against their DaemonSets. The machine is gone, so
			// nothing of them runs: they are deleted at once, as the
			// collector would.
			gone, err := a.deletePodsOf(ctx, name)
			if err != nil {
				return fmt.Errorf("deleting the pods of %s: %v", name, err)
			}
			if gone > 0 {
				a.log("  %d pods of %s deleted", gone, name)
			}
		}
	}
	if err := a.allMembers(ctx, c); err != nil {
		return err
	}
	if err := a.await(ctx, "the API ready through the endpoint", func() (bool, string) {
		return a.kube.ready(ctx), "/readyz does not answer ok"
	}); err != nil {
		return err
	}
	if s.Drain {
		return a.await(ctx, "the drained nodes' workloads available", func() (bool, string) { return a.kube.workloadsReady(ctx) })
	}
	return nil
}

// deletePodsOf deletes, without a grace period, the pods bound to a
// node whose machine is gone.
func (a *applier) deletePodsOf(ctx context.Context, node string) (int, error) {
	var pods corev1.PodList
	if err := a.kube.get(ctx, "/api/v1/pods?fieldSelector="+url.QueryEscape("spec.nodeName="+node), &pods); err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		_, err := a.kube.do(ctx, http.MethodDelete, path.Join("/api/v1/namespaces", p.Namespace, "pods", p.Name)+"?gracePeriodSeconds=0", "", nil)
		var ae *apiError
		if err != nil && !(errors.As(err, &ae) && ae.code == http.StatusNotFound) {
			return n, fmt.Errorf("pod %s/%s: %v", p.Namespace, p.Name, err)
		}
		n++
	}
	return n, nil
}

// allMembers waits until every etcd member of the state answers healthy
// and the members list no other.
func (a *applier) allMembers(ctx context.Context, c *ir.Cluster) error {
	members := c.Etcd.Members
	if len(members) == 0 {
		return nil
	}
	return a.await(ctx, fmt.Sprintf("etcd: %d of %d members healthy", len(members), len(members)), func() (bool, string) {
		var sick []string
		for _, m := range members {
			if !a.etcd.healthy(ctx, m.ClientURL()) {
				sick = append(sick, m.Name)
			}
		}
		if len(sick) > 0 {
			return false, strings.Join(sick, ", ") + " not healthy"
		}
		list, err := a.etcd.members(ctx, members[0].ClientURL())
		if err != nil {
			return false, err.Error()
		}
		var extra []string
		for _, l := range list {
			if !slices.ContainsFunc(members, func(m ir.EtcdMember) bool { return slices.Contains(l.PeerURLs, m.PeerURL()) }) {
				extra = append(extra, strings.Join(l.PeerURLs, ","))
			}
		}
		if len(extra) > 0 {
			return false, "etcd still lists " + strings.Join(extra, ", ")
		}
		return true, ""
	})
}
