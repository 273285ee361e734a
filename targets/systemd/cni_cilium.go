package systemd

import (
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
)

// ciliumSecretsNamespace is where the chart lets Cilium sync the TLS
// secrets that L7 policies reference (policy-secrets-namespace).
const ciliumSecretsNamespace = "cilium-secrets"

// ciliumOverhead is what Cilium subtracts from its configured MTU, the
// underlying network's, for the routes pods use (pkg/mtu: 50 bytes of
// tunnel, 80 of WireGuard, both when WireGuard runs over a tunnel).
func ciliumOverhead(cni ir.CNI) int {
	o := 0
	if cni.Mode != "native" {
		o += 50
	}
	if cni.WireGuard {
		o += 80
	}
	return o
}

// ciliumMTU is cilium-config's mtu: the chart's MTU value is the
// underlying network's MTU, from which Cilium derives the pod route MTU
// itself. It is the one that gives pods the spec's pod MTU, but never more
// than the nodes' MTU.
func ciliumMTU(c *ir.Cluster) int {
	mtu := c.Network.PodMTU + ciliumOverhead(c.Network.CNI)
	if c.Network.MTU > 0 && mtu > c.Network.MTU {
		mtu = c.Network.MTU
	}
	return mtu
}

// ciliumConfig is the cilium-config ConfigMap's data as the 1.18 chart
// renders it with the spec's values: ipam.mode=kubernetes (the controller
// manager allocates each node's pod CIDRs), routingMode and tunnelProtocol
// from network.cni.mode, kubeProxyReplacement, ipv4/ipv6.enabled, MTU,
// encryption.type=wireguard, cni.customConf=true (kcompile writes the CNI
// configuration on every node), hubble.enabled=false and
// envoy.enabled=false (the agent runs its embedded proxy). Keys the chart
// renders empty are left out: the agent defaults them the same way.
func ciliumConfig(c *ir.Cluster) map[string]string {
	cni := c.Network.CNI
	v4, v6 := cniPodCIDRsByFamily(c)
	b := strconv.FormatBool
	routing, tunnel := "tunnel", cni.Mode
	if cni.Mode == "native" {
		routing = "native"
	}
	if tunnel != "vxlan" && tunnel != "geneve" {
		tunnel = "vxlan" // the chart's default, rendered in native mode too
	}
	operatorAPI := "127.0.0.1:9234"
	if !v4.IsValid() {
		operatorAPI = "[::1]:9234"
	}
	kv := [][2]string{
		{"identity-allocation-mode", "crd"},
		{"identity-heartbeat-timeout", "30m0s"},
		{"identity-gc-interval", "15m0s"},
		{"cilium-endpoint-gc-interval", "5m0s"},
		{"nodes-gc-interval", "5m0s"},
		{"debug", "false"},
		{"metrics-sampling-interval", "5m"},
		{"enable-policy", "default"},
		{"proxy-prometheus-port", "9964"},
		{"operator-prometheus-serve-addr", ":9963"},
		{"enable-metrics", "true"},
		{"enable-policy-secrets-sync", "true"},
		{"policy-secrets-only-from-secrets-namespace", "true"},
		{"policy-secrets-namespace", ciliumSecretsNamespace},
		{"enable-ipv4", b(v4.IsValid())},
		{"enable-ipv6", b(v6.IsValid())},
		{"custom-cni-conf", "true"},
		{"enable-bpf-clock-probe", "false"},
		{"monitor-aggregation", "medium"},
		{"monitor-aggregation-interval", "5s"},
		{"monitor-aggregation-flags", "all"},
		{"bpf-map-dynamic-size-ratio", "0.0025"},
		{"bpf-policy-map-max", "16384"},
		{"bpf-policy-stats-map-max", "65536"},
		{"bpf-lb-map-max", "65536"},
		{"bpf-lb-external-clusterip", "false"},
		{"bpf-lb-source-range-all-types", "false"},
		{"bpf-lb-algorithm-annotation", "false"},
		{"bpf-lb-mode-annotation", "false"},
		{"bpf-distributed-lru", "false"},
		{"bpf-events-drop-enabled", "true"},
		{"bpf-events-policy-verdict-enabled", "true"},
		{"bpf-events-trace-enabled", "true"},
		{"preallocate-bpf-maps", "false"},
		{"cluster-name", "default"},
		{"cluster-id", "0"},
		{"routing-mode", routing},
		{"tunnel-protocol", tunnel},
		{"tunnel-source-port-range", "0-0"},
		{"service-no-backend-response", "reject"},
		{"mtu", strconv.Itoa(ciliumMTU(c))},
		{"enable-l7-proxy", "true"},
		{"enable-ipv4-masquerade", "true"},
		{"enable-ipv4-big-tcp", "false"},
		{"enable-ipv6-big-tcp", "false"},
		{"enable-ipv6-masquerade", "true"},
		{"enable-tcx", "true"},
		{"datapath-mode", "veth"},
		{"enable-masquerade-to-route-source", "false"},
		{"enable-xt-socket-fallback", "true"},
		{"install-no-conntrack-iptables-rules", "false"},
		{"iptables-random-fully", "false"},
		{"auto-direct-node-routes", b(routing == "native")},
		{"direct-routing-skip-unreachable", "false"},
		{"kube-proxy-replacement", b(cni.KubeProxyReplacement)},
		{"bpf-lb-sock", "false"},
		{"enable-health-check-nodeport", "true"},
		{"enable-health-check-loadbalancer-ip", "false"},
		{"node-port-bind-protection", "true"},
		{"enable-auto-protect-node-port-range", "true"},
		{"bpf-lb-acceleration", "disabled"},
		{"enable-svc-source-range-check", "true"},
		{"enable-l2-neigh-discovery", "false"},
		{"k8s-require-ipv4-pod-cidr", "false"},
		{"k8s-require-ipv6-pod-cidr", "false"},
		{"enable-k8s-networkpolicy", "true"},
		{"enable-endpoint-lockdown-on-policy-overflow", "false"},
		{"enable-endpoint-health-checking", "true"},
		{"enable-health-checking", "true"},
		{"health-check-icmp-failure-threshold", "3"},
		{"enable-well-known-identities", "false"},
		{"enable-node-selector-labels", "false"},
		{"synchronize-k8s-nodes", "true"},
		{"operator-api-serve-addr", operatorAPI},
		{"enable-hubble", "false"},
		{"ipam", "kubernetes"},
		{"ipam-cilium-node-update-rate", "15s"},
		{"default-lb-service-ipam", "lbipam"},
		{"egress-gateway-reconciliation-trigger-interval", "1s"},
		{"enable-vtep", "false"},
		{"procfs", "/host/proc"},
		{"bpf-root", "/sys/fs/bpf"},
		{"cgroup-root", layout.Abs(layout.CiliumCgroupRoot)},
		{"identity-management-mode", "agent"},
		{"enable-sctp", "false"},
		{"remove-cilium-node-taints", "true"},
		{"set-cilium-node-taints", "true"},
		{"set-cilium-is-up-condition", "true"},
		{"unmanaged-pod-watcher-interval", "15"},
		{"dnsproxy-enable-transparent-mode", "true"},
		{"dnsproxy-socket-linger-timeout", "10"},
		{"tofqdns-dns-reject-response-code", "refused"},
		{"tofqdns-enable-dns-compression", "true"},
		{"tofqdns-endpoint-max-ip-per-hostname", "1000"},
		{"tofqdns-idle-connection-grace-period", "0s"},
		{"tofqdns-max-deferred-connection-deletes", "10000"},
		{"tofqdns-proxy-response-max-delay", "100ms"},
		{"tofqdns-preallocate-identities", "true"},
		{"agent-not-ready-taint-key", "node.cilium.io/agent-not-ready"},
		{"mesh-auth-enabled", "true"},
		{"mesh-auth-queue-size", "1024"},
		{"mesh-auth-rotated-identities-queue-size", "1024"},
		{"mesh-auth-gc-interval", "5m0s"},
		{"proxy-xff-num-trusted-hops-ingress", "0"},
		{"proxy-xff-num-trusted-hops-egress", "0"},
		{"proxy-connect-timeout", "2"},
		{"proxy-initial-fetch-timeout", "30"},
		{"proxy-max-requests-per-connection", "0"},
		{"proxy-max-connection-duration-seconds", "0"},
		{"proxy-idle-timeout-seconds", "60"},
		{"proxy-max-concurrent-retries", "128"},
		{"http-retry-count", "3"},
		{"external-envoy-proxy", "false"},
		{"envoy-base-id", "0"},
		{"envoy-access-log-buffer-size", "4096"},
		{"envoy-keep-cap-netbindservice", "false"},
		{"max-connected-clusters", "255"},
		{"clustermesh-enable-endpoint-sync", "false"},
		{"clustermesh-enable-mcs-api", "false"},
		{"policy-default-local-cluster", "false"},
		{"nat-map-stats-entries", "32"},
		{"nat-map-stats-interval", "30s"},
		{"enable-internal-traffic-policy", "true"},
		{"enable-lb-ipam", "true"},
		{"enable-non-default-deny-policies", "true"},
		{"enable-source-ip-verification", "true"},
	}
	if cni.WireGuard {
		kv = append(kv, [2]string{"enable-wireguard", "true"}, [2]string{"wireguard-persistent-keepalive", "0s"})
	}
	if routing == "native" {
		// Pod traffic to these ranges is routed, not masqueraded; the
		// agent requires the range of each enabled family.
		if v4.IsValid() {
			kv = append(kv, [2]string{"ipv4-native-routing-cidr", v4.String()})
		}
		if v6.IsValid() {
			kv = append(kv, [2]string{"ipv6-native-routing-cidr", v6.String()})
		}
	}
	if !cni.KubeProxyReplacement {
		kv = append(kv, [2]string{"enable-node-port", "false"})
	}
	data := make(map[string]string, len(kv))
	for _, p := range kv {
		data[p[0]] = p[1]
	}
	return data
}

