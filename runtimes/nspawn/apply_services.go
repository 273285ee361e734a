package nspawn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/writer"
	change "github.com/kcompile/kcompile/plan"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/systemd"
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
	// each Service a move hands over, as it was, from before its first
	// change until its stand-ins go: an apply that stops in between goes
	// on from it on --resume.
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
//
// A Service cannot change its address; deleted and made again, its name
// would go unanswered in between, and CoreDNS would hand out its old
// address, which then reaches nothing, for as long as it keeps answers.
// So each Service outside NEW's ranges is handed over instead:
//  1. a stand-in of it (its selector, or a copy of its endpoints) takes
//     an address of NEW's ranges;
//  2. it becomes an ExternalName of the stand-in, which frees its
//     address and has CoreDNS answer its name with the stand-in's: one
//     watch brings CoreDNS both changes, in order, so it never sees the
//     name point at nothing;
//  3. a second stand-in takes the freed address, reaching the same
//     endpoints from there, for the pods given it and the answers that
//     named it;
//  4. it takes its place in NEW's ranges again as it was;
//  5. once the pods started before have restarted and no answer
//     CoreDNS gave before the last change can be kept any more, the
//     stand-ins go.
func (a *applier) moveServices(ctx context.Context, c *ir.Cluster, tree *targets.Tree) error {
	o, n := a.cfg.Old.Network, c.Network
	apiMoves := !slices.Equal(o.FirstServiceIPs, n.FirstServiceIPs)
	dnsMoves := !slices.Equal(o.DNSServiceIPs, n.DNSServiceIPs)
	inNew := func(s corev1.Service) bool { return inRanges(s, n.ServiceCIDRs) }
	if a.cfg.DryRun {
		a.log("  would hand over to NEW's ranges (%s) every Service outside them, through a stand-in there that answers its name and one at its old address that reaches its endpoints until the pods restart", ir.Join(n.ServiceCIDRs, ", "))
		if apiMoves {
			a.log("  would put the kubernetes Service at %s", ir.Join(n.FirstServiceIPs[:1], ", "))
		}
		a.log("  would delete the ServiceCIDR kubernetes (%s), which then allocates nothing more", ir.Join(o.ServiceCIDRs, ", "))
		a.log("  would restart every pod started before the move")
		if dnsMoves {
			a.log("  would move kube-dns to %s", ir.Join(n.DNSServiceIPs, ", "))
		}
		a.log("  would delete the stand-ins once no pod or cached answer holds an old address, and the ServiceCIDR %s once the API servers have made kubernetes of %s", change.ServiceRangeName, ir.Join(n.ServiceCIDRs, ", "))
		return nil
	}
	movers, err := a.movers(ctx, n, apiMoves)
	if err != nil {
		return err
	}
	restart := apiMoves || dnsMoves || len(movers) > 0
	if restart {
		// Refused before anything changes: such a pod would keep the
		// old addresses, and an eviction would end it for good.
		if err := a.refuseBarePods(ctx); err != nil {
			return err
		}
	}
	changed := time.Time{}
	if len(movers) > 0 {
		if err := a.handOver(ctx, c, movers); err != nil {
			return err
		}
		// What is not known (a --resume) counts as just now.
		changed = a.cfg.Now()
	}
	if err := a.endDefaultRange(ctx, n); err != nil {
		return err
	}
	for _, m := range movers {
		if err := a.settle(ctx, m, n); err != nil {
			return err
		}
		changed = a.cfg.Now()
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
	if len(movers) > 0 {
		expire := changed.Add(systemd.DNSAnswerSeconds * time.Second)
		if err := a.await(ctx, "no answer CoreDNS gave before the last move is kept any more", func() (bool, string) {
			return !a.cfg.Now().Before(expire), "until " + expire.UTC().Format(time.TimeOnly)
		}); err != nil {
			return err
		}
	}
	for _, m := range movers {
		if err := a.dropStandIns(ctx, m); err != nil {
			return err
		}
	}
	if err := a.deleteOwn(ctx, "kube-system", change.DNSBridgeName); err != nil {
		return err
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

// mover is a Service a move hands over to NEW's ranges.
type mover struct {
	// was is the Service as it was before the move: kept in the work
	// directory from before its first change until its stand-ins go, so
	// that an apply that stops in between goes on from it on --resume.
	was corev1.Service
	// at is where it goes (the kubernetes Service, at NEW's first
	// address); nil where NEW's ranges allocate.
	at []netip.Addr
}

func (m mover) id() string   { return m.was.Namespace + "/" + m.was.Name }
func (m mover) file() string { return m.was.Namespace + "." + m.was.Name + ".json" }

// standIn names the Service apply makes for s while it moves: "next" in
// NEW's ranges, "previous" at s's old address. Named for s, so that a
// --resume finds them.
func standIn(s corev1.Service, which string) string {
	sum := sha256.Sum256([]byte(s.Namespace + "/" + s.Name))
	return "kcompile-" + which + "-" + hex.EncodeToString(sum[:5])
}

// movers are the Services to hand over: those kept in the work directory
// (a move begun), then the kubernetes Service where its address moves,
// then every other Service outside NEW's ranges but kube-dns, which
// moves with NEW's addon, and apply's own.
func (a *applier) movers(ctx context.Context, n ir.Network, apiMoves bool) ([]mover, error) {
	dir := filepath.Join(a.cfg.Running.Work, movedServices)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var out []mover
	add := func(s corev1.Service) {
		if slices.ContainsFunc(out, func(m mover) bool { return m.was.Namespace == s.Namespace && m.was.Name == s.Name }) {
			return
		}
		m := mover{was: s}
		if s.Namespace == "default" && s.Name == "kubernetes" {
			m.at = n.FirstServiceIPs[:1]
		}
		out = append(out, m)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		var s corev1.Service
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, fmt.Errorf("%s: %v", filepath.Join(dir, e.Name()), err)
		}
		add(s)
	}
	var services corev1.ServiceList
	if err := a.kube.get(ctx, "/api/v1/services", &services); err != nil {
		return nil, err
	}
	// The kubernetes Service first, the others in the API's order.
	sort.SliceStable(services.Items, func(i, j int) bool {
		si, sj := services.Items[i], services.Items[j]
		ki, kj := si.Namespace == "default" && si.Name == "kubernetes", sj.Namespace == "default" && sj.Name == "kubernetes"
		if ki != kj {
			return ki
		}
		return si.Namespace+"/"+si.Name < sj.Namespace+"/"+sj.Name
	})
	for _, s := range services.Items {
		id := s.Namespace + "/" + s.Name
		switch {
		case id == "default/kubernetes":
			if apiMoves && !inRanges(s, n.ServiceCIDRs) {
				add(s)
			}
		case id == "kube-system/kube-dns", s.Labels[managedByLabel] == managedBy && strings.HasPrefix(s.Name, "kcompile-"):
		case !inRanges(s, n.ServiceCIDRs):
			add(s)
		}
	}
	return out, nil
}

// handOver takes each mover through steps 1 to 4 but the last (see
// moveServices), one step for all at a time: the stand-ins in NEW's
// ranges and their endpoints, before any name points at them.
func (a *applier) handOver(ctx context.Context, c *ir.Cluster, movers []mover) error {
	dir := filepath.Join(a.cfg.Running.Work, movedServices)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	live := map[string]corev1.Service{}
	var waits []string
	for _, m := range movers {
		s, err := a.service(ctx, m.was.Namespace, m.was.Name)
		if notFound(err) {
			// Deleted meanwhile, by its owner: not made again.
			continue
		}
		if err != nil {
			return err
		}
		live[m.id()] = s
		if moved(s, m, c.Network) {
			continue
		}
		if s.Spec.Type == corev1.ServiceTypeExternalName && s.Spec.ExternalName != a.target(m, c) {
			return fmt.Errorf("the Service %s became an ExternalName of %s while it moved: make it as %s keeps it, then --resume", m.id(), s.Spec.ExternalName, filepath.Join(dir, m.file()))
		}
		next, err := a.ensureStandIn(ctx, m.was, standIn(m.was, "next"), nil)
		if err != nil {
			return err
		}
		if n, err := a.readyEndpoints(ctx, m.was.Namespace, m.was.Name); err != nil {
			return err
		} else if n > 0 {
			waits = append(waits, next.Namespace+"/"+next.Name)
		}
	}
	if err := a.await(ctx, "the stand-ins in NEW's ranges reach their Services' endpoints", func() (bool, string) {
		var empty []string
		for _, id := range waits {
			ns, name, _ := strings.Cut(id, "/")
			if n, err := a.readyEndpoints(ctx, ns, name); err != nil || n == 0 {
				empty = append(empty, id)
			}
		}
		return len(empty) == 0, strings.Join(empty, ", ") + " without ready endpoints"
	}); err != nil {
		return err
	}
	for _, m := range movers {
		s, ok := live[m.id()]
		if !ok || moved(s, m, c.Network) {
			continue
		}
		if s.Spec.Type != corev1.ServiceTypeExternalName {
			data, err := json.Marshal(m.was)
			if err != nil {
				return err
			}
			if err := writer.PrivateFile(filepath.Join(dir, m.file()), data); err != nil {
				return err
			}
			target := a.target(m, c)
			if err := a.updateService(ctx, m.was.Namespace, m.was.Name, func(s *corev1.Service) {
				s.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: target,
					Selector: s.Spec.Selector, Ports: withoutNodePorts(s.Spec.Ports), PublishNotReadyAddresses: s.Spec.PublishNotReadyAddresses}
			}); err != nil {
				return err
			}
			a.log("  Service %s at %s answers as %s while it moves", m.id(), strings.Join(clusterIPs(m.was), ","), target)
		}
		prev := standIn(m.was, "previous")
		if _, err := a.ensureStandIn(ctx, m.was, prev, clusterIPs(m.was)); err != nil {
			return err
		}
		a.log("  Service %s/%s at %s reaches %s's endpoints meanwhile", m.was.Namespace, prev, strings.Join(clusterIPs(m.was), ","), m.id())
	}
	return nil
}

// target is the name a mover answers as while it moves: its stand-in's.
func (a *applier) target(m mover, c *ir.Cluster) string {
	return standIn(m.was, "next") + "." + m.was.Namespace + ".svc." + c.Network.Domain
}

// moved: s is where m goes, no longer an ExternalName.
func moved(s corev1.Service, m mover, n ir.Network) bool {
	if s.Spec.Type == corev1.ServiceTypeExternalName || len(clusterIPs(s)) == 0 {
		return false
	}
	if m.at != nil {
		return slices.Equal(clusterIPs(s)[:len(m.at)], ir.Strings(m.at))
	}
	return inRanges(s, n.ServiceCIDRs)
}

// settle gives a mover its place in NEW's ranges again, as it was.
func (a *applier) settle(ctx context.Context, m mover, n ir.Network) error {
	s, err := a.service(ctx, m.was.Namespace, m.was.Name)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if moved(s, m, n) {
		return nil
	}
	err = a.retryAllocated(ctx, func() error {
		return a.updateService(ctx, m.was.Namespace, m.was.Name, func(s *corev1.Service) {
			s.Spec = *m.was.Spec.DeepCopy()
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil
			if m.at != nil {
				setClusterIPs(s, m.at)
			}
		})
	})
	if err != nil {
		return err
	}
	s, err = a.service(ctx, m.was.Namespace, m.was.Name)
	if err != nil {
		return err
	}
	if !moved(s, m, n) {
		return fmt.Errorf("the Service %s was given %s, outside %s", m.id(), strings.Join(clusterIPs(s), ","), ir.Join(n.ServiceCIDRs, ","))
	}
	a.log("  Service %s moved from %s to %s", m.id(), strings.Join(clusterIPs(m.was), ","), strings.Join(clusterIPs(s), ","))
	return nil
}

// dropStandIns deletes a mover's stand-ins and forgets it.
func (a *applier) dropStandIns(ctx context.Context, m mover) error {
	for _, which := range []string{"next", "previous"} {
		if err := a.deleteOwn(ctx, m.was.Namespace, standIn(m.was, which)); err != nil {
			return err
		}
	}
	err := os.Remove(filepath.Join(a.cfg.Running.Work, movedServices, m.file()))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	err = os.Remove(filepath.Join(a.cfg.Running.Work, movedServices))
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		return err
	}
	return nil
}

