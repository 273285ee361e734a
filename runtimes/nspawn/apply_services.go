package nspawn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/writer"
	change "github.com/kcompile/kcompile/plan"
	"github.com/kcompile/kcompile/targets"
)

// The objects apply makes for a change of the service ranges carry
// this label, so that an operator can tell them from their own.
const (
	managedByLabel = "app.kubernetes.io/managed-by"
	managedBy      = "kcompile"
	// defaultServiceCIDR is the ServiceCIDR the API servers make from
	// their --service-cluster-ip-range when there is none of that name.
	defaultServiceCIDR = "kubernetes"
	// movedServices is the directory of the work directory that holds
	// each Service a move deletes until it is created again: an apply
	// that stops between the two makes it again on --resume.
	movedServices = "service-move"
)

// openServices performs a plan's service range step: NEW's ranges open
// to allocation (a ServiceCIDR of them) and, where the DNS address
// moves, a Service at the new one selects CoreDNS's pods as kube-dns
// does. Done before anything runs NEW's ranges: a pod a restarted
// kubelet starts asks the new DNS address.
func (a *applier) openServices(ctx context.Context, c *ir.Cluster) error {
	o, n := a.cfg.Old.Network, c.Network
	dnsMoves := !slices.Equal(o.DNSServiceIPs, n.DNSServiceIPs)
	if a.cfg.DryRun {
		a.log("  would create the ServiceCIDR %s of %s", change.ServiceRangeName, ir.Join(n.ServiceCIDRs, ", "))
		if dnsMoves {
			a.log("  would create the Service kube-system/%s at %s, beside kube-dns", change.DNSBridgeName, ir.Join(n.DNSServiceIPs, ", "))
		}
		return nil
	}
	if err := a.ensureServiceCIDR(ctx, change.ServiceRangeName, n.ServiceCIDRs); err != nil {
		return err
	}
	if err := a.await(ctx, "the ServiceCIDR "+change.ServiceRangeName+" Ready", func() (bool, string) {
		return a.serviceCIDRReady(ctx, change.ServiceRangeName, n.ServiceCIDRs)
	}); err != nil {
		return err
	}
	if !dnsMoves {
		return nil
	}
	var dns corev1.Service
	if err := a.kube.get(ctx, "/api/v1/namespaces/kube-system/services/kube-dns", &dns); err != nil {
		return fmt.Errorf("the kube-dns Service: %w", err)
	}
	bridge := corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: change.DNSBridgeName, Namespace: "kube-system", Labels: map[string]string{managedByLabel: managedBy}},
		Spec:       corev1.ServiceSpec{Selector: dns.Spec.Selector, Ports: dns.Spec.Ports},
	}
	setClusterIPs(&bridge, n.DNSServiceIPs)
	if err := a.createService(ctx, bridge); err != nil {
		return err
	}
	a.log("  Service kube-system/%s at %s, beside kube-dns at %s", change.DNSBridgeName, ir.Join(n.DNSServiceIPs, ", "), dns.Spec.ClusterIP)
	return a.await(ctx, "CoreDNS's pods ready behind "+change.DNSBridgeName, func() (bool, string) {
		ready, err := a.readyEndpoints(ctx, "kube-system", change.DNSBridgeName)
		if err != nil {
			return false, err.Error()
		}
		return ready > 0, fmt.Sprintf("%d ready endpoints", ready)
	})
}

