package nspawn

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kcompile/kcompile/compiler/ir"
)

// etcdHealth asks etcd members for their health, as the API server's
// etcd client.
type etcdHealth struct{ http *http.Client }

// healthy says whether a member answers /health with health true.
func (e *etcdHealth) healthy(ctx context.Context, clientURL string) bool {
	var h struct {
		Health string `json:"health"`
	}
	return e.call(ctx, http.MethodGet, clientURL, "/health", "", &h) && h.Health == "true"
}

// call asks a member's client URL at path and decodes its JSON answer
// into v; false when it does not answer 200 with JSON.
func (e *etcdHealth) call(ctx context.Context, method, clientURL, path, body string, v any) bool {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(clientURL, "/")+path, r)
	if err != nil {
		return false
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(v) == nil
}

// workloadsReady says whether every DaemonSet and Deployment of
// kube-system and of the addons' namespaces is fully available.
func (k *kube) workloadsReady(ctx context.Context) (bool, string) {
	var ds appsv1.DaemonSetList
	if err := k.get(ctx, "/apis/apps/v1/daemonsets", &ds); err != nil {
		return false, err.Error()
	}
	var dep appsv1.DeploymentList
	if err := k.get(ctx, "/apis/apps/v1/deployments", &dep); err != nil {
		return false, err.Error()
	}
	ok := true
	var parts []string
	for _, d := range ds.Items {
		want, have := d.Status.DesiredNumberScheduled, d.Status.NumberAvailable
		ok = ok && want > 0 && have == want && d.Status.ObservedGeneration >= d.Generation
		parts = append(parts, fmt.Sprintf("%s %d/%d", d.Name, have, want))
	}
	for _, d := range dep.Items {
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		have := d.Status.AvailableReplicas
		ok = ok && have >= want && d.Status.ObservedGeneration >= d.Generation
		parts = append(parts, fmt.Sprintf("%s %d/%d", d.Name, have, want))
	}
	return ok, strings.Join(parts, ", ") + " available"
}

// health says whether cluster c runs as its spec says, and if not, what
// does not: every etcd member healthy (not a quorum only: a step that
// restarts one member while another is down loses it), every API server
// ready, every unit of a node's components active, and every node that
// runs pods Ready with its kubelet's lease renewed within the lease's
// duration (a Node keeps the Ready its kubelet last posted for that long
// after the kubelet stops).
func (a *applier) health(ctx context.Context, c *ir.Cluster) (bool, string) {
	var bad []string
	for _, m := range c.Etcd.Members {
		if !a.etcd.healthy(ctx, m.ClientURL()) {
			bad = append(bad, "etcd member "+m.Name+" not healthy")
		}
	}
	for _, n := range c.Nodes {
		if n.Runs(ir.ComponentAPIServer) && !a.kube.at(c.APIServerURL(n)).ready(ctx) {
			bad = append(bad, "kube-apiserver of "+n.Name+" not ready")
		}
	}
	nodes := map[string]corev1.Node{}
	leases := map[string]coordinationv1.Lease{}
	listed, listErr := a.kube.nodes(ctx)
	var leaseList coordinationv1.LeaseList
	if listErr == nil {
		listErr = a.kube.get(ctx, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", &leaseList)
	}
	if listErr != nil {
		bad = append(bad, "the API does not list the Nodes and their leases: "+listErr.Error())
	}
	for _, n := range listed {
		nodes[n.Name] = n
	}
	for _, l := range leaseList.Items {
		leases[l.Name] = l
	}
	now := a.cfg.Now()
	for _, n := range c.Nodes {
		units := startedUnits(n)
		if n.RunsPods() {
			units = append(units, "kubelet.service")
		}
		// is-active prints each unit's state on a line of its own and
		// fails when one is not active.
		out, err := a.run(ctx, n.Name, append([]string{"systemctl", "is-active"}, units...)...)
		states := strings.Fields(string(out))
		if len(states) != len(units) {
			bad = append(bad, fmt.Sprintf("%s: systemctl is-active: %v %s", n.Name, err, strings.TrimSpace(string(out))))
		} else {
			for i, s := range states {
				if s != "active" {
					bad = append(bad, n.Name+": "+units[i]+" "+s)
				}
			}
		}
		if !n.RunsPods() || listErr != nil {
			continue
		}
		node, ok := nodes[n.Name]
		switch {
		case !ok:
			bad = append(bad, "no Node "+n.Name)
		case !nodeReady(node):
			bad = append(bad, n.Name+" not Ready")
		}
		l, ok := leases[n.Name]
		if !ok || l.Spec.RenewTime == nil {
			bad = append(bad, n.Name+"'s kubelet has no lease")
			continue
		}
		lasts := 40 * time.Second
		if l.Spec.LeaseDurationSeconds != nil {
			lasts = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		if renewed := l.Spec.RenewTime.Time; now.Sub(renewed) > lasts {
			bad = append(bad, fmt.Sprintf("%s's kubelet last renewed its lease %s ago", n.Name, now.Sub(renewed).Round(time.Second)))
		}
	}
	return len(bad) == 0, strings.Join(bad, "; ")
}