// ciliumAgentRules are the chart's ClusterRole rules of the agent.
func ciliumAgentRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces", "services", "pods", "endpoints", "nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"list", "watch", "get"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{
			"ciliumloadbalancerippools", "ciliumbgppeeringpolicies", "ciliumbgpnodeconfigs", "ciliumbgpadvertisements",
			"ciliumbgppeerconfigs", "ciliumclusterwideenvoyconfigs", "ciliumclusterwidenetworkpolicies",
			"ciliumegressgatewaypolicies", "ciliumendpoints", "ciliumendpointslices", "ciliumenvoyconfigs",
			"ciliumidentities", "ciliumlocalredirectpolicies", "ciliumnetworkpolicies", "ciliumnodes",
			"ciliumnodeconfigs", "ciliumcidrgroups", "ciliuml2announcementpolicies", "ciliumpodippools",
		}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumidentities", "ciliumendpoints", "ciliumnodes"}, Verbs: []string{"create"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumidentities"}, Verbs: []string{"update"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumendpoints"}, Verbs: []string{"delete", "get"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumnodes", "ciliumnodes/status"}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{
			"ciliumendpoints/status", "ciliumendpoints", "ciliuml2announcementpolicies/status", "ciliumbgpnodeconfigs/status",
		}, Verbs: []string{"patch"}},
	}
}