// moveServices performs a plan's service move step, once every node
// runs NEW's ranges. Each part is asked again on --resume and does
// nothing where it is done.
func (a *applier) moveServices(ctx context.Context, c *ir.Cluster, tree *targets.Tree) error {
	o, n := a.cfg.Old.Network, c.Network
	apiMoves := !slices.Equal(o.FirstServiceIPs, n.FirstServiceIPs)
	dnsMoves := !slices.Equal(o.DNSServiceIPs, n.DNSServiceIPs)
	inNew := func(s corev1.Service) bool {
		for _, ip := range clusterIPs(s) {
			a, err := netip.ParseAddr(ip)
			if err != nil || !slices.ContainsFunc(n.ServiceCIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
				return false
			}
		}
		return true
	}
	// Moved apart: the kubernetes Service (the API servers make it
	// again), kube-dns (NEW's addon, once no pod asks the old address)
	// and the bridges, which are outside NEW's ranges by design.
	special := func(s corev1.Service) bool {
		id := s.Namespace + "/" + s.Name
		return id == "default/kubernetes" || id == "kube-system/kube-dns" || id == "kube-system/"+change.APIBridgeName || id == "kube-system/"+change.DNSBridgeName
	}
	var services corev1.ServiceList
	if err := a.kube.get(ctx, "/api/v1/services", &services); err != nil {
		return err
	}
	var outside []corev1.Service
	for _, s := range services.Items {
		if !special(s) && !inNew(s) {
			outside = append(outside, s)
		}
	}
	if a.cfg.DryRun {
		if apiMoves {
			a.log("  would delete the kubernetes Service (the API servers make it again at %s) and bridge %s to the API servers meanwhile", ir.Join(n.FirstServiceIPs, ", "), ir.Join(o.FirstServiceIPs, ", "))
		}
		a.log("  would delete the ServiceCIDR kubernetes (%s) and recreate %d Services in %s", ir.Join(o.ServiceCIDRs, ", "), len(outside), ir.Join(n.ServiceCIDRs, ", "))
		if apiMoves || dnsMoves {
			a.log("  would restart every pod started before the move")
		}
		if dnsMoves {
			a.log("  would move kube-dns to %s", ir.Join(n.DNSServiceIPs, ", "))
		}
		a.log("  would delete the ServiceCIDR %s once the API servers have made kubernetes of %s", change.ServiceRangeName, ir.Join(n.ServiceCIDRs, ", "))
		return nil
	}
	restart := apiMoves || dnsMoves || len(outside) > 0
	if restart {
		// Refused before anything changes: such a pod would keep the
		// old addresses, and an eviction would end it for good.
		if err := a.refuseBarePods(ctx); err != nil {
			return err
		}
	}
	if apiMoves {
		if err := a.moveAPIService(ctx, c, o.FirstServiceIPs, n.FirstServiceIPs); err != nil {
			return err
		}
	}
	// The old default range allocates nothing more once it is being
	// deleted; it goes when nothing holds an address in it.
	var def networkingv1.ServiceCIDR
	err := a.kube.get(ctx, "/apis/networking.k8s.io/v1/servicecidrs/"+defaultServiceCIDR, &def)
	switch {
	case err == nil && def.DeletionTimestamp == nil && !slices.Equal(def.Spec.CIDRs, ir.Strings(n.ServiceCIDRs)):
		if _, err := a.kube.do(ctx, http.MethodDelete, "/apis/networking.k8s.io/v1/servicecidrs/"+defaultServiceCIDR, "", nil); err != nil && !notFound(err) {
			return fmt.Errorf("deleting the ServiceCIDR kubernetes: %w", err)
		}
		a.log("  ServiceCIDR kubernetes (%s) deleted: it allocates nothing more", strings.Join(def.Spec.CIDRs, ","))
	case err != nil && !notFound(err):
		return err
	}
	if err := a.recreateServices(ctx, outside); err != nil {
		return err
	}
	if restart {
		if err := a.restartPods(ctx); err != nil {
			return err
		}
	}
	if dnsMoves {
		if err := a.moveDNSService(ctx, c, tree); err != nil {
			return err
		}
	}
	for _, bridge := range []string{change.APIBridgeName, change.DNSBridgeName} {
		if err := a.deleteService(ctx, "kube-system", bridge, ""); err != nil {
			return err
		}
	}
	want := ir.Strings(n.ServiceCIDRs)
	if err := a.await(ctx, "the ServiceCIDR kubernetes of "+strings.Join(want, ","), func() (bool, string) {
		return a.serviceCIDRReady(ctx, defaultServiceCIDR, n.ServiceCIDRs)
	}); err != nil {
		return err
	}
	if _, err := a.kube.do(ctx, http.MethodDelete, "/apis/networking.k8s.io/v1/servicecidrs/"+change.ServiceRangeName, "", nil); err != nil && !notFound(err) {
		return fmt.Errorf("deleting the ServiceCIDR %s: %w", change.ServiceRangeName, err)
	}
	if err := a.await(ctx, "the ServiceCIDR "+change.ServiceRangeName+" gone", func() (bool, string) {
		var sc networkingv1.ServiceCIDR
		err := a.kube.get(ctx, "/apis/networking.k8s.io/v1/servicecidrs/"+change.ServiceRangeName, &sc)
		if notFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("still there (%v)", err)
	}); err != nil {
		return err
	}
	return a.await(ctx, "no Service outside "+strings.Join(want, ","), func() (bool, string) {
		var list corev1.ServiceList
		if err := a.kube.get(ctx, "/api/v1/services", &list); err != nil {
			return false, err.Error()
		}
		var left []string
		for _, s := range list.Items {
			if !inNew(s) {
				left = append(left, s.Namespace+"/"+s.Name+" "+strings.Join(clusterIPs(s), ","))
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
}

// moveAPIService has the kubernetes Service made again at NEW's first
// address. Its old address keeps reaching the API servers through a
// bridge Service, with their addresses as endpoints, until the pods
// that were given it restart.
func (a *applier) moveAPIService(ctx context.Context, c *ir.Cluster, old, new []netip.Addr) error {
	var svc corev1.Service
	err := a.kube.get(ctx, "/api/v1/namespaces/default/services/kubernetes", &svc)
	if err != nil && !notFound(err) {
		return err
	}
	if err == nil && svc.Spec.ClusterIP == old[0].String() {
		if err := a.deleteService(ctx, "default", "kubernetes", string(svc.UID)); err != nil {
			return err
		}
		a.log("  kubernetes Service at %s deleted", svc.Spec.ClusterIP)
	}
	var bridge corev1.Service
	switch err := a.kube.get(ctx, "/api/v1/namespaces/kube-system/services/"+change.APIBridgeName, &bridge); {
	case notFound(err):
		b := corev1.Service{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{Name: change.APIBridgeName, Namespace: "kube-system", Labels: map[string]string{managedByLabel: managedBy}},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromInt32(int32(c.Kubernetes.APIServerPort))}}},
		}
		setClusterIPs(&b, old[:1])
		if err := a.createService(ctx, b); err != nil {
			return err
		}
		if err := a.kube.get(ctx, "/api/v1/namespaces/kube-system/services/"+change.APIBridgeName, &bridge); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	if err := a.bridgeEndpoints(ctx, c, bridge, old[0]); err != nil {
		return err
	}
	a.log("  Service kube-system/%s at %s reaches the API servers meanwhile", change.APIBridgeName, old[0])
	return a.await(ctx, "the kubernetes Service at "+new[0].String(), func() (bool, string) {
		var svc corev1.Service
		if err := a.kube.get(ctx, "/api/v1/namespaces/default/services/kubernetes", &svc); err != nil {
			return false, err.Error()
		}
		return svc.Spec.ClusterIP == new[0].String(), "at " + svc.Spec.ClusterIP
	})
}

// bridgeEndpoints gives the API bridge the API servers of c as its
// endpoints, as the API servers do for the kubernetes Service.
func (a *applier) bridgeEndpoints(ctx context.Context, c *ir.Cluster, bridge corev1.Service, family netip.Addr) error {
	port := int32(c.Kubernetes.APIServerPort)
	name, proto := "https", corev1.ProtocolTCP
	ready := true
	slice := discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: change.APIBridgeName, Namespace: "kube-system",
			Labels: map[string]string{discoveryv1.LabelServiceName: change.APIBridgeName, discoveryv1.LabelManagedBy: managedBy, managedByLabel: managedBy},
			// The bridge's endpoints go with it.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: bridge.Name, UID: bridge.UID}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	if family.Is6() {
		slice.AddressType = discoveryv1.AddressTypeIPv6
	}
	for _, nd := range c.Nodes {
		if !nd.Runs(ir.ComponentAPIServer) {
			continue
		}
		for _, ad := range nd.Addresses {
			if ad.Is6() == family.Is6() {
				slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{ad.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
				break
			}
		}
	}
	body, err := json.Marshal(slice)
	if err != nil {
		return err
	}
	_, err = a.kube.do(ctx, http.MethodPost, "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices", "application/json", body)
	if err != nil && !alreadyExists(err) {
		return fmt.Errorf("the endpoints of %s: %w", change.APIBridgeName, err)
	}
	return nil
}

// recreateServices deletes each Service and creates it again without
// its addresses, which NEW's ranges then give. Each is written to the
// work directory before it is deleted, and removed from there once it
// is back: an apply that stops between the two makes the ones it finds
// there again on --resume.
func (a *applier) recreateServices(ctx context.Context, outside []corev1.Service) error {
	dir := filepath.Join(a.cfg.Running.Work, movedServices)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		var s corev1.Service
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("%s: %v", filepath.Join(dir, e.Name()), err)
		}
		if !slices.ContainsFunc(outside, func(o corev1.Service) bool { return o.Namespace == s.Namespace && o.Name == s.Name }) {
			outside = append(outside, s)
		}
	}
	if len(outside) > 0 {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	for _, s := range outside {
		file := filepath.Join(dir, s.Namespace+"."+s.Name+".json")
		data, err := json.Marshal(s)
		if err != nil {
			return err
		}
		if err := writer.PrivateFile(file, data); err != nil {
			return err
		}
		if err := a.deleteService(ctx, s.Namespace, s.Name, string(s.UID)); err != nil {
			return err
		}
		fresh := corev1.Service{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: s.Labels, Annotations: s.Annotations,
				OwnerReferences: s.OwnerReferences, Finalizers: s.Finalizers},
			Spec: s.Spec,
		}
		fresh.Spec.ClusterIP, fresh.Spec.ClusterIPs = "", nil
		if err := a.createService(ctx, fresh); err != nil {
			return err
		}
		if err := os.Remove(file); err != nil {
			return err
		}
		a.log("  Service %s/%s recreated (it was at %s)", s.Namespace, s.Name, strings.Join(clusterIPs(s), ","))
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// refuseBarePods names the running pods no controller would start
// again.
func (a *applier) refuseBarePods(ctx context.Context) error {
	var pods corev1.PodList
	if err := a.kube.get(ctx, "/api/v1/pods", &pods); err != nil {
		return err
	}
	var bare []string
	for _, p := range pods.Items {
		if restartable(p) && len(p.OwnerReferences) == 0 {
			bare = append(bare, p.Namespace+"/"+p.Name)
		}
	}
	if len(bare) > 0 {
		return fmt.Errorf("pods %s have no controller: they would keep the old Service and DNS addresses, and restarting them would end them for good; delete them, or give them a controller, then --resume", strings.Join(bare, ", "))
	}
	return nil
}

// restartable: a pod that runs and is not going, and is not a static
// pod's mirror.
func restartable(p corev1.Pod) bool { return !endedOrMirror(p) && p.DeletionTimestamp == nil }

// restartPods restarts every pod started before now, as the API server
// tells time: those of Deployments, DaemonSets and StatefulSets that
// roll out (kubectl rollout restart), others by eviction, which their
// controller answers with a new pod and which respects
// PodDisruptionBudgets (asked again until the gate's time runs out).
func (a *applier) restartPods(ctx context.Context) error {
	mark, err := a.kube.serverTime(ctx)
	if err != nil {
		return err
	}
	// Creation times are whole seconds: a pod made in the mark's second
	// counts as before it, so the restarts begin in the next.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(1100 * time.Millisecond):
	}
	before := func() ([]corev1.Pod, error) {
		var pods corev1.PodList
		if err := a.kube.get(ctx, "/api/v1/pods", &pods); err != nil {
			return nil, err
		}
		var out []corev1.Pod
		for _, p := range pods.Items {
			if restartable(p) && !p.CreationTimestamp.After(mark) {
				out = append(out, p)
			}
		}
		return out, nil
	}
	pods, err := before()
	if err != nil {
		return err
	}
	rollouts := map[string]bool{}
	evict := map[string]bool{}
	for _, p := range pods {
		owner, err := a.rolloutOf(ctx, p)
		if err != nil {
			return err
		}
		if owner != "" {
			rollouts[owner] = true
		} else {
			evict[p.Namespace+"/"+p.Name] = true
		}
	}
	// As kubectl rollout restart: a new template annotation.
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{"kubectl.kubernetes.io/restartedAt": a.cfg.Now().UTC().Format(time.RFC3339)}}}}})
	if err != nil {
		return err
	}
	for _, owner := range slices.Sorted(maps.Keys(rollouts)) {
		if _, err := a.kube.do(ctx, http.MethodPatch, owner, "application/strategic-merge-patch+json", patch); err != nil {
			return fmt.Errorf("restarting %s: %w", owner, err)
		}
		a.log("  %s restarted", rolloutName(owner))
	}
	if len(evict) > 0 {
		a.log("  evicting %d pods of other controllers", len(evict))
	}
	return a.await(ctx, "no pod started before the restarts; every workload rolled out", func() (bool, string) {
		left, err := before()
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, p := range left {
			names = append(names, p.Namespace+"/"+p.Name)
			if !evict[p.Namespace+"/"+p.Name] {
				continue
			}
			// Refused while a budget forbids it: asked again at the next
			// look, as any other failure is.
			_ = a.evict(ctx, p)
		}
		if len(names) > 0 {
			sort.Strings(names)
			return false, strings.Join(names, ", ") + " still running"
		}
		return a.kube.workloadsReady(ctx)
	})
}

