package nspawn

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// serviceAPI stands in for the API server's Services: it gives a
// Service created without an address one of the new range, and records
// each deletion of a Service that apply had not first written to its
// work directory.
type serviceAPI struct {
	mu       sync.Mutex
	services map[string]corev1.Service
	dir      string
	unsaved  []string
	created  []string
}

func (f *serviceAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v1/namespaces/")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) < 2 || parts[1] != "services" {
		http.Error(w, `{"message":"not served"}`, http.StatusNotFound)
		return
	}
	ns := parts[0]
	switch {
	case r.Method == http.MethodPost && len(parts) == 2:
		var s corev1.Service
		if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
			http.Error(w, fmt.Sprintf(`{"message":%q}`, err), http.StatusBadRequest)
			return
		}
		id := ns + "/" + s.Name
		if _, ok := f.services[id]; ok {
			http.Error(w, `{"message":"services \"`+s.Name+`\" already exists"}`, http.StatusConflict)
			return
		}
		if s.Spec.ClusterIP != "" {
			http.Error(w, `{"message":"a moved Service must not keep its address"}`, http.StatusUnprocessableEntity)
			return
		}
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.112.0.5", []string{"10.112.0.5"}
		s.UID = types.UID("new-" + id)
		f.services[id] = s
		f.created = append(f.created, id)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(s)
	case len(parts) == 3:
		id := ns + "/" + parts[2]
		s, ok := f.services[id]
		if !ok {
			http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
			return
		}
		if r.Method == http.MethodDelete {
			if _, err := os.Stat(filepath.Join(f.dir, ns+"."+parts[2]+".json")); err != nil {
				f.unsaved = append(f.unsaved, id)
			}
			delete(f.services, id)
		}
		_ = json.NewEncoder(w).Encode(s)
	default:
		http.Error(w, `{"message":"not served"}`, http.StatusMethodNotAllowed)
	}
}

func serviceAt(ns, name, ip string) corev1.Service {
	return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("old-" + ns + "/" + name), Labels: map[string]string{"app": name}},
		Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip}, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80}}}}
}

// A Service is written to the work directory before it is deleted and
// removed from there once it is back; one found there (an apply that
// stopped between the two) is made again on --resume, though no list
// names it any more.
func TestRecreateServicesSurvivesAStop(t *testing.T) {
	work := t.TempDir()
	api := &serviceAPI{services: map[string]corev1.Service{}, dir: filepath.Join(work, movedServices)}
	web, db := serviceAt("default", "web", "10.96.4.4"), serviceAt("shop", "db", "10.96.5.5")
	api.services["default/web"] = web
	srv := httptest.NewServer(api)
	defer srv.Close()
	// db was deleted by an apply that stopped before making it again.
	if err := os.Mkdir(api.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(db)
	if err := os.WriteFile(filepath.Join(api.dir, "shop.db.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	a := &applier{cfg: ApplyConfig{Running: &Running{Work: work}, GateTimeout: 10 * time.Second, Now: time.Now, Log: io.Discard},
		kube: &kube{server: srv.URL, http: srv.Client(), resources: map[string]map[string]apiResource{}}}
	var log strings.Builder
	a.log = func(format string, args ...any) { fmt.Fprintf(&log, format+"\n", args...) }
	if err := a.recreateServices(t.Context(), []corev1.Service{web}); err != nil {
		t.Fatal(err)
	}
	if len(api.unsaved) > 0 {
		t.Errorf("deleted before written to the work directory: %v", api.unsaved)
	}
	for _, id := range []string{"default/web", "shop/db"} {
		s, ok := api.services[id]
		if !ok {
			t.Errorf("%s is not there again:\n%s", id, log.String())
			continue
		}
		if s.Spec.ClusterIP != "10.112.0.5" || s.Labels["app"] == "" || len(s.Spec.Ports) != 1 {
			t.Errorf("%s came back as %+v", id, s)
		}
	}
	if _, err := os.Stat(api.dir); !os.IsNotExist(err) {
		t.Errorf("the work directory keeps %s: %v", api.dir, err)
	}
	// Asked again with nothing outside the range and nothing kept:
	// nothing happens.
	api.created = nil
	if err := a.recreateServices(t.Context(), nil); err != nil || len(api.created) != 0 {
		t.Errorf("with nothing outside: %v, created %v", err, api.created)
	}
}