// ciliumOperatorRules are the chart's ClusterRole rules of the operator.
func ciliumOperatorRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		// delete: to restart unmanaged [core|kube]dns pods under Cilium.
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"cilium-config"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
		// Node taints and NetworkUnavailable.
		{APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces", "secrets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"services", "endpoints"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumnetworkpolicies", "ciliumclusterwidenetworkpolicies"},
			Verbs: []string{"create", "update", "deletecollection", "patch", "get", "list", "watch"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumnetworkpolicies/status", "ciliumclusterwidenetworkpolicies/status"},
			Verbs: []string{"patch", "update"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumendpoints", "ciliumidentities"}, Verbs: []string{"delete", "list", "watch"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumidentities"}, Verbs: []string{"update"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumnodes"}, Verbs: []string{"create", "update", "get", "list", "watch", "delete"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumnodes/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{
			"ciliumendpointslices", "ciliumenvoyconfigs", "ciliumbgppeerconfigs", "ciliumbgpadvertisements", "ciliumbgpnodeconfigs",
		}, Verbs: []string{"create", "update", "get", "list", "watch", "delete", "patch"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumbgpclusterconfigs/status", "ciliumbgppeerconfigs/status"}, Verbs: []string{"update"}},
		// The operator registers Cilium's CRDs itself (skip-crd-creation
		// is unset), and updates those it owns.
		{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"create", "get", "list", "watch"}},
		{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"update"}, ResourceNames: []string{
			"ciliumloadbalancerippools.cilium.io", "ciliumbgppeeringpolicies.cilium.io", "ciliumbgpclusterconfigs.cilium.io",
			"ciliumbgppeerconfigs.cilium.io", "ciliumbgpadvertisements.cilium.io", "ciliumbgpnodeconfigs.cilium.io",
			"ciliumbgpnodeconfigoverrides.cilium.io", "ciliumclusterwideenvoyconfigs.cilium.io",
			"ciliumclusterwidenetworkpolicies.cilium.io", "ciliumegressgatewaypolicies.cilium.io", "ciliumendpoints.cilium.io",
			"ciliumendpointslices.cilium.io", "ciliumenvoyconfigs.cilium.io", "ciliumidentities.cilium.io",
			"ciliumlocalredirectpolicies.cilium.io", "ciliumnetworkpolicies.cilium.io", "ciliumnodes.cilium.io",
			"ciliumnodeconfigs.cilium.io", "ciliumcidrgroups.cilium.io", "ciliuml2announcementpolicies.cilium.io",
			"ciliumpodippools.cilium.io", "ciliumgatewayclassconfigs.cilium.io",
		}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{
			"ciliumloadbalancerippools", "ciliumpodippools", "ciliumbgppeeringpolicies", "ciliumbgpclusterconfigs",
			"ciliumbgpnodeconfigoverrides", "ciliumbgppeerconfigs",
		}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumpodippools"}, Verbs: []string{"create"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumloadbalancerippools/status"}, Verbs: []string{"patch"}},
		// Leader election of the operator replicas.
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "get", "update"}},
	}
}

