package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"
)

// kubelet is a simulated node agent. It does what a kubelet does to the
// API, with the node's own compiled credentials: it registers its Node
// with the labels and taints of its compiled flags and the spec's
// capacity, holds its Lease, reports Ready, runs the pods bound to it
// virtually (Running at once, addresses from the node's pod CIDR) and
// removes them when they are deleted.
type kubelet struct {
	name    string
	addr    netip.Addr
	version string
	labels  map[string]string
	taints  []corev1.Taint
	cpu     int
	memory  string
	maxPods int
	// core and coordination are the only API groups a kubelet writes;
	// a whole clientset per node would hold some fifty REST clients.
	core         corev1client.CoreV1Interface
	coordination coordinationv1client.CoordinationV1Interface

	mu      sync.Mutex
	podCIDR netip.Prefix
	nextIP  netip.Addr
	// running are the pods reported Running, by UID.
	running map[types.UID]bool
	// reporting is set while a Ready report is on its way.
	reporting bool
	// lease is the Lease as last written; renewEvery is how often.
	lease      *coordinationv1.Lease
	renewEvery time.Duration
	// active is set while the node's agent runs; timer renews its Lease
	// and cancel ends its requests. A kubelet is no goroutine while it
	// waits: 10,000 idle goroutines would cost more than the kubelets.
	active bool
	timer  *time.Timer
	cancel context.CancelFunc
	// beat is held while a renewal runs, so that stop can wait for it.
	beat sync.Mutex
	// closeIdle closes the agent's idle connection to the API.
	closeIdle func()
}

// leaseSeconds is the kubelet's default Lease duration; it renews the
// Lease every quarter of it.
const (
	leaseSeconds = 40
	kubeletRenew = leaseSeconds * time.Second / 4
)

// renewInterval is how often the simulated kubelets of a fleet renew
// their Leases. It is the kubelet's interval while the fleet's renewals
// fit the budget one process with the whole control plane sustains; a
// larger fleet renews less often, but always well within the grace
// period after which the node lifecycle controller marks a node
// NotReady. Measured on a 2-core machine: three to five real API
// servers over a five-member etcd sustain about 230 writes/s, so 5,000
// kubelets at the real 10 s (500/s) would never leave room for anything
// else and the nodes would go NotReady in turn.
func renewInterval(nodes int, grace time.Duration) time.Duration {
	const budget = 150 // renewals per second
	d := time.Duration(nodes) * time.Second / budget
	return min(max(d, kubeletRenew), grace*3/5)
}

// parseKubeletFlags reads the labels and taints a kubelet registers with.
func parseKubeletFlags(flags map[string]string) (map[string]string, []corev1.Taint, error) {
	labels := map[string]string{}
	for _, kv := range strings.Split(flags["node-labels"], ",") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		labels[k] = v
	}
	var taints []corev1.Taint
	for _, t := range strings.Split(flags["register-with-taints"], ",") {
		if t == "" {
			continue
		}
		kv, effect, ok := strings.Cut(t, ":")
		if !ok {
			return nil, nil, fmt.Errorf("taint %q has no effect", t)
		}
		k, v, _ := strings.Cut(kv, "=")
		taints = append(taints, corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(effect)})
	}
	return labels, taints, nil
}

func (k *kubelet) node() *corev1.Node {
	labels := map[string]string{"kubernetes.io/hostname": k.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
	for key, v := range k.labels {
		labels[key] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(k.cpu), resource.DecimalSI),
		corev1.ResourceMemory:           resource.MustParse(k.memory),
		corev1.ResourcePods:             *resource.NewQuantity(int64(k.maxPods), resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: k.name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: k.taints},
		Status: corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity,
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: k.addr.String()}, {Type: corev1.NodeHostName, Address: k.name}},
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v" + k.version, OperatingSystem: "linux", Architecture: "amd64",
				ContainerRuntimeVersion: "sim://1", OSImage: "kcompile sim"},
		},
	}
}

func readyConditions(now metav1.Time) []corev1.NodeCondition {
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
	}
}