// endDefaultRange deletes the API servers' default ServiceCIDR of OLD's
// ranges: it allocates nothing more once being deleted, and goes when
// nothing holds an address in it. The API servers make it again of
// their flags, NEW's ranges, then.
func (a *applier) endDefaultRange(ctx context.Context, n ir.Network) error {
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
	return nil
}

// ensureStandIn makes the Service name in s's namespace that reaches
// s's endpoints: through s's selector, or a copy of its endpoint slices
// where it has none (the kubernetes Service's are the API servers'). At
// addrs, or where the ranges allocate.
func (a *applier) ensureStandIn(ctx context.Context, s corev1.Service, name string, addrs []string) (corev1.Service, error) {
	st := corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: map[string]string{managedByLabel: managedBy}},
		Spec: corev1.ServiceSpec{Selector: s.Spec.Selector, Ports: withoutNodePorts(s.Spec.Ports),
			PublishNotReadyAddresses: s.Spec.PublishNotReadyAddresses,
			IPFamilyPolicy:           s.Spec.IPFamilyPolicy, IPFamilies: s.Spec.IPFamilies,
			ClusterIPs: addrs},
	}
	if len(addrs) > 0 {
		st.Spec.ClusterIP = addrs[0]
	}
	if err := a.createService(ctx, st); err != nil {
		return corev1.Service{}, err
	}
	have, err := a.service(ctx, s.Namespace, name)
	if err != nil {
		return corev1.Service{}, err
	}
	if have.Labels[managedByLabel] != managedBy {
		return corev1.Service{}, fmt.Errorf("a Service %s/%s is there that kcompile did not make: rename it, then --resume", s.Namespace, name)
	}
	if s.Spec.Selector != nil {
		return have, nil
	}
	slices, err := a.endpointSlices(ctx, s.Namespace, s.Name)
	if err != nil {
		return corev1.Service{}, err
	}
	sort.Slice(slices.Items, func(i, j int) bool { return slices.Items[i].Name < slices.Items[j].Name })
	for i, sl := range slices.Items {
		cp := discoveryv1.EndpointSlice{
			TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: s.Namespace,
				Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: managedBy, managedByLabel: managedBy},
				// The copies go with their Service.
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: name, UID: have.UID}}},
			AddressType: sl.AddressType, Endpoints: sl.Endpoints, Ports: sl.Ports,
		}
		body, err := json.Marshal(cp)
		if err != nil {
			return corev1.Service{}, err
		}
		_, err = a.kube.do(ctx, http.MethodPost, "/apis/discovery.k8s.io/v1/namespaces/"+url.PathEscape(s.Namespace)+"/endpointslices", "application/json", body)
		if err != nil && !alreadyExists(err) {
			return corev1.Service{}, fmt.Errorf("the endpoints of %s/%s: %w", s.Namespace, name, err)
		}
	}
	return have, nil
}

