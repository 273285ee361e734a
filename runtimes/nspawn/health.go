package nspawn

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
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