// register creates the Node Ready, or takes over the one a previous run
// of the node left and reports it Ready, then takes the node's Lease.
// A new Node carries its status in the create (the API keeps a Node's
// status on create), one request where the kubelet spends two: 5,000
// nodes register in one burst.
func (k *kubelet) register(ctx context.Context) error {
	n := k.node()
	n.Status.Conditions = readyConditions(metav1.Now())
	_, err := k.core.Nodes().Create(ctx, n, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var old *corev1.Node
		if old, err = k.core.Nodes().Get(ctx, k.name, metav1.GetOptions{}); err == nil {
			old.Status = n.Status
			_, err = k.core.Nodes().UpdateStatus(ctx, old, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("node %s: register: %w", k.name, err)
	}
	return k.renewLease(ctx)
}

func (k *kubelet) renewLease(ctx context.Context) error {
	leases := k.coordination.Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	// Like the kubelet, renew the Lease it last wrote, with one request;
	// read it only when that fails. A node without one creates it.
	k.mu.Lock()
	l := k.lease
	k.mu.Unlock()
	if l != nil {
		l = l.DeepCopy()
		l.Spec.RenewTime = &now
		if updated, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
			k.setLease(updated)
			return nil
		}
	} else {
		created, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.name, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.name), LeaseDurationSeconds: ptr.To(int32(leaseSeconds)),
				RenewTime: &now},
		}, metav1.CreateOptions{})
		if err == nil {
			k.setLease(created)
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	l, err := leases.Get(ctx, k.name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &now
	updated, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	if err == nil {
		k.setLease(updated)
	}
	return err
}

func (k *kubelet) setLease(l *coordinationv1.Lease) {
	k.mu.Lock()
	k.lease = l
	k.mu.Unlock()
}

// stopped reports whether the node's agent is not running.
func (k *kubelet) stopped() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.active
}

// start runs the heartbeat until parent ends or stop is called.
// register has just written the Lease: the first renewal is a period
// later, with a little jitter so that nodes registered together drift
// apart.
func (k *kubelet) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	jitter := time.Duration(rand.Int64N(int64(k.renewEvery/10) + 1))
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.active {
		// Started again while running (a node started that was not
		// stopped): one heartbeat, the new one.
		k.timer.Stop()
		k.cancel()
	}
	k.active, k.cancel = true, cancel
	k.timer = time.AfterFunc(k.renewEvery+jitter, func() { k.heartbeat(ctx) })
}

// heartbeat renews the Lease once and sets the next renewal.
func (k *kubelet) heartbeat(ctx context.Context) {
	k.beat.Lock()
	defer k.beat.Unlock()
	if k.stopped() || ctx.Err() != nil {
		return
	}
	_ = k.renewLease(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.active {
		k.timer.Reset(k.renewEvery)
	}
}

// stop ends the heartbeat and waits for a renewal on its way: the node
// falls silent, as a machine that lost power, and its connection closes.
func (k *kubelet) stop() {
	k.mu.Lock()
	if !k.active {
		k.mu.Unlock()
		return
	}
	k.active = false
	k.timer.Stop()
	k.cancel()
	k.mu.Unlock()
	k.beat.Lock()
	//lint:ignore SA2001 waiting for a renewal in flight is the point.
	k.beat.Unlock()
	if k.closeIdle != nil {
		k.closeIdle()
	}
}

// reportReady sets the Node's conditions back to Ready, once at a time.
func (k *kubelet) reportReady(ctx context.Context) {
	k.mu.Lock()
	if k.reporting {
		k.mu.Unlock()
		return
	}
	k.reporting = true
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.reporting = false
		k.mu.Unlock()
	}()
	n, err := k.core.Nodes().Get(ctx, k.name, metav1.GetOptions{})
	if err != nil {
		return
	}
	n.Status.Conditions = readyConditions(metav1.Now())
	_, _ = k.core.Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
}

// setPodCIDR records the range the controller-manager allocated.
func (k *kubelet) setPodCIDR(cidr string) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.podCIDR != p {
		k.podCIDR = p
		k.nextIP = p.Addr().Next()
	}
}

// podIP hands out the next address of the node's pod range.
func (k *kubelet) podIP() (netip.Addr, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.podCIDR.IsValid() {
		return netip.Addr{}, false
	}
	k.nextIP = k.nextIP.Next()
	if !k.podCIDR.Contains(k.nextIP) {
		k.nextIP = k.podCIDR.Addr().Next().Next()
	}
	return k.nextIP, true
}

// runPod reports a pod bound to this node Running, or removes a deleted
// one. It returns false when it must be retried (no pod range yet).
func (k *kubelet) runPod(ctx context.Context, pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		err := k.core.Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		k.mu.Lock()
		delete(k.running, pod.UID)
		k.mu.Unlock()
		return err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err)
	}
	k.mu.Lock()
	done := k.running[pod.UID]
	k.mu.Unlock()
	if done || pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	ip := k.addr
	if !pod.Spec.HostNetwork {
		var ok bool
		if ip, ok = k.podIP(); !ok {
			return false
		}
	}
	now := metav1.Now()
	p := pod.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP = k.addr.String()
	p.Status.HostIPs = []corev1.HostIP{{IP: k.addr.String()}}
	p.Status.PodIP = ip.String()
	p.Status.PodIPs = []corev1.PodIP{{IP: ip.String()}}
	p.Status.StartTime = &now
	p.Status.Conditions = nil
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	p.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "sim://" + c.Image, ContainerID: "sim://" + string(pod.UID) + "/" + c.Name,
			Ready: true, Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	if _, err := k.core.Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return apierrors.IsNotFound(err)
	}
	k.mu.Lock()
	k.running[pod.UID] = true
	k.mu.Unlock()
	return true
}