// servicePath is the API path of a namespace's Service name, or of its
// Services where name is "".
func servicePath(ns, name string) string {
	p := "/api/v1/namespaces/" + url.PathEscape(ns) + "/services"
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

// service reads a Service.
func (a *applier) service(ctx context.Context, ns, name string) (corev1.Service, error) {
	var s corev1.Service
	err := a.kube.get(ctx, servicePath(ns, name), &s)
	return s, err
}

// updateService changes a Service by f and writes it back, read again
// and changed again where another writer came between.
func (a *applier) updateService(ctx context.Context, ns, name string, f func(*corev1.Service)) error {
	p := servicePath(ns, name)
	for try := 0; ; try++ {
		s, err := a.service(ctx, ns, name)
		if err != nil {
			return err
		}
		f(&s)
		body, err := json.Marshal(s)
		if err != nil {
			return err
		}
		_, err = a.kube.do(ctx, http.MethodPut, p, "application/json", body)
		var ae *apiError
		if err != nil && errors.As(err, &ae) && ae.code == http.StatusConflict && !strings.Contains(ae.msg, "already allocated") && try < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("changing the Service %s/%s: %w", ns, name, err)
		}
		return nil
	}
}

// withoutNodePorts: ports as a Service of type ClusterIP or
// ExternalName may have them.
func withoutNodePorts(ports []corev1.ServicePort) []corev1.ServicePort {
	out := slices.Clone(ports)
	for i := range out {
		out[i].NodePort = 0
	}
	return out
}