// rolloutOf is the API path of the Deployment, DaemonSet or StatefulSet
// whose rollout restarts p, or "" when p must be evicted (another
// controller's pod, or one whose controller updates only on delete).
func (a *applier) rolloutOf(ctx context.Context, p corev1.Pod) (string, error) {
	ref := metav1.GetControllerOf(&p)
	if ref == nil {
		return "", nil
	}
	ns := "/apis/apps/v1/namespaces/" + url.PathEscape(p.Namespace)
	switch ref.Kind {
	case "ReplicaSet":
		var rs appsv1.ReplicaSet
		if err := a.kube.get(ctx, ns+"/replicasets/"+url.PathEscape(ref.Name), &rs); err != nil {
			if notFound(err) {
				return "", nil
			}
			return "", err
		}
		if d := metav1.GetControllerOf(&rs); d != nil && d.Kind == "Deployment" {
			return ns + "/deployments/" + url.PathEscape(d.Name), nil
		}
	case "DaemonSet":
		var ds appsv1.DaemonSet
		if err := a.kube.get(ctx, ns+"/daemonsets/"+url.PathEscape(ref.Name), &ds); err != nil {
			return "", err
		}
		if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
			return ns + "/daemonsets/" + url.PathEscape(ref.Name), nil
		}
	case "StatefulSet":
		var ss appsv1.StatefulSet
		if err := a.kube.get(ctx, ns+"/statefulsets/"+url.PathEscape(ref.Name), &ss); err != nil {
			return "", err
		}
		if ss.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
			return ns + "/statefulsets/" + url.PathEscape(ref.Name), nil
		}
	}
	return "", nil
}

