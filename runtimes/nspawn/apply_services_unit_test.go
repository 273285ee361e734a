package nspawn

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcompile/kcompile/compiler/ir"
)

// serviceAPI stands in for the API server's Services and EndpointSlices:
// it gives a Service of type ClusterIP without an address one of the new
// range, frees an address when its Service goes or becomes an
// ExternalName, and refuses one held by another Service. After each
// change it asks, as CoreDNS would, whether each watched name is
// answered with an address, and records when one is not.
type serviceAPI struct {
	mu       sync.Mutex
	services map[string]corev1.Service
	slices   []discoveryv1.EndpointSlice
	next     int
	watched  []string
	domain   string
	dir      string
	// unanswered are the watched names that went unanswered, with the
	// change after which they did; unsaved the Services changed before
	// they were written to the work directory.
	unanswered []string
	unsaved    []string
	writes     int
}

func (f *serviceAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path == "/api/v1/services" {
		var list corev1.ServiceList
		for _, s := range f.services {
			list.Items = append(list.Items, s)
		}
		_ = json.NewEncoder(w).Encode(list)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/apis/discovery.k8s.io/v1/namespaces/") {
		f.serveSlices(w, r)
		return
	}
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
		s.Namespace = ns
		id := ns + "/" + s.Name
		if _, ok := f.services[id]; ok {
			http.Error(w, `{"message":"services \"`+s.Name+`\" already exists"}`, http.StatusConflict)
			return
		}
		if !f.place(w, &s, id) {
			return
		}
		s.UID = types.UID("uid-" + id)
		f.services[id] = s
		f.changed("created " + id)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(s)
	case len(parts) == 3:
		id := ns + "/" + parts[2]
		s, ok := f.services[id]
		if !ok {
			http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
			return
		}
		switch r.Method {
		case http.MethodDelete:
			delete(f.services, id)
			f.changed("deleted " + id)
		case http.MethodPut:
			var u corev1.Service
			if err := json.NewDecoder(r.Body).Decode(&u); err != nil {
				http.Error(w, fmt.Sprintf(`{"message":%q}`, err), http.StatusBadRequest)
				return
			}
			if _, err := os.Stat(filepath.Join(f.dir, ns+"."+parts[2]+".json")); err != nil && slices.Contains(f.watched, id) {
				f.unsaved = append(f.unsaved, id)
			}
			if u.Spec.Type == corev1.ServiceTypeExternalName && (u.Spec.ClusterIP != "" || len(u.Spec.ClusterIPs) > 0) {
				http.Error(w, `{"message":"spec.clusterIP: Forbidden: may not be set for ExternalName services"}`, http.StatusUnprocessableEntity)
				return
			}
			if s.Spec.Type != corev1.ServiceTypeExternalName && u.Spec.Type != corev1.ServiceTypeExternalName && u.Spec.ClusterIP != s.Spec.ClusterIP {
				http.Error(w, `{"message":"spec.clusterIP: Invalid value: field is immutable"}`, http.StatusUnprocessableEntity)
				return
			}
			delete(f.services, id)
			if u.Spec.Type != corev1.ServiceTypeExternalName && u.Spec.ClusterIP != "" && u.Spec.ClusterIP == s.Spec.ClusterIP {
				u.Spec.ClusterIPs = s.Spec.ClusterIPs
			} else if !f.place(w, &u, id) {
				f.services[id] = s
				return
			}
			u.UID = s.UID
			f.services[id] = u
			f.changed("updated " + id)
			s = u
		}
		_ = json.NewEncoder(w).Encode(s)
	default:
		http.Error(w, `{"message":"not served"}`, http.StatusMethodNotAllowed)
	}
}

// place gives s an address: its own where free, else the next of the
// new range; none to an ExternalName.
func (f *serviceAPI) place(w http.ResponseWriter, s *corev1.Service, id string) bool {
	if s.Spec.Type == corev1.ServiceTypeExternalName {
		return true
	}
	if s.Spec.ClusterIP != "" {
		for other, o := range f.services {
			if other != id && o.Spec.ClusterIP == s.Spec.ClusterIP {
				http.Error(w, `{"message":"Internal error occurred: failed to allocate a serviceIP: provided IP is already allocated"}`, http.StatusUnprocessableEntity)
				return false
			}
		}
		s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
		return true
	}
	f.next++
	ip := fmt.Sprintf("10.112.0.%d", 10+f.next)
	s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip}
	return true
}