// inRanges: every address of s (none for a headless or ExternalName
// Service) is in one of ranges.
func inRanges(s corev1.Service, ranges []netip.Prefix) bool {
	for _, ip := range clusterIPs(s) {
		a, err := netip.ParseAddr(ip)
		if err != nil || !slices.ContainsFunc(ranges, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return false
		}
	}
	return true
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
	if err := a.deleteOwn(ctx, "kube-system", change.DNSBridgeName); err != nil {
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
	p := servicePath(s.Namespace, "")
	err = a.retryAllocated(ctx, func() error {
		_, err := a.kube.do(ctx, http.MethodPost, p, "application/json", body)
		return err
	})
	if alreadyExists(err) {
		var have corev1.Service
		if gerr := a.kube.get(ctx, servicePath(s.Namespace, s.Name), &have); gerr != nil {
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
	p := servicePath(ns, name)
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

// deleteOwn deletes a Service apply made (its label says so), and no
// other of that name; one already gone is fine.
func (a *applier) deleteOwn(ctx context.Context, ns, name string) error {
	s, err := a.service(ctx, ns, name)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if s.Labels[managedByLabel] != managedBy {
		return fmt.Errorf("the Service %s/%s is not kcompile's (no %s: %s): kcompile leaves it; rename or delete it, then --resume", ns, name, managedByLabel, managedBy)
	}
	return a.deleteService(ctx, ns, name, string(s.UID))
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

// endpointSlices are a Service's EndpointSlices.
func (a *applier) endpointSlices(ctx context.Context, ns, service string) (discoveryv1.EndpointSliceList, error) {
	var slices discoveryv1.EndpointSliceList
	sel := url.QueryEscape(discoveryv1.LabelServiceName + "=" + service)
	err := a.kube.get(ctx, "/apis/discovery.k8s.io/v1/namespaces/"+url.PathEscape(ns)+"/endpointslices?labelSelector="+sel, &slices)
	return slices, err
}

// readyEndpoints counts the ready endpoints of a Service's slices.
func (a *applier) readyEndpoints(ctx context.Context, ns, service string) (int, error) {
	slices, err := a.endpointSlices(ctx, ns, service)
	if err != nil {
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