// ciliumManifests is what Cilium's Helm chart renders for the spec's
// version with the spec's values (see ciliumConfig): the cilium-secrets
// namespace, the agent's and the operator's ServiceAccounts, the
// cilium-config ConfigMap, their ClusterRoles, Roles and bindings, the
// cilium agent DaemonSet and the cilium-operator Deployment. There are no
// CRDs: the operator registers them on start.
//
// Without kube-proxy the agent and the operator cannot reach the
// kubernetes Service, so they dial the API endpoint (the chart's
// k8sServiceHost and k8sServicePort, set as KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT in every container that talks to the API).
func ciliumManifests(c *ir.Cluster) []runtime.Object {
	version := c.Network.CNI.Version
	if version == "" {
		version = "1.18.2"
	}
	agentImage := c.Network.CNI.Image("cilium-agent", "quay.io/cilium/cilium:v"+version)
	operatorImage := c.Network.CNI.Image("cilium-operator", "quay.io/cilium/operator-generic:v"+version)
	v4, _ := cniPodCIDRsByFamily(c)
	loopback := "127.0.0.1"
	if !v4.IsValid() {
		loopback = "::1"
	}

	partOf := map[string]string{"app.kubernetes.io/part-of": "cilium"}
	const rbacGroup = "rbac.authorization.k8s.io"
	rbacMeta := func(name, namespace string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: partOf}
	}
	sa := func(name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: "ServiceAccount", Name: name, Namespace: "kube-system"}
	}
	role := func(name, namespace string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
		return &rbacv1.Role{TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "Role"), ObjectMeta: rbacMeta(name, namespace), Rules: rules}
	}
	roleBinding := func(name, namespace, subject string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{
			TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "RoleBinding"), ObjectMeta: rbacMeta(name, namespace),
			RoleRef: rbacv1.RoleRef{APIGroup: rbacGroup, Kind: "Role", Name: name}, Subjects: []rbacv1.Subject{sa(subject)},
		}
	}
	clusterRole := func(name string, rules []rbacv1.PolicyRule) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: rbacMeta(name, ""), Rules: rules}
	}
	clusterRoleBinding := func(name string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{
			TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: rbacMeta(name, ""),
			RoleRef: rbacv1.RoleRef{APIGroup: rbacGroup, Kind: "ClusterRole", Name: name}, Subjects: []rbacv1.Subject{sa(name)},
		}
	}

	return []runtime.Object{
		&corev1.Namespace{TypeMeta: typeMeta("v1", "Namespace"), ObjectMeta: metav1.ObjectMeta{Name: ciliumSecretsNamespace, Labels: partOf}},
		&corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: kubeSystem("cilium", nil)},
		&corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: kubeSystem("cilium-operator", nil)},
		&corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: kubeSystem("cilium-config", nil), Data: ciliumConfig(c)},
		clusterRole("cilium", ciliumAgentRules()),
		clusterRole("cilium-operator", ciliumOperatorRules()),
		clusterRoleBinding("cilium"),
		clusterRoleBinding("cilium-operator"),
		role("cilium-config-agent", "kube-system",
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}),
		role("cilium-tlsinterception-secrets", ciliumSecretsNamespace,
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}),
		role("cilium-operator-tlsinterception-secrets", ciliumSecretsNamespace,
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "delete", "update", "patch"}}),
		roleBinding("cilium-config-agent", "kube-system", "cilium"),
		roleBinding("cilium-tlsinterception-secrets", ciliumSecretsNamespace, "cilium"),
		roleBinding("cilium-operator-tlsinterception-secrets", ciliumSecretsNamespace, "cilium-operator"),
		ciliumAgent(c, agentImage, loopback),
		ciliumOperator(c, operatorImage, loopback),
	}
}

