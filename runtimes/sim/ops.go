package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
)

// applyAddons creates the compiled addons with the break-glass
// credentials, as cluster/README says to. The pod network is simulated
// (the kubelets hand out pod addresses), so the CNI manifests are left
// out; the Node label manifest is applied once the nodes registered.
func (s *Sim) applyAddons(ctx context.Context, nodes bool) error {
	var files []targets.File
	for _, f := range s.tree.Files() {
		if !strings.HasPrefix(f.Path, layout.ClusterTree("addons/")) || strings.Contains(f.Path, "-cni-") {
			continue
		}
		if strings.HasSuffix(f.Path, "-nodes.yaml") == nodes {
			files = append(files, f)
		}
	}
	n := 0
	for _, f := range files {
		count, err := s.apply(ctx, f.Path, f.Data)
		if err != nil {
			return err
		}
		n += count
	}
	if n > 0 {
		s.progress("addons applied: %d objects", n)
	}
	return nil
}

// apply creates every object of a manifest with the break-glass
// credentials (existing ones are left alone); Node objects only get
// their labels merged, as the kubelets own them.
func (s *Sim) apply(ctx context.Context, name string, data []byte) (int, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(s.admin)
	if err != nil {
		return 0, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(s.admin)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, doc := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return n, fmt.Errorf("%s: %w", name, err)
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		gvk := u.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return n, fmt.Errorf("%s: %s: %w", name, gvk, err)
		}
		r := dyn.Resource(mapping.Resource)
		var ri dynamic.ResourceInterface = r
		if mapping.Scope.Name() == "namespace" {
			ns := u.GetNamespace()
			if ns == "" {
				ns = metav1.NamespaceDefault
			}
			ri = r.Namespace(ns)
		}
		write := func() error {
			if gvk.Kind == "Node" {
				patch := []byte(fmt.Sprintf(`{"metadata":{"labels":%s}}`, mustJSON(u.GetLabels())))
				_, err := ri.Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
				return err
			}
			// Asked first: a restored cluster has them, and the create
			// of a Service at its address is refused as a taken address
			// before it would be as an existing object.
			if _, err := ri.Get(ctx, u.GetName(), metav1.GetOptions{}); err == nil {
				return nil
			}
			_, err := ri.Create(ctx, u, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}
		if err := retryBusy(ctx, write); err != nil {
			return n, fmt.Errorf("%s: %s %s: %w", name, gvk.Kind, u.GetName(), err)
		}
		n++
	}
	return n, nil
}

func mustJSON(v any) string {
	j, err := json.Marshal(v)
	if err != nil {
		return "{}"
	}
	return string(j)
}

// startProvisioner binds the claims of the spec's StorageClasses to
// volumes it makes up, as their CSI drivers' provisioners would.
func (s *Sim) startProvisioner() {
	classes := map[string]ir.StorageClass{}
	for _, c := range s.cluster.Storage.Classes {
		classes[c.Name] = c
	}
	if len(classes) == 0 {
		return
	}
	factory := s.informers
	factory.Core().V1().PersistentVolumeClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.provision(obj, classes) },
		UpdateFunc: func(_, obj any) { s.provision(obj, classes) },
	})
	factory.Start(s.ctx.Done())
}

func (s *Sim) provision(obj any, classes map[string]ir.StorageClass) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || pvc.Spec.VolumeName != "" || pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.StorageClassName == nil {
		return
	}
	class, ok := classes[*pvc.Spec.StorageClassName]
	if !ok {
		return
	}
	node := pvc.Annotations["volume.kubernetes.io/selected-node"]
	if class.VolumeBindingMode == string(storagev1.VolumeBindingWaitForFirstConsumer) && node == "" {
		return
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + string(pvc.UID),
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": class.Driver}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			StorageClassName:              class.Name,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			VolumeMode:                    pvc.Spec.VolumeMode,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: class.Driver, VolumeHandle: string(pvc.UID)}},
		},
	}
	if node != "" {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}
	}
	_, _ = s.adminCS.CoreV1().PersistentVolumes().Create(s.ctx, pv, metav1.CreateOptions{})
}

// Status is what the simulation reports about its nodes.
type Status struct {
	Nodes, Registered, Ready int
}

// Status counts the pod-running nodes, the registered ones and the Ready
// ones, as the simulation's watch of the API sees them.
func (s *Sim) Status(ctx context.Context) (Status, error) {
	var st Status
	for _, n := range s.cluster.Nodes {
		if n.RunsPods() {
			st.Nodes++
		}
	}
	list, err := s.nodes.List(labels.Everything())
	if err != nil {
		return st, err
	}
	st.Registered = len(list)
	for _, n := range list {
		if nodeReady(n) {
			st.Ready++
		}
	}
	return st, nil
}

// WaitReady waits until every pod-running node is Ready, reporting
// progress every few seconds.
func (s *Sim) WaitReady(ctx context.Context, timeout time.Duration) error {
	start := time.Now()
	var mu sync.Mutex
	var st Status
	stopReport := s.every(progressEvery, func() {
		mu.Lock()
		defer mu.Unlock()
		s.progress("nodes Ready: %d/%d (%s)", st.Ready, st.Nodes, time.Since(start).Round(time.Second))
	})
	defer stopReport()
	err := s.waitFor(ctx, timeout, func() bool {
		now, err := s.Status(ctx)
		mu.Lock()
		st = now
		mu.Unlock()
		return err == nil && now.Ready == now.Nodes
	})
	stopReport()
	if err != nil {
		return fmt.Errorf("%d of %d nodes Ready: %w", st.Ready, st.Nodes, err)
	}
	s.progress("nodes Ready: %d/%d (%s)", st.Ready, st.Nodes, time.Since(start).Round(time.Millisecond))
	return nil
}