func (f *serviceAPI) serveSlices(w http.ResponseWriter, r *http.Request) {
	ns := strings.Split(strings.TrimPrefix(r.URL.Path, "/apis/discovery.k8s.io/v1/namespaces/"), "/")[0]
	switch r.Method {
	case http.MethodGet:
		want := strings.TrimPrefix(r.URL.Query().Get("labelSelector"), discoveryv1.LabelServiceName+"=")
		var list discoveryv1.EndpointSliceList
		for _, s := range f.slices {
			if s.Namespace == ns && s.Labels[discoveryv1.LabelServiceName] == want {
				list.Items = append(list.Items, s)
			}
		}
		_ = json.NewEncoder(w).Encode(list)
	case http.MethodPost:
		var s discoveryv1.EndpointSlice
		if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
			http.Error(w, fmt.Sprintf(`{"message":%q}`, err), http.StatusBadRequest)
			return
		}
		s.Namespace = ns
		f.slices = append(f.slices, s)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(s)
	}
}

// changed asks, as CoreDNS does from one watch of every Service, in the
// order of the changes, whether each watched name is answered with an
// address: its Service's, or, for an ExternalName in the cluster's
// domain, that of the Service it names.
func (f *serviceAPI) changed(what string) {
	f.writes++
	for _, id := range f.watched {
		s, ok := f.services[id]
		if ok && s.Spec.Type == corev1.ServiceTypeExternalName {
			name, _ := strings.CutSuffix(s.Spec.ExternalName, ".svc."+f.domain)
			svc, ns, _ := strings.Cut(name, ".")
			s, ok = f.services[ns+"/"+svc]
		}
		if !ok || s.Spec.Type == corev1.ServiceTypeExternalName || s.Spec.ClusterIP == "" {
			f.unanswered = append(f.unanswered, id+" after "+what)
		}
	}
}

func serviceAt(ns, name, ip string) corev1.Service {
	return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("old-" + ns + "/" + name), Labels: map[string]string{"app": name}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip}, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80}}}}
}

