package nspawn

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDrain: drain cordons the node, leaves DaemonSet and static pods,
// asks again for an eviction a PodDisruptionBudget refuses (429) until
// it is granted, and gives up at its timeout naming what is left;
// uncordon undoes the cordon.
func TestDrain(t *testing.T) {
	var mu sync.Mutex
	pods := map[string]corev1.Pod{
		"web-1": {ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default",
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-x"}}}},
		"flannel": {ObjectMeta: metav1.ObjectMeta{Name: "flannel", Namespace: "kube-flannel",
			OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "kube-flannel-ds"}}}},
		"static": {ObjectMeta: metav1.ObjectMeta{Name: "static", Namespace: "kube-system",
			Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}}},
	}
	refusals := 2 // the budget refuses twice, then allows
	var patches []string
	var evictions []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == http.MethodPatch && r.URL.Path == "/api/v1/nodes/w1":
			body, _ := io.ReadAll(r.Body)
			patches = append(patches, string(body))
			w.Write([]byte("{}"))
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods":
			if r.URL.Query().Get("fieldSelector") != "spec.nodeName=w1" {
				http.Error(w, "bad selector", http.StatusBadRequest)
				return
			}
			var list corev1.PodList
			for _, name := range slices.Sorted(maps.Keys(pods)) {
				list.Items = append(list.Items, pods[name])
			}
			json.NewEncoder(w).Encode(list)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/eviction"):
			name := strings.Split(r.URL.Path, "/")[6]
			evictions = append(evictions, name)
			if name == "web-1" && refusals > 0 {
				refusals--
				w.WriteHeader(http.StatusTooManyRequests)
				w.Write([]byte(`{"kind":"Status","message":"Cannot evict pod as it would violate the pod's disruption budget."}`))
				return
			}
			delete(pods, name)
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("{}"))
		default:
			http.Error(w, r.Method+" "+r.URL.Path, http.StatusNotFound)
		}
	}))
	defer srv.Close()
	var log strings.Builder
	a := &applier{cfg: ApplyConfig{Now: time.Now}, kube: &kube{server: srv.URL, http: srv.Client(), resources: map[string]map[string]apiResource{}}}
	a.log = func(format string, args ...any) { log.WriteString(strings.TrimSpace(format) + "\n") }
	if err := a.drain(t.Context(), "w1", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if !slices.Equal(evictions, []string{"web-1", "web-1", "web-1"}) {
		t.Errorf("evictions %q: only web-1, asked until the budget allowed it", evictions)
	}
	if _, ok := pods["flannel"]; !ok {
		t.Error("the DaemonSet's pod was evicted")
	}
	mu.Unlock()
	if err := a.cordon(t.Context(), "w1", false); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(patches, []string{`{"spec":{"unschedulable":true}}`, `{"spec":{"unschedulable":false}}`}) {
		t.Errorf("patches %q", patches)
	}
	// A pod no controller would start again: refused before the cordon.
	mu.Lock()
	pods["lonely"] = corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "lonely", Namespace: "default"}}
	patches, evictions = nil, nil
	mu.Unlock()
	if err := a.drain(t.Context(), "w1", 2*time.Second); err == nil || !strings.Contains(err.Error(), "pod default/lonely has no controller") {
		t.Errorf("a drain of an unmanaged pod: %v", err)
	}
	mu.Lock()
	if len(patches)+len(evictions) > 0 {
		t.Errorf("the refused drain cordoned (%q) or evicted (%q)", patches, evictions)
	}
	// A budget that never allows: the drain gives up at its timeout.
	delete(pods, "lonely")
	pods["web-1"] = corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default",
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-x"}}}}
	refusals = 1 << 30
	mu.Unlock()
	err := a.drain(t.Context(), "w1", 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "draining w1: 1 pods still on it after 2s (a PodDisruptionBudget refuses their eviction") {
		t.Errorf("a drain the budget never allows: %v", err)
	}
}