// StopNode stops everything that runs on a node: its kubelet, its
// control-plane components and its etcd member.
func (s *Sim) StopNode(name string) error {
	n, ok := s.node(name)
	if !ok {
		return fmt.Errorf("no node %s", name)
	}
	s.mu.Lock()
	k := s.kubelets[name]
	s.mu.Unlock()
	if k != nil && !k.stopped() {
		k.stop()
	}
	// Its keepalived and HAProxy stop with it.
	if n.Runs(ir.ComponentAPIServer) && s.lb != nil {
		s.lb.nodeDown(name)
	}
	for _, comp := range []ir.Component{ir.ComponentScheduler, ir.ComponentControllerManager, ir.ComponentAPIServer} {
		if n.Runs(comp) {
			s.stopComponent(name, comp)
		}
	}
	for _, m := range s.cluster.Etcd.Members {
		if m.Node == name {
			s.mu.Lock()
			_, running := s.etcd[m.Name]
			s.mu.Unlock()
			if running {
				if err := s.StopEtcd(m.Name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// StartNode starts a stopped node again.
func (s *Sim) StartNode(ctx context.Context, name string) error {
	n, ok := s.node(name)
	if !ok {
		return fmt.Errorf("no node %s", name)
	}
	for _, m := range s.cluster.Etcd.Members {
		if m.Node == name {
			if err := s.StartEtcd(m.Name); err != nil {
				return err
			}
		}
	}
	for _, comp := range []ir.Component{ir.ComponentAPIServer, ir.ComponentControllerManager, ir.ComponentScheduler} {
		if n.Runs(comp) {
			if err := s.startComponent(name, comp); err != nil {
				return err
			}
		}
	}
	if n.Runs(ir.ComponentAPIServer) && s.lb != nil {
		s.lb.nodeUp(name)
	}
	s.mu.Lock()
	k := s.kubelets[name]
	s.mu.Unlock()
	if k != nil {
		if err := k.register(ctx); err != nil {
			return err
		}
		s.runKubelet(k)
	}
	return nil
}

func (s *Sim) node(name string) (ir.Node, bool) {
	i, ok := s.index[name]
	if !ok {
		return ir.Node{}, false
	}
	return s.cluster.Nodes[i], true
}

// Stop shuts everything down and waits for it: no listener is left.
func (s *Sim) Stop() {
	start := time.Now()
	s.mu.Lock()
	var kubelets []*kubelet
	for _, k := range s.kubelets {
		kubelets = append(kubelets, k)
	}
	var comps []string
	for key := range s.components {
		comps = append(comps, key)
	}
	s.mu.Unlock()
	for _, k := range kubelets {
		if !k.stopped() {
			k.stop()
		}
	}
	// Schedulers and controller-managers first, API servers next, etcd
	// last: each stops while what it talks to still answers. Within a
	// rank they stop together.
	for r := 0; r <= 1; r++ {
		var wg sync.WaitGroup
		for _, key := range comps {
			if rank(key) != r {
				continue
			}
			node, comp, _ := strings.Cut(key, "/")
			wg.Add(1)
			go func() { defer wg.Done(); s.stopComponent(node, ir.Component(comp)) }()
		}
		wg.Wait()
	}
	s.cancel()
	s.wg.Wait()
	// The whole cluster goes at once, as machines that lose power: a
	// member does not hand its leadership over first (to a member that
	// is stopping too, which waits out etcd's request timeout).
	s.mu.Lock()
	members := maps.Clone(s.etcd)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for m, e := range members {
		wg.Go(func() {
			e.Server.HardStop()
			_ = s.StopEtcd(m)
		})
	}
	wg.Wait()
	s.progress("stopped (%s)", time.Since(start).Round(time.Millisecond))
}

func rank(key string) int {
	switch {
	case strings.HasSuffix(key, string(ir.ComponentAPIServer)):
		return 1
	}
	return 0
}

// AdminConfig is a client configuration with the break-glass
// (system:masters) credentials, through the load balancer.
func (s *Sim) AdminConfig() *rest.Config { return rest.CopyConfig(s.admin) }

// NodeConfig is a client configuration with a node's own compiled
// kubelet credentials.
func (s *Sim) NodeConfig(node string) (*rest.Config, error) {
	kc, ok := s.tree.Get(layout.NodeTree(node, layout.KubeletKubeconfig))
	if !ok {
		return nil, fmt.Errorf("node %s has no kubelet credentials", node)
	}
	return clientcmd.RESTConfigFromKubeConfig(kc.Data)
}

// retryBusy runs write until it succeeds, fails for a reason other than
// a busy control plane, or a minute passes. An overloaded API server
// answers with timeouts (etcd's "request timed out" among them) and
// 429s; kubectl would be retried by its user, the simulation retries.
func retryBusy(ctx context.Context, write func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := write()
		busy := apierrors.IsInternalError(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
			apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err)
		if !busy || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}