// ciliumAPIEnv is the chart's k8sServiceHost/k8sServicePort: set when
// Cilium replaces kube-proxy.
func ciliumAPIEnv(c *ir.Cluster) []corev1.EnvVar {
	if !c.Network.CNI.KubeProxyReplacement {
		return nil
	}
	// Host-network pods: the node-local proxy in mode nodeLocal.
	apiHost, apiPort := c.Endpoint.NodeHostPort()
	return []corev1.EnvVar{
		{Name: "KUBERNETES_SERVICE_HOST", Value: apiHost},
		{Name: "KUBERNETES_SERVICE_PORT", Value: strconv.Itoa(apiPort)},
	}
}

func ciliumFieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

func ciliumConfigMapEnv(name, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cilium-config"}, Key: key, Optional: ptr(true)}}}
}

func ciliumHostPath(name, path string, typ corev1.HostPathType) corev1.Volume {
	var t *corev1.HostPathType
	if typ != "" {
		t = &typ
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: t}}}
}

// ciliumAgent is the chart's cilium DaemonSet: the agent and its init
// containers, which build the configuration, mount the cgroup2 and BPF
// filesystems, fix sysctls, clean state on request and install the
// cilium-cni binary into /opt/cni/bin. The chart's AWS-only postStart hook
// (cni.iptablesRemoveAWSRules) is left out.
func ciliumAgent(c *ir.Cluster, image, loopback string) *appsv1.DaemonSet {
	labels := map[string]string{"k8s-app": "cilium", "app.kubernetes.io/name": "cilium-agent", "app.kubernetes.io/part-of": "cilium"}
	seLinux := &corev1.SELinuxOptions{Level: "s0", Type: "spc_t"}
	caps := func(add ...corev1.Capability) *corev1.Capabilities {
		return &corev1.Capabilities{Add: add, Drop: []corev1.Capability{"ALL"}}
	}
	container := func(name string) corev1.Container {
		return corev1.Container{Name: name, Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError}
	}
	health := func(period, failure, timeout int32, headers ...corev1.HTTPHeader) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: loopback, Path: "/healthz", Port: intstr.FromInt32(9879),
				Scheme: corev1.URISchemeHTTP, HTTPHeaders: append([]corev1.HTTPHeader{{Name: "brief", Value: "true"}}, headers...)}},
			PeriodSeconds: period, SuccessThreshold: 1, FailureThreshold: failure, TimeoutSeconds: timeout,
		}
	}
	startup := health(2, 300, 0)
	startup.InitialDelaySeconds = 5
	nodeEnv := []corev1.EnvVar{ciliumFieldEnv("K8S_NODE_NAME", "spec.nodeName"), ciliumFieldEnv("CILIUM_K8S_NAMESPACE", "metadata.namespace")}
	apiEnv := ciliumAPIEnv(c)

	agent := container("cilium-agent")
	agent.Command = []string{"cilium-agent"}
	agent.Args = []string{"--config-dir=/tmp/cilium/config-map"}
	agent.StartupProbe = startup
	agent.LivenessProbe = health(30, 10, 5, corev1.HTTPHeader{Name: "require-k8s-connectivity", Value: "false"})
	agent.ReadinessProbe = health(30, 3, 5)
	agent.Env = append(append(append(nodeEnv[:2:2],
		corev1.EnvVar{Name: "CILIUM_CLUSTERMESH_CONFIG", Value: "/var/lib/cilium/clustermesh/"},
		corev1.EnvVar{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
			Resource: "limits.memory", Divisor: resource.MustParse("1")}}}),
		apiEnv...),
		corev1.EnvVar{Name: "KUBE_CLIENT_BACKOFF_BASE", Value: "1"},
		corev1.EnvVar{Name: "KUBE_CLIENT_BACKOFF_DURATION", Value: "120"})
	agent.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/cni-uninstall.sh"}}}}
	agent.SecurityContext = &corev1.SecurityContext{SELinuxOptions: seLinux, Capabilities: caps(
		"CHOWN", "KILL", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "SYS_MODULE", "SYS_ADMIN", "SYS_RESOURCE",
		"DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID")}
	hostToContainer := ptr(corev1.MountPropagationHostToContainer)
	agent.VolumeMounts = []corev1.VolumeMount{
		{Name: "host-proc-sys-net", MountPath: "/host/proc/sys/net"},
		{Name: "host-proc-sys-kernel", MountPath: "/host/proc/sys/kernel"},
		{Name: "bpf-maps", MountPath: "/sys/fs/bpf", MountPropagation: hostToContainer},
		{Name: "cilium-run", MountPath: layout.Abs(layout.CiliumRunDir)},
		{Name: "cilium-netns", MountPath: "/var/run/cilium/netns", MountPropagation: hostToContainer},
		{Name: "etc-cni-netd", MountPath: "/host/etc/cni/net.d"},
		{Name: "clustermesh-secrets", MountPath: "/var/lib/cilium/clustermesh", ReadOnly: true},
		{Name: "lib-modules", MountPath: layout.Abs(layout.KernelModulesHostPath), ReadOnly: true},
		{Name: "xtables-lock", MountPath: layout.Abs(layout.XtablesLock)},
		{Name: "tmp", MountPath: "/tmp"},
	}

	config := container("config")
	config.Command = []string{"cilium-dbg", "build-config"}
	config.Env = append(nodeEnv[:2:2], apiEnv...)
	config.VolumeMounts = []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}

	// mount-cgroup and apply-sysctl-overwrites run static helpers in the
	// host's namespaces, copied through the CNI binary directory.
	hostHelpers := []corev1.VolumeMount{{Name: "hostproc", MountPath: "/hostproc"}, {Name: "cni-path", MountPath: "/hostbin"}}
	mountCgroup := container("mount-cgroup")
	mountCgroup.Env = []corev1.EnvVar{{Name: "CGROUP_ROOT", Value: layout.Abs(layout.CiliumCgroupRoot)}, {Name: "BIN_PATH", Value: layout.Abs(layout.CNIBinDir)}}
	mountCgroup.Command = []string{"sh", "-ec", "cp /usr/bin/cilium-mount /hostbin/cilium-mount;\n" +
		"nsenter --cgroup=/hostproc/1/ns/cgroup --mount=/hostproc/1/ns/mnt \"${BIN_PATH}/cilium-mount\" $CGROUP_ROOT;\n" +
		"rm /hostbin/cilium-mount\n"}
	mountCgroup.VolumeMounts = hostHelpers
	mountCgroup.SecurityContext = &corev1.SecurityContext{SELinuxOptions: seLinux, Capabilities: caps("SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE")}

	sysctl := container("apply-sysctl-overwrites")
	sysctl.Env = []corev1.EnvVar{{Name: "BIN_PATH", Value: layout.Abs(layout.CNIBinDir)}}
	sysctl.Command = []string{"sh", "-ec", "cp /usr/bin/cilium-sysctlfix /hostbin/cilium-sysctlfix;\n" +
		"nsenter --mount=/hostproc/1/ns/mnt \"${BIN_PATH}/cilium-sysctlfix\";\n" +
		"rm /hostbin/cilium-sysctlfix\n"}
	sysctl.VolumeMounts = hostHelpers
	sysctl.SecurityContext = &corev1.SecurityContext{SELinuxOptions: seLinux, Capabilities: caps("SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE")}

	bpf := container("mount-bpf-fs")
	bpf.Command = []string{"/bin/bash", "-c", "--"}
	bpf.Args = []string{`mount | grep "/sys/fs/bpf type bpf" || mount -t bpf bpf /sys/fs/bpf`}
	bpf.SecurityContext = &corev1.SecurityContext{Privileged: ptr(true)}
	bpf.VolumeMounts = []corev1.VolumeMount{{Name: "bpf-maps", MountPath: "/sys/fs/bpf", MountPropagation: ptr(corev1.MountPropagationBidirectional)}}

	clean := container("clean-cilium-state")
	clean.Command = []string{"/init-container.sh"}
	clean.Env = append([]corev1.EnvVar{
		ciliumConfigMapEnv("CILIUM_ALL_STATE", "clean-cilium-state"),
		ciliumConfigMapEnv("CILIUM_BPF_STATE", "clean-cilium-bpf-state"),
		ciliumConfigMapEnv("WRITE_CNI_CONF_WHEN_READY", "write-cni-conf-when-ready"),
	}, apiEnv...)
	clean.SecurityContext = &corev1.SecurityContext{SELinuxOptions: seLinux, Capabilities: caps("NET_ADMIN", "SYS_MODULE", "SYS_ADMIN", "SYS_RESOURCE")}
	clean.VolumeMounts = []corev1.VolumeMount{
		{Name: "bpf-maps", MountPath: "/sys/fs/bpf"},
		{Name: "cilium-cgroup", MountPath: layout.Abs(layout.CiliumCgroupRoot), MountPropagation: hostToContainer},
		{Name: "cilium-run", MountPath: layout.Abs(layout.CiliumRunDir)},
	}

	installCNI := container("install-cni-binaries")
	installCNI.Command = []string{"/install-plugin.sh"}
	installCNI.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("10Mi")}}
	installCNI.SecurityContext = &corev1.SecurityContext{SELinuxOptions: seLinux, Capabilities: caps()}
	installCNI.VolumeMounts = []corev1.VolumeMount{{Name: "cni-path", MountPath: "/host/opt/cni/bin"}}

	etcdClientCert := func(secret, prefix string) corev1.VolumeProjection {
		return corev1.VolumeProjection{Secret: &corev1.SecretProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Optional: ptr(true),
			Items: []corev1.KeyToPath{
				{Key: "tls.key", Path: prefix + "-etcd-client.key"},
				{Key: "tls.crt", Path: prefix + "-etcd-client.crt"},
				{Key: "ca.crt", Path: prefix + "-etcd-client-ca.crt"},
			}}}
	}

	return &appsv1.DaemonSet{
		TypeMeta:   typeMeta("apps/v1", "DaemonSet"),
		ObjectMeta: kubeSystem("cilium", labels),
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "cilium"}},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr(intstr.FromInt32(2))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels,
					Annotations: map[string]string{"kubectl.kubernetes.io/default-container": "cilium-agent"}},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{
						AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
						SeccompProfile:  &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
					},
					Containers:                    []corev1.Container{agent},
					InitContainers:                []corev1.Container{config, mountCgroup, sysctl, bpf, clean, installCNI},
					RestartPolicy:                 corev1.RestartPolicyAlways,
					PriorityClassName:             "system-node-critical",
					ServiceAccountName:            "cilium",
					AutomountServiceAccountToken:  ptr(true),
					TerminationGracePeriodSeconds: ptr(int64(1)),
					HostNetwork:                   true,
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "cilium"}},
							TopologyKey:   "kubernetes.io/hostname",
						}},
					}},
					NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
					// Every node, the tainted control plane's too.
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Volumes: []corev1.Volume{
						{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						ciliumHostPath("cilium-run", layout.Abs(layout.CiliumRunDir), corev1.HostPathDirectoryOrCreate),
						ciliumHostPath("cilium-netns", layout.Abs(layout.NetnsDir), corev1.HostPathDirectoryOrCreate),
						ciliumHostPath("bpf-maps", "/sys/fs/bpf", corev1.HostPathDirectoryOrCreate),
						ciliumHostPath("hostproc", "/proc", corev1.HostPathDirectory),
						ciliumHostPath("cilium-cgroup", layout.Abs(layout.CiliumCgroupRoot), corev1.HostPathDirectoryOrCreate),
						ciliumHostPath("cni-path", layout.Abs(layout.CNIBinDir), corev1.HostPathDirectoryOrCreate),
						ciliumHostPath("etc-cni-netd", strings.TrimSuffix(layout.Abs(layout.CNIConfDir), "/"), corev1.HostPathDirectoryOrCreate),
						ciliumHostPath("lib-modules", layout.Abs(layout.KernelModulesHostPath), ""),
						ciliumHostPath("xtables-lock", layout.Abs(layout.XtablesLock), corev1.HostPathFileOrCreate),
						{Name: "clustermesh-secrets", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
							DefaultMode: ptr(int32(0o400)),
							Sources: []corev1.VolumeProjection{
								{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cilium-clustermesh"}, Optional: ptr(true)}},
								etcdClientCert("clustermesh-apiserver-remote-cert", "common"),
								etcdClientCert("clustermesh-apiserver-local-cert", "local"),
							},
						}}},
						ciliumHostPath("host-proc-sys-net", "/proc/sys/net", corev1.HostPathDirectory),
						ciliumHostPath("host-proc-sys-kernel", "/proc/sys/kernel", corev1.HostPathDirectory),
					},
				},
			},
		},
	}
}