// rolloutName is "deployment kube-system/coredns" for the API path of a
// rollout.
func rolloutName(p string) string {
	f := strings.Split(strings.TrimPrefix(p, "/apis/apps/v1/namespaces/"), "/")
	if len(f) != 3 {
		return p
	}
	return strings.TrimSuffix(f[1], "s") + " " + f[0] + "/" + f[2]
}

// moveDNSService puts kube-dns at NEW's DNS address, once no pod asks
// the old one: kube-dns and the DNS bridge are deleted and NEW's kube-dns
// applied, back to back, as the bridge held the address.
func (a *applier) moveDNSService(ctx context.Context, c *ir.Cluster, tree *targets.Tree) error {
	var doc []byte
	manifests, err := addonManifests(c, tree, a.cfg.Running.Overrides)
	if err != nil {
		return err
	}
	for _, m := range manifests {
		for _, d := range splitYAML(m.data) {
			var obj manifestObject
			if yaml.Unmarshal(d, &obj) == nil && obj.Kind == "Service" && obj.Metadata.Name == "kube-dns" && obj.Metadata.Namespace == "kube-system" {
				doc = d
			}
		}
	}
	if doc == nil {
		return errors.New("kcompile bug: the state's addons have no kube-dns Service")
	}
	var dns corev1.Service
	err = a.kube.get(ctx, "/api/v1/namespaces/kube-system/services/kube-dns", &dns)
	if err != nil && !notFound(err) {
		return err
	}
	if err == nil && dns.Spec.ClusterIP == c.Network.DNSServiceIP.String() {
		return nil
	}
	if err == nil {
		if err := a.deleteService(ctx, "kube-system", "kube-dns", string(dns.UID)); err != nil {
			return err
		}
	}
	if err := a.deleteService(ctx, "kube-system", change.DNSBridgeName, ""); err != nil {
		return err
	}
	// The bridge's address is free once its deletion is through; asked
	// again while the allocator still holds it.
	if err := a.retryAllocated(ctx, func() error { _, err := a.kube.apply(ctx, "kube-dns", doc); return err }); err != nil {
		return fmt.Errorf("kube-dns at %s: %w", c.Network.DNSServiceIP, err)
	}
	a.log("  kube-dns moved from %s to %s", dns.Spec.ClusterIP, c.Network.DNSServiceIP)
	return nil
}

