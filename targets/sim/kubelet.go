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
	"k8s.io/client-go/kubernetes"
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
	client  kubernetes.Interface

	mu      sync.Mutex
	podCIDR netip.Prefix
	nextIP  netip.Addr
	// running are the pods reported Running, by UID.
	running map[types.UID]bool
	// reporting is set while a Ready report is on its way.
	reporting bool
	// lease is the Lease as last written.
	lease  *coordinationv1.Lease
	cancel context.CancelFunc
	done   chan struct{}
}

// leaseSeconds and renewEvery are the kubelet's defaults.
const (
	leaseSeconds = 40
	renewEvery   = 10 * time.Second
)

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

// register creates (or takes over) the Node and reports it Ready.
func (k *kubelet) register(ctx context.Context) error {
	n := k.node()
	created, err := k.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = k.client.CoreV1().Nodes().Get(ctx, k.name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("node %s: register: %w", k.name, err)
	}
	created.Status = n.Status
	created.Status.Conditions = readyConditions(metav1.Now())
	if _, err := k.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s: status: %w", k.name, err)
	}
	return k.renewLease(ctx)
}

func (k *kubelet) renewLease(ctx context.Context) error {
	leases := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	// Like the kubelet, renew the Lease it last wrote, with one request;
	// read it only when that fails.
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
	}
	l, err := leases.Get(ctx, k.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.name, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.name), LeaseDurationSeconds: ptr.To(int32(leaseSeconds)),
				RenewTime: &now},
		}, metav1.CreateOptions{})
		if err == nil {
			k.setLease(l)
		}
		return err
	}
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

// heartbeat renews the Lease until ctx ends, and reports Ready again
// after the node lifecycle controller marked the node unknown (a
// restarted node).
func (k *kubelet) heartbeat(ctx context.Context, done chan struct{}) {
	defer close(done)
	// Spread the renewals of thousands of nodes over the period.
	jitter := time.Duration(rand.Int64N(int64(renewEvery)))
	select {
	case <-ctx.Done():
		return
	case <-time.After(jitter):
	}
	t := time.NewTicker(renewEvery)
	defer t.Stop()
	for {
		_ = k.renewLease(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// stopped reports whether the node's agent is not running.
func (k *kubelet) stopped() bool {
	k.mu.Lock()
	done := k.done
	k.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// start runs the heartbeat until parent ends or stop is called.
func (k *kubelet) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	k.mu.Lock()
	k.cancel, k.done = cancel, done
	k.mu.Unlock()
	go k.heartbeat(ctx, done)
}

// stop ends the heartbeat and waits for it: the node falls silent, as a
// machine that lost power.
func (k *kubelet) stop() {
	k.mu.Lock()
	cancel, done := k.cancel, k.done
	k.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
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
	n, err := k.client.CoreV1().Nodes().Get(ctx, k.name, metav1.GetOptions{})
	if err != nil {
		return
	}
	n.Status.Conditions = readyConditions(metav1.Now())
	_, _ = k.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
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
		err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
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
	if _, err := k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return apierrors.IsNotFound(err)
	}
	k.mu.Lock()
	k.running[pod.UID] = true
	k.mu.Unlock()
	return true
}