// ciliumOperatorReplicas is the chart's two replicas, kept on separate
// nodes by anti-affinity: one when a single node runs pods.
func ciliumOperatorReplicas(c *ir.Cluster) int32 {
	n := int32(0)
	for _, node := range c.Nodes {
		if node.RunsPods() {
			n++
		}
	}
	return max(1, min(2, n))
}

// ciliumOperator is the chart's cilium-operator Deployment
// (operator-generic).
func ciliumOperator(c *ir.Cluster, image, loopback string) *appsv1.Deployment {
	labels := map[string]string{"io.cilium/app": "operator", "name": "cilium-operator",
		"app.kubernetes.io/part-of": "cilium", "app.kubernetes.io/name": "cilium-operator"}
	replicas := ciliumOperatorReplicas(c)
	// With one replica the chart lets a rolling update take it down first:
	// the anti-affinity keeps a second one from starting on the same node.
	maxUnavailable := intstr.FromString("50%")
	if replicas == 1 {
		maxUnavailable = intstr.FromString("100%")
	}
	probe := func(delay, period, failure int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: loopback, Path: "/healthz",
				Port: intstr.FromInt32(9234), Scheme: corev1.URISchemeHTTP}},
			InitialDelaySeconds: delay, PeriodSeconds: period, TimeoutSeconds: 3, FailureThreshold: failure,
		}
	}
	env := append([]corev1.EnvVar{
		ciliumFieldEnv("K8S_NODE_NAME", "spec.nodeName"),
		ciliumFieldEnv("CILIUM_K8S_NAMESPACE", "metadata.namespace"),
		ciliumConfigMapEnv("CILIUM_DEBUG", "debug"),
	}, ciliumAPIEnv(c)...)
	tolerate := func(key string) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists}
	}
	return &appsv1.Deployment{
		TypeMeta:   typeMeta("apps/v1", "Deployment"),
		ObjectMeta: kubeSystem("cilium-operator", labels),
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"io.cilium/app": "operator", "name": "cilium-operator"}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr(intstr.FromString("25%")), MaxUnavailable: &maxUnavailable}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels,
					Annotations: map[string]string{"prometheus.io/port": "9963", "prometheus.io/scrape": "true"}},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name:            "cilium-operator",
						Image:           image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{"cilium-operator-generic"},
						Args:            []string{"--config-dir=/tmp/cilium/config-map", "--debug=$(CILIUM_DEBUG)"},
						Env:             env,
						Ports:           []corev1.ContainerPort{{Name: "prometheus", ContainerPort: 9963, HostPort: 9963, Protocol: corev1.ProtocolTCP}},
						LivenessProbe:   probe(60, 10, 0),
						ReadinessProbe:  probe(0, 5, 5),
						VolumeMounts:    []corev1.VolumeMount{{Name: "cilium-config-path", MountPath: "/tmp/cilium/config-map", ReadOnly: true}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
					}},
					HostNetwork:                  true,
					RestartPolicy:                corev1.RestartPolicyAlways,
					PriorityClassName:            "system-cluster-critical",
					ServiceAccountName:           "cilium-operator",
					AutomountServiceAccountToken: ptr(true),
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"io.cilium/app": "operator"}},
							TopologyKey:   "kubernetes.io/hostname",
						}},
					}},
					NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
					Tolerations: []corev1.Toleration{
						tolerate("node-role.kubernetes.io/control-plane"),
						tolerate("node-role.kubernetes.io/master"),
						tolerate("node.kubernetes.io/not-ready"),
						tolerate("node.cloudprovider.kubernetes.io/uninitialized"),
						tolerate("node.cilium.io/agent-not-ready"),
					},
					Volumes: []corev1.Volume{{Name: "cilium-config-path", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cilium-config"}}}}},
				},
			},
		},
	}
}