// A moving Service's name is answered with an address after every
// change a hand-over makes, as CoreDNS sees them; its old address is
// held by a stand-in of apply's; it is written to the work directory
// before its first change and forgotten once its stand-ins are gone. One
// an apply left as an ExternalName of its stand-in goes on from there
// on --resume, though no list names it outside the range any more; a
// selectorless one's stand-ins get copies of its endpoints.
func TestHandOverKeepsNamesAnswered(t *testing.T) {
	work := t.TempDir()
	c := &ir.Cluster{Network: ir.Network{Domain: "cluster.local", ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.112.0.0/16")},
		FirstServiceIPs: []netip.Addr{netip.MustParseAddr("10.112.0.1")}}}
	api := &serviceAPI{services: map[string]corev1.Service{}, dir: filepath.Join(work, movedServices), domain: "cluster.local",
		watched: []string{"default/web", "shop/db", "default/kubernetes"}}
	web, db := serviceAt("default", "web", "10.96.4.4"), serviceAt("shop", "db", "10.96.5.5")
	api.services["default/web"] = web
	kubernetes := serviceAt("default", "kubernetes", "10.96.0.1")
	kubernetes.Spec.Selector = nil
	api.services["default/kubernetes"] = kubernetes
	api.slices = append(api.slices, discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default",
		Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.77.0.11"}}}})
	ext := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ext"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "ext.example.com"}}
	api.services["default/ext"] = ext
	// db was made an ExternalName of its stand-in by an apply that
	// stopped then.
	dbNext := standIn(db, "next")
	api.services["shop/"+dbNext] = corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: dbNext, Labels: map[string]string{managedByLabel: managedBy}},
		Spec: corev1.ServiceSpec{ClusterIP: "10.112.0.9", ClusterIPs: []string{"10.112.0.9"}, Selector: db.Spec.Selector}}
	api.services["shop/db"] = corev1.Service{ObjectMeta: db.ObjectMeta, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName,
		ExternalName: dbNext + ".shop.svc.cluster.local", Selector: db.Spec.Selector}}
	if err := os.Mkdir(api.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(db)
	if err := os.WriteFile(filepath.Join(api.dir, "shop.db.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	a := &applier{cfg: ApplyConfig{Running: &Running{Work: work}, GateTimeout: 10 * time.Second, Now: time.Now, Log: io.Discard},
		kube: &kube{server: srv.URL, http: srv.Client(), resources: map[string]map[string]apiResource{}}}
	var log strings.Builder
	a.log = func(format string, args ...any) { fmt.Fprintf(&log, format+"\n", args...) }

	movers, err := a.movers(t.Context(), c.Network, true)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range movers {
		ids = append(ids, m.id())
	}
	if !slices.Equal(ids, []string{"shop/db", "default/kubernetes", "default/web"}) {
		t.Fatalf("movers %v, want the kept db, kubernetes and web", ids)
	}
	if err := a.handOver(t.Context(), c, movers); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	held := map[string]string{}
	for _, s := range api.services {
		if s.Labels[managedByLabel] == managedBy && s.Spec.ClusterIP != "" {
			held[s.Spec.ClusterIP] = s.Namespace + "/" + s.Name
		}
	}
	for _, old := range []string{"10.96.4.4", "10.96.5.5", "10.96.0.1"} {
		if held[old] == "" {
			t.Errorf("no stand-in holds the old address %s: %v", old, held)
		}
	}
	prev := standIn(kubernetes, "previous")
	var copies int
	for _, s := range api.slices {
		if s.Labels[discoveryv1.LabelServiceName] == prev || s.Labels[discoveryv1.LabelServiceName] == standIn(kubernetes, "next") {
			copies++
			if s.Labels[discoveryv1.LabelManagedBy] != managedBy || len(s.Endpoints) != 1 || s.Endpoints[0].Addresses[0] != "10.77.0.11" {
				t.Errorf("a stand-in's endpoints: %+v", s)
			}
		}
	}
	if copies != 2 {
		t.Errorf("the kubernetes Service's stand-ins have %d copies of its endpoints, want 2", copies)
	}
	for _, m := range movers {
		if err := a.settle(t.Context(), m, c.Network); err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
	}
	for _, m := range movers {
		if err := a.dropStandIns(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"default/web", "shop/db", "default/kubernetes"} {
		s := api.services[id]
		if s.Spec.Type == corev1.ServiceTypeExternalName || !strings.HasPrefix(s.Spec.ClusterIP, "10.112.") || s.Labels["app"] == "" || len(s.Spec.Ports) != 1 {
			t.Errorf("%s ended as %+v", id, s.Spec)
		}
	}
	if ip := api.services["default/kubernetes"].Spec.ClusterIP; ip != "10.112.0.1" {
		t.Errorf("the kubernetes Service is at %s, want NEW's first address", ip)
	}
	if s := api.services["default/ext"]; s.Spec.ExternalName != "ext.example.com" {
		t.Errorf("an ExternalName of the user's was changed: %+v", s.Spec)
	}
	for id, s := range api.services {
		if strings.HasPrefix(s.Name, "kcompile-") {
			t.Errorf("the stand-in %s is left", id)
		}
	}
	if len(api.unanswered) > 0 {
		t.Errorf("names went unanswered:\n%s\n%s", strings.Join(api.unanswered, "\n"), log.String())
	}
	if len(api.unsaved) > 0 {
		t.Errorf("changed before written to the work directory: %v", api.unsaved)
	}
	if _, err := os.Stat(api.dir); !os.IsNotExist(err) {
		t.Errorf("the work directory keeps %s: %v", api.dir, err)
	}
	// Asked again with nothing outside the range and nothing kept:
	// nothing happens.
	writes := api.writes
	movers, err = a.movers(t.Context(), c.Network, true)
	if err != nil || len(movers) != 0 || api.writes != writes {
		t.Errorf("with nothing outside: %v, movers %v, %d writes", err, movers, api.writes-writes)
	}
}