// createService creates s; one of the same name and addresses already
// there (an apply asked again) is it.
func (a *applier) createService(ctx context.Context, s corev1.Service) error {
	body, err := json.Marshal(s)
	if err != nil {
		return err
	}
	p := "/api/v1/namespaces/" + url.PathEscape(s.Namespace) + "/services"
	err = a.retryAllocated(ctx, func() error {
		_, err := a.kube.do(ctx, http.MethodPost, p, "application/json", body)
		return err
	})
	if alreadyExists(err) {
		var have corev1.Service
		if gerr := a.kube.get(ctx, p+"/"+url.PathEscape(s.Name), &have); gerr != nil {
			return gerr
		}
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == have.Spec.ClusterIP {
			return nil
		}
		return fmt.Errorf("a Service %s/%s is at %s, not %s: delete it, then --resume", s.Namespace, s.Name, have.Spec.ClusterIP, s.Spec.ClusterIP)
	}
	if err != nil {
		return fmt.Errorf("creating the Service %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// retryAllocated asks f again while the API server answers that an
// address is still allocated (a Service just deleted holds it for a
// moment) or that a deleted Service of the name still goes.
func (a *applier) retryAllocated(ctx context.Context, f func() error) error {
	deadline := a.cfg.Now().Add(30 * time.Second)
	for {
		err := f()
		var ae *apiError
		if err == nil || !errors.As(err, &ae) || a.cfg.Now().After(deadline) ||
			!(strings.Contains(ae.msg, "already allocated") || strings.Contains(ae.msg, "being deleted") || (ae.code == http.StatusConflict && strings.Contains(ae.msg, "deletion"))) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deleteService deletes a Service (of that uid, when given) and waits
// until it is gone; one already gone is fine.
func (a *applier) deleteService(ctx context.Context, ns, name, uid string) error {
	p := "/api/v1/namespaces/" + url.PathEscape(ns) + "/services/" + url.PathEscape(name)
	var body []byte
	if uid != "" {
		id := types.UID(uid)
		body, _ = json.Marshal(metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"}, Preconditions: &metav1.Preconditions{UID: &id}})
	}
	if _, err := a.kube.do(ctx, http.MethodDelete, p, "application/json", body); err != nil {
		if notFound(err) {
			return nil
		}
		return fmt.Errorf("deleting the Service %s/%s: %w", ns, name, err)
	}
	return a.await(ctx, "the Service "+ns+"/"+name+" deleted", func() (bool, string) {
		var s corev1.Service
		err := a.kube.get(ctx, p, &s)
		if notFound(err) || (err == nil && uid != "" && string(s.UID) != uid) {
			return true, ""
		}
		return false, "still there"
	})
}

// ensureServiceCIDR creates the ServiceCIDR name of cidrs; one of the
// same ranges already there is it.
func (a *applier) ensureServiceCIDR(ctx context.Context, name string, cidrs []netip.Prefix) error {
	sc := networkingv1.ServiceCIDR{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "ServiceCIDR"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{managedByLabel: managedBy}},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: ir.Strings(cidrs)},
	}
	body, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	_, err = a.kube.do(ctx, http.MethodPost, "/apis/networking.k8s.io/v1/servicecidrs", "application/json", body)
	if alreadyExists(err) {
		var have networkingv1.ServiceCIDR
		if err := a.kube.get(ctx, "/apis/networking.k8s.io/v1/servicecidrs/"+name, &have); err != nil {
			return err
		}
		if slices.Equal(have.Spec.CIDRs, sc.Spec.CIDRs) && have.DeletionTimestamp == nil {
			return nil
		}
		return fmt.Errorf("a ServiceCIDR %s of %s is there: delete it, then --resume", name, strings.Join(have.Spec.CIDRs, ","))
	}
	if err != nil {
		return fmt.Errorf("creating the ServiceCIDR %s: %w", name, err)
	}
	a.log("  ServiceCIDR %s of %s", name, strings.Join(sc.Spec.CIDRs, ","))
	return nil
}

// serviceCIDRReady says whether the ServiceCIDR name is of cidrs, not
// being deleted, and Ready.
func (a *applier) serviceCIDRReady(ctx context.Context, name string, cidrs []netip.Prefix) (bool, string) {
	var sc networkingv1.ServiceCIDR
	if err := a.kube.get(ctx, "/apis/networking.k8s.io/v1/servicecidrs/"+name, &sc); err != nil {
		return false, err.Error()
	}
	if !slices.Equal(sc.Spec.CIDRs, ir.Strings(cidrs)) || sc.DeletionTimestamp != nil {
		state := ""
		if sc.DeletionTimestamp != nil {
			state = ", being deleted"
		}
		return false, "of " + strings.Join(sc.Spec.CIDRs, ",") + state
	}
	for _, cond := range sc.Status.Conditions {
		if cond.Type == networkingv1.ServiceCIDRConditionReady {
			return cond.Status == metav1.ConditionTrue, "Ready " + string(cond.Status) + " " + cond.Message
		}
	}
	return false, "no Ready condition"
}

// readyEndpoints counts the ready endpoints of a Service's slices.
func (a *applier) readyEndpoints(ctx context.Context, ns, service string) (int, error) {
	var slices discoveryv1.EndpointSliceList
	sel := url.QueryEscape(discoveryv1.LabelServiceName + "=" + service)
	if err := a.kube.get(ctx, "/apis/discovery.k8s.io/v1/namespaces/"+url.PathEscape(ns)+"/endpointslices?labelSelector="+sel, &slices); err != nil {
		return 0, err
	}
	n := 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				n++
			}
		}
	}
	return n, nil
}

// setClusterIPs places s at addrs, both families where two are given.
func setClusterIPs(s *corev1.Service, addrs []netip.Addr) {
	s.Spec.ClusterIP = addrs[0].String()
	s.Spec.ClusterIPs = ir.Strings(addrs)
	if len(addrs) > 1 {
		policy := corev1.IPFamilyPolicyRequireDualStack
		s.Spec.IPFamilyPolicy = &policy
	}
}

func clusterIPs(s corev1.Service) []string {
	if s.Spec.Type == corev1.ServiceTypeExternalName || s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil
	}
	if len(s.Spec.ClusterIPs) > 0 {
		return s.Spec.ClusterIPs
	}
	return []string{s.Spec.ClusterIP}
}

func notFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.code == http.StatusNotFound
}

func alreadyExists(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.code == http.StatusConflict && strings.Contains(ae.msg, "already exists")
}
