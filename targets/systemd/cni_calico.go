package systemd

import (
	"net/netip"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
)

// calicoManifests is Calico's manifest install (upstream
// manifests/calico.yaml) for the spec's version, with the Kubernetes API
// as datastore and no Typha: the CustomResourceDefinitions, RBAC,
// calico-config, the calico-node DaemonSet and calico-kube-controllers.
//
// It differs from upstream where kcompile owns the node:
//   - kcompile writes /etc/cni/net.d/10-calico.conflist and the
//     calico-kubeconfig (a client certificate for the user "calico-cni")
//     itself, so the calico-cni-plugin ClusterRole is bound to that user,
//     and no container of the DaemonSet gets the host's /etc/cni/net.d:
//     install-cni always writes its conflist, and a kubeconfig with a
//     service-account token, to /host/etc/cni/net.d (no variable turns
//     that off; CNI_NET_DIR only changes the path written into the
//     conflist), so it gets a throwaway emptyDir there, and calico-node
//     runs with CALICO_MANAGE_CNI=false, which stops its token refresher
//     from rewriting calico-kubeconfig.
//   - install-cni installs only the calico and calico-ipam plugins:
//     kcompile installs and checks loopback and portmap itself, and the
//     conflist uses nothing else of the image (flannel, host-local, tuning).
//   - The default pools are the spec's pod CIDRs with the encapsulation of
//     network.cni.mode, the tunnel MTUs are the compiled pod MTU rather
//     than autodetected, and the node address is the Node's InternalIP,
//     which kcompile sets with the kubelet's --node-ip.
//
// Calico enforces NetworkPolicy whatever network.networkPolicy says: the
// spec's flag asks for enforcement, it cannot turn Calico's off.
func calicoManifests(c *ir.Cluster) []runtime.Object {
	cni := c.Network.CNI
	version := cni.Version
	nodeImage := cni.Image("calico-node", "quay.io/calico/node:v"+version)
	cniImage := cni.Image("calico-cni", "quay.io/calico/cni:v"+version)
	controllersImage := cni.Image("calico-kube-controllers", "quay.io/calico/kube-controllers:v"+version)

	enc := calicoEncapsulationOf(cni.Mode)
	var v4, v6 netip.Prefix
	for _, p := range c.Network.PodCIDRs {
		if p.Addr().Is4() {
			v4 = p
		} else {
			v6 = p
		}
	}

	nodeLabels := map[string]string{"k8s-app": "calico-node"}
	controllersLabels := map[string]string{"k8s-app": "calico-kube-controllers"}
	objs := []runtime.Object{
		&policyv1.PodDisruptionBudget{
			TypeMeta:   typeMeta("policy/v1", "PodDisruptionBudget"),
			ObjectMeta: kubeSystem("calico-kube-controllers", controllersLabels),
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: ptr(intstr.FromInt32(1)),
				Selector:       &metav1.LabelSelector{MatchLabels: controllersLabels},
			},
		},
		&corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: kubeSystem("calico-kube-controllers", nil)},
		&corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: kubeSystem("calico-node", nil)},
		// install-cni requests a token of calico-cni-plugin (as calico-node)
		// and fails without the account; the token lands in its throwaway
		// directory and the account is bound to nothing.
		&corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: kubeSystem("calico-cni-plugin", nil)},
		&corev1.ConfigMap{
			TypeMeta:   typeMeta("v1", "ConfigMap"),
			ObjectMeta: kubeSystem("calico-config", nil),
			// No cni_network_config: the node's conflist is kcompile's.
			Data: map[string]string{
				"typha_service_name": "none",
				"calico_backend":     enc.backend,
				"veth_mtu":           strconv.Itoa(c.Network.PodMTU),
			},
		},
	}
	for _, crd := range calicoCRDs() {
		objs = append(objs, crd)
	}
	objs = append(objs, calicoRBAC()...)
	objs = append(objs,
		calicoNodeDaemonSet(c, nodeImage, cniImage, enc, v4, v6, nodeLabels),
		&appsv1.Deployment{
			TypeMeta:   typeMeta("apps/v1", "Deployment"),
			ObjectMeta: kubeSystem("calico-kube-controllers", controllersLabels),
			Spec: appsv1.DeploymentSpec{
				// The controllers can only have a single active instance.
				Replicas: ptr(int32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: controllersLabels},
				Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: controllersLabels},
					Spec: corev1.PodSpec{
						NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
						Tolerations: []corev1.Toleration{
							{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
							{Key: "node-role.kubernetes.io/master", Effect: corev1.TaintEffectNoSchedule},
							{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule},
						},
						ServiceAccountName: "calico-kube-controllers",
						SecurityContext:    &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
						PriorityClassName:  "system-cluster-critical",
						Containers: []corev1.Container{{
							Name:            "calico-kube-controllers",
							Image:           controllersImage,
							ImagePullPolicy: corev1.PullIfNotPresent,
							Env: []corev1.EnvVar{
								calicoEnv("ENABLED_CONTROLLERS", "node,loadbalancer"),
								calicoEnv("DATASTORE_TYPE", "kubernetes"),
							},
							LivenessProbe: &corev1.Probe{
								ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/usr/bin/check-status", "-l"}}},
								PeriodSeconds: 10, InitialDelaySeconds: 10, FailureThreshold: 6, TimeoutSeconds: 10,
							},
							ReadinessProbe: &corev1.Probe{
								ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/usr/bin/check-status", "-r"}}},
								PeriodSeconds: 10,
							},
							SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr(true)},
						}},
					},
				},
			},
		},
	)
	return objs
}

// calicoEncapsulation is how the default pools carry pod traffic between
// nodes, and the networking backend calico-node runs for it.
type calicoEncapsulation struct {
	// backend is CALICO_NETWORKING_BACKEND: "bird" runs BGP to
	// distribute routes, "vxlan" needs none.
	backend string
	// ipip and vxlan are the IPv4 pool's IPIP and VXLAN modes, vxlan6
	// the IPv6 pool's (Calico has no IPIP for IPv6).
	ipip, vxlan, vxlan6 string
}

// calicoEncapsulationOf maps network.cni.mode: vxlan encapsulates all pod
// traffic in VXLAN and needs no BGP; ipip encapsulates IPv4 in IP-in-IP
// with routes from BGP (IPv6 is then routed unencapsulated); bgp routes
// both families unencapsulated with BGP. Encapsulation is Always, never
// CrossSubnet: the compiled pod MTU leaves room for it on every path.
func calicoEncapsulationOf(mode string) calicoEncapsulation {
	switch mode {
	case "ipip":
		return calicoEncapsulation{backend: "bird", ipip: "Always", vxlan: "Never", vxlan6: "Never"}
	case "bgp":
		return calicoEncapsulation{backend: "bird", ipip: "Never", vxlan: "Never", vxlan6: "Never"}
	}
	return calicoEncapsulation{backend: "vxlan", ipip: "Never", vxlan: "Always", vxlan6: "Always"}
}

func calicoEnv(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

// calicoConfigEnv is a variable read from the calico-config ConfigMap.
func calicoConfigEnv(name, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "calico-config"}, Key: key}}}
}

func calicoNodeNameEnv(name string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}
}

// calicoUnmanagedCNIBinaries are the plugins of the calico/cni image that
// install-cni must not put in /opt/cni/bin: loopback and portmap are
// kcompile's, the others are unused by kcompile's conflist.
const calicoUnmanagedCNIBinaries = "flannel,host-local,loopback,portmap,tuning"

// calicoNodeDaemonSet runs calico-node on every node, after its init
// containers have migrated host-local IPAM data (upgrade-ipam), installed
// the calico plugins (install-cni) and mounted the BPF filesystem
// (mount-bpffs).
func calicoNodeDaemonSet(c *ir.Cluster, nodeImage, cniImage string, enc calicoEncapsulation, v4, v6 netip.Prefix, labels map[string]string) *appsv1.DaemonSet {
	cni := c.Network.CNI
	env := []corev1.EnvVar{
		calicoEnv("DATASTORE_TYPE", "kubernetes"),
		calicoEnv("WAIT_FOR_DATASTORE", "true"),
		calicoNodeNameEnv("NODENAME"),
		calicoConfigEnv("CALICO_NETWORKING_BACKEND", "calico_backend"),
		calicoEnv("CLUSTER_TYPE", "k8s,bgp"),
	}
	if v4.IsValid() {
		env = append(env,
			calicoEnv("IP", "autodetect"),
			calicoEnv("IP_AUTODETECTION_METHOD", "kubernetes-internal-ip"),
			calicoEnv("CALICO_IPV4POOL_CIDR", v4.String()),
			calicoEnv("CALICO_IPV4POOL_IPIP", enc.ipip),
			calicoEnv("CALICO_IPV4POOL_VXLAN", enc.vxlan),
		)
	} else {
		// IPv6 only: no IPv4 address or pool, and BGP needs a router
		// ID it cannot take from an IPv4 address.
		env = append(env, calicoEnv("IP", "none"), calicoEnv("CALICO_IPV4POOL_CIDR", "none"))
		if enc.backend == "bird" {
			env = append(env, calicoEnv("CALICO_ROUTER_ID", "hash"))
		}
	}
	if v6.IsValid() {
		env = append(env,
			calicoEnv("IP6", "autodetect"),
			calicoEnv("IP6_AUTODETECTION_METHOD", "kubernetes-internal-ip"),
			calicoEnv("CALICO_IPV6POOL_CIDR", v6.String()),
		)
		// Calico leaves IPv6 pools without outgoing NAT; a ULA pod range
		// reaches beyond the cluster only through it, like IPv4 pods.
		if netip.MustParsePrefix("fc00::/7").Contains(v6.Addr()) {
			env = append(env, calicoEnv("CALICO_IPV6POOL_NAT_OUTGOING", "true"))
		}
	}
	env = append(env,
		calicoEnv("CALICO_IPV6POOL_VXLAN", enc.vxlan6),
		calicoConfigEnv("FELIX_IPINIPMTU", "veth_mtu"),
		calicoConfigEnv("FELIX_VXLANMTU", "veth_mtu"),
		calicoConfigEnv("FELIX_WIREGUARDMTU", "veth_mtu"),
	)
	if v6.IsValid() {
		env = append(env, calicoConfigEnv("FELIX_VXLANMTUV6", "veth_mtu"), calicoConfigEnv("FELIX_WIREGUARDMTUV6", "veth_mtu"))
	}
	if cni.WireGuard {
		if v4.IsValid() {
			env = append(env, calicoEnv("FELIX_WIREGUARDENABLED", "true"))
		}
		if v6.IsValid() {
			env = append(env, calicoEnv("FELIX_WIREGUARDENABLEDV6", "true"))
		}
	}
	env = append(env,
		// kcompile owns calico-kubeconfig: no token refresher.
		calicoEnv("CALICO_MANAGE_CNI", "false"),
		calicoEnv("CALICO_DISABLE_FILE_LOGGING", "true"),
		calicoEnv("FELIX_DEFAULTENDPOINTTOHOSTACTION", "ACCEPT"),
		calicoEnv("FELIX_IPV6SUPPORT", strconv.FormatBool(v6.IsValid())),
		calicoEnv("FELIX_HEALTHENABLED", "true"),
	)

	live := []string{"/bin/calico-node", "-felix-live"}
	ready := []string{"/bin/calico-node", "-felix-ready"}
	if enc.backend == "bird" {
		live = append(live, "-bird-live")
		ready = append(ready, "-bird-ready")
	}

	hostPath := func(name, path string, t corev1.HostPathType) corev1.Volume {
		v := corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
		if t != "" {
			v.HostPath.Type = &t
		}
		return v
	}
	// Lets KUBERNETES_SERVICE_HOST/PORT be overridden, as upstream does
	// for eBPF mode; kcompile does not create it.
	servicesEndpoint := []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "kubernetes-services-endpoint"}, Optional: ptr(true)}}}
	privileged := &corev1.SecurityContext{Privileged: ptr(true)}
	bidirectional := corev1.MountPropagationBidirectional

	return &appsv1.DaemonSet{
		TypeMeta:   typeMeta("apps/v1", "DaemonSet"),
		ObjectMeta: kubeSystem("calico-node", labels),
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr(intstr.FromInt32(1))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
					HostNetwork:  true,
					// Every node, whatever its taints, control-plane
					// nodes included.
					Tolerations: []corev1.Toleration{
						{Effect: corev1.TaintEffectNoSchedule, Operator: corev1.TolerationOpExists},
						{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
						{Effect: corev1.TaintEffectNoExecute, Operator: corev1.TolerationOpExists},
					},
					ServiceAccountName:            "calico-node",
					SecurityContext:               &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					TerminationGracePeriodSeconds: ptr(int64(0)),
					PriorityClassName:             "system-node-critical",
					InitContainers: []corev1.Container{
						{
							// Migrates host-local IPAM allocations to
							// calico-ipam; a no-op on a fresh node.
							Name:            "upgrade-ipam",
							Image:           cniImage,
							ImagePullPolicy: corev1.PullIfNotPresent,
							Command:         []string{"/opt/cni/bin/calico-ipam", "-upgrade"},
							EnvFrom:         servicesEndpoint,
							Env: []corev1.EnvVar{
								calicoNodeNameEnv("KUBERNETES_NODE_NAME"),
								calicoConfigEnv("CALICO_NETWORKING_BACKEND", "calico_backend"),
							},
							VolumeMounts: []corev1.VolumeMount{
								{Name: "host-local-net-dir", MountPath: layout.Abs(layout.CNIStateDir)},
								{Name: "cni-bin-dir", MountPath: "/host/opt/cni/bin"},
							},
							SecurityContext: privileged,
						},
						{
							Name:            "install-cni",
							Image:           cniImage,
							ImagePullPolicy: corev1.PullIfNotPresent,
							Command:         []string{"/opt/cni/bin/install"},
							EnvFrom:         servicesEndpoint,
							Env: []corev1.EnvVar{
								calicoEnv("CNI_CONF_NAME", "10-calico.conflist"),
								calicoNodeNameEnv("KUBERNETES_NODE_NAME"),
								calicoConfigEnv("CNI_MTU", "veth_mtu"),
								calicoEnv("SKIP_CNI_BINARIES", calicoUnmanagedCNIBinaries),
								calicoEnv("SLEEP", "false"),
							},
							VolumeMounts: []corev1.VolumeMount{
								{Name: "cni-bin-dir", MountPath: "/host/opt/cni/bin"},
								// What install-cni writes here (a conflist and
								// a token kubeconfig) is thrown away.
								{Name: "cni-net-dir-unused", MountPath: "/host/etc/cni/net.d"},
							},
							SecurityContext: privileged,
						},
						{
							// Mounts bpffs at /sys/fs/bpf and cgroup2 at
							// /run/calico/cgroup for the BPF data plane,
							// best effort.
							Name:            "mount-bpffs",
							Image:           nodeImage,
							ImagePullPolicy: corev1.PullIfNotPresent,
							Command:         []string{"calico-node", "-init", "-best-effort"},
							VolumeMounts: []corev1.VolumeMount{
								{Name: "sys-fs", MountPath: "/sys/fs", MountPropagation: &bidirectional},
								{Name: "var-run-calico", MountPath: layout.Abs(layout.CalicoRunDir), MountPropagation: &bidirectional},
								{Name: "nodeproc", MountPath: "/nodeproc", ReadOnly: true},
							},
							SecurityContext: privileged,
						},
					},
					Containers: []corev1.Container{{
						Name:            "calico-node",
						Image:           nodeImage,
						ImagePullPolicy: corev1.PullIfNotPresent,
						EnvFrom:         servicesEndpoint,
						Env:             env,
						SecurityContext: privileged,
						Resources:       corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}},
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
							Exec: &corev1.ExecAction{Command: []string{"/bin/calico-node", "-shutdown"}}}},
						LivenessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: live}},
							PeriodSeconds: 10, InitialDelaySeconds: 10, FailureThreshold: 6, TimeoutSeconds: 10,
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: ready}},
							PeriodSeconds: 10, TimeoutSeconds: 10,
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "lib-modules", MountPath: layout.Abs(layout.KernelModulesHostPath), ReadOnly: true},
							{Name: "xtables-lock", MountPath: layout.Abs(layout.XtablesLock)},
							{Name: "var-run-calico", MountPath: layout.Abs(layout.CalicoRunDir)},
							{Name: "var-lib-calico", MountPath: layout.Abs(layout.CalicoStateDir)},
							{Name: "policysync", MountPath: layout.Abs(layout.CalicoPolicySyncDir)},
							{Name: "bpffs", MountPath: "/sys/fs/bpf"},
							{Name: "cni-log-dir", MountPath: layout.Abs(layout.CalicoCNILogDir), ReadOnly: true},
						},
					}},
					Volumes: []corev1.Volume{
						hostPath("lib-modules", layout.Abs(layout.KernelModulesHostPath), ""),
						hostPath("var-run-calico", layout.Abs(layout.CalicoRunDir), corev1.HostPathDirectoryOrCreate),
						hostPath("var-lib-calico", layout.Abs(layout.CalicoStateDir), corev1.HostPathDirectoryOrCreate),
						hostPath("xtables-lock", layout.Abs(layout.XtablesLock), corev1.HostPathFileOrCreate),
						hostPath("sys-fs", "/sys/fs/", corev1.HostPathDirectoryOrCreate),
						hostPath("bpffs", "/sys/fs/bpf", corev1.HostPathDirectory),
						hostPath("nodeproc", "/proc", ""),
						hostPath("cni-bin-dir", layout.Abs(layout.CNIBinDir), corev1.HostPathDirectoryOrCreate),
						{Name: "cni-net-dir-unused", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						hostPath("cni-log-dir", layout.Abs(layout.CalicoCNILogDir), ""),
						hostPath("host-local-net-dir", layout.Abs(layout.CNIStateDir), ""),
						hostPath("policysync", layout.Abs(layout.CalicoPolicySyncDir), corev1.HostPathDirectoryOrCreate),
					},
				},
			},
		},
	}
}

// calicoRBAC is upstream's ClusterRoles and bindings, but for the CNI
// plugin's: kcompile's calico-kubeconfig authenticates as the user
// "calico-cni" (compiler/pki), so the role is bound to that user and not
// to the calico-cni-plugin service account.
func calicoRBAC() []runtime.Object {
	rule := func(group string, resources, verbs []string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: verbs}
	}
	role := func(name string, rules ...rbacv1.PolicyRule) runtime.Object {
		return &rbacv1.ClusterRole{
			TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"),
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules:      rules,
		}
	}
	binding := func(name string, subject rbacv1.Subject) runtime.Object {
		return &rbacv1.ClusterRoleBinding{
			TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{subject},
		}
	}
	sa := func(name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: "ServiceAccount", Name: name, Namespace: "kube-system"}
	}
	user := func(name string) rbacv1.Subject {
		return rbacv1.Subject{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: name}
	}
	const calico = "crd.projectcalico.org"
	s := func(v ...string) []string { return v }
	manage := s("get", "list", "create", "update", "delete")
	return []runtime.Object{
		role("calico-kube-controllers",
			rule("", s("nodes"), s("watch", "list", "get")),
			rule("", s("pods"), s("get", "list", "watch")),
			rule("", s("services", "services/status"), s("get", "list", "update", "watch")),
			rule(calico, s("ipreservations"), s("list")),
			rule(calico, s("blockaffinities", "ipamblocks", "ipamhandles", "ipamconfigs", "tiers"), s("get", "list", "create", "update", "delete", "watch")),
			rule(calico, s("ippools"), s("list", "watch")),
			rule(calico, s("hostendpoints"), s("get", "list", "create", "update", "delete", "watch")),
			rule(calico, s("clusterinformations"), s("get", "list", "create", "update", "watch")),
			rule(calico, s("kubecontrollersconfigurations"), s("get", "list", "create", "update", "watch")),
		),
		role("calico-node",
			// install-cni mints calico-cni-plugin tokens.
			rbacv1.PolicyRule{APIGroups: s(""), Resources: s("serviceaccounts/token"), ResourceNames: s("calico-cni-plugin"), Verbs: s("create")},
			rule("", s("pods", "nodes", "namespaces"), s("get")),
			rule("discovery.k8s.io", s("endpointslices"), s("watch", "list")),
			rule("", s("endpoints", "services"), s("watch", "list", "get")),
			rule("", s("configmaps"), s("get")),
			rule("", s("nodes/status"), s("patch", "update")),
			rule("networking.k8s.io", s("networkpolicies"), s("watch", "list")),
			rule("policy.networking.k8s.io", s("adminnetworkpolicies", "baselineadminnetworkpolicies"), s("watch", "list")),
			rule("", s("pods", "namespaces", "serviceaccounts"), s("list", "watch")),
			rule("", s("pods/status"), s("patch")),
			rule(calico, s("globalfelixconfigs", "felixconfigurations", "bgppeers", "bgpfilters", "globalbgpconfigs",
				"bgpconfigurations", "ippools", "ipreservations", "ipamblocks", "globalnetworkpolicies",
				"stagedglobalnetworkpolicies", "networkpolicies", "stagednetworkpolicies", "stagedkubernetesnetworkpolicies",
				"globalnetworksets", "networksets", "clusterinformations", "hostendpoints", "blockaffinities",
				"caliconodestatuses", "tiers"), s("get", "list", "watch")),
			rule(calico, s("tiers"), s("create")),
			rule(calico, s("ippools", "felixconfigurations", "clusterinformations"), s("create", "update")),
			rule(calico, s("caliconodestatuses"), s("update")),
			rule("", s("nodes"), s("get", "list", "watch")),
			rule(calico, s("bgpconfigurations", "bgppeers"), s("create", "update")),
			rule(calico, s("blockaffinities", "ipamblocks", "ipamhandles"), manage),
			rule(calico, s("ipamconfigs"), s("get", "create")),
			rule(calico, s("blockaffinities"), s("watch")),
			rule("apps", s("daemonsets"), s("get")),
		),
		role("calico-cni-plugin",
			rule("", s("pods", "nodes", "namespaces"), s("get")),
			rule("", s("pods/status"), s("patch")),
			rule(calico, s("blockaffinities", "ipamblocks", "ipamhandles", "clusterinformations", "ippools", "ipreservations", "ipamconfigs"), manage),
		),
		// Lets the controller manager's garbage collector read tiers.
		role("calico-tier-getter", rule("projectcalico.org", s("tiers"), s("get"))),
		binding("calico-kube-controllers", sa("calico-kube-controllers")),
		binding("calico-node", sa("calico-node")),
		binding("calico-cni-plugin", user("calico-cni")),
		binding("calico-tier-getter", user("system:kube-controller-manager")),
	}
}

// calicoCRD describes one CustomResourceDefinition of calico.yaml.
type calicoCRD struct {
	group, version, kind, plural string
	namespaced                   bool
	shortNames                   []string
	annotations                  map[string]string
	// status says whether upstream's schema has a status field; subresource
	// whether it is a status subresource.
	status, subresource bool
	// required are upstream's required fields of the object, spec and
	// status; rules its CEL rules on the object.
	required, specRequired, statusRequired []string
	rules                                  apiextensionsv1.ValidationRules
	// spec holds the fields under spec that upstream gives a default.
	spec    map[string]apiextensionsv1.JSONSchemaProps
	columns []apiextensionsv1.CustomResourceColumnDefinition
}

// calicoCRDs are the CustomResourceDefinitions calico.yaml ships: the
// crd.projectcalico.org group, Calico's datastore, and the
// policy.networking.k8s.io AdminNetworkPolicy and
// BaselineAdminNetworkPolicy, which Felix lists and watches and without
// which its datastore sync would not complete.
//
// Their schemas are not upstream's in full. Upstream's are generated from
// the Go types (some 9,000 lines, mostly felixconfigurations and the
// policy rules); here each keeps what an install needs to behave as
// upstream's, and no more:
//   - the structural skeleton the API server requires: the object's
//     apiVersion, kind, metadata, spec and, where upstream has one,
//     status, with the object's, the spec's and the status's required
//     fields and the object's CEL rules;
//   - every default upstream declares, at its path (IPAMBlock
//     spec.sequenceNumber; the TCP protocol of (Baseline)AdminNetworkPolicy
//     ports), since defaults change what is stored. The two default: ""
//     of secretKeyRef.name in BGPConfiguration and BGPPeer are left out:
//     an empty name is what Calico reads for a missing one;
//   - names, scope, versions, subresources, printer columns and
//     annotations (api-approved.kubernetes.io is required of the
//     *.k8s.io group) exactly;
//   - below spec and status, x-kubernetes-preserve-unknown-fields.
//
// What is given up is the field-level validation and pruning below spec
// and status. The crd.projectcalico.org objects are Calico's storage:
// users edit projectcalico.org/v3 resources through calicoctl or the
// Calico API server, which validate and default them before Calico's
// clients write these (docs.tigera.io, "calicoctl and kubectl"), and
// Calico decodes them leniently, so storing an unknown field changes
// nothing it reads. For the AdminNetworkPolicy
// kinds, which users write with kubectl, an invalid policy is accepted by
// the API server and rejected by Calico's conversion instead (in its
// log); applying upstream's CRDs over these restores the validation.
func calicoCRDs() []*apiextensionsv1.CustomResourceDefinition {
	const calico = "crd.projectcalico.org"
	c := func(kind, plural string, namespaced bool) calicoCRD {
		return calicoCRD{group: calico, version: "v1", kind: kind, plural: plural, namespaced: namespaced}
	}
	blockAffinities := c("BlockAffinity", "blockaffinities", false)
	blockAffinities.specRequired = []string{"cidr", "deleted", "node", "state"}
	nodeStatuses := c("CalicoNodeStatus", "caliconodestatuses", false)
	nodeStatuses.status = true
	ipamBlocks := c("IPAMBlock", "ipamblocks", false)
	ipamBlocks.specRequired = []string{"allocations", "attributes", "cidr", "strictAffinity", "unallocated"}
	ipamBlocks.spec = map[string]apiextensionsv1.JSONSchemaProps{
		"sequenceNumber": {Type: "integer", Format: "int64", Default: &apiextensionsv1.JSON{Raw: []byte("0")}},
	}
	ipamConfigs := c("IPAMConfig", "ipamconfigs", false)
	ipamConfigs.specRequired = []string{"autoAllocateBlocks", "strictAffinity"}
	ipamHandles := c("IPAMHandle", "ipamhandles", false)
	ipamHandles.specRequired = []string{"block", "handleID"}
	ipPools := c("IPPool", "ippools", false)
	ipPools.specRequired = []string{"cidr"}
	controllersConfigs := c("KubeControllersConfiguration", "kubecontrollersconfigurations", false)
	controllersConfigs.status = true
	controllersConfigs.specRequired = []string{"controllers"}

	// (Baseline)AdminNetworkPolicy: network-policy-api v0.1.1, experimental.
	tcp := apiextensionsv1.JSONSchemaProps{Type: "string", Default: &apiextensionsv1.JSON{Raw: []byte(`"TCP"`)}}
	ports := calicoArray(calicoOpen(map[string]apiextensionsv1.JSONSchemaProps{
		"portNumber": calicoOpen(map[string]apiextensionsv1.JSONSchemaProps{"protocol": tcp}),
		"portRange":  calicoOpen(map[string]apiextensionsv1.JSONSchemaProps{"protocol": tcp}),
	}))
	policyRules := calicoArray(calicoOpen(map[string]apiextensionsv1.JSONSchemaProps{"ports": ports}))
	adminPolicy := func(kind, plural, short string) calicoCRD {
		return calicoCRD{
			group: "policy.networking.k8s.io", version: "v1alpha1", kind: kind, plural: plural,
			shortNames: []string{short},
			annotations: map[string]string{
				"api-approved.kubernetes.io":              "https://github.com/kubernetes-sigs/network-policy-api/pull/30",
				"policy.networking.k8s.io/bundle-version": "v0.1.1",
				"policy.networking.k8s.io/channel":        "experimental",
			},
			status: true, subresource: true,
			required: []string{"metadata", "spec"}, specRequired: []string{"subject"}, statusRequired: []string{"conditions"},
			spec:    map[string]apiextensionsv1.JSONSchemaProps{"ingress": policyRules, "egress": policyRules},
			columns: []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"}},
		}
	}
	anp := adminPolicy("AdminNetworkPolicy", "adminnetworkpolicies", "anp")
	anp.specRequired = []string{"priority", "subject"}
	anp.columns = append([]apiextensionsv1.CustomResourceColumnDefinition{{Name: "Priority", Type: "string", JSONPath: ".spec.priority"}}, anp.columns...)
	banp := adminPolicy("BaselineAdminNetworkPolicy", "baselineadminnetworkpolicies", "banp")
	banp.rules = apiextensionsv1.ValidationRules{{
		Rule:    "self.metadata.name == 'default'",
		Message: `Only one baseline admin network policy with metadata.name="default" can be created in the cluster`,
	}}

	all := []calicoCRD{
		c("BGPConfiguration", "bgpconfigurations", false),
		c("BGPFilter", "bgpfilters", false),
		c("BGPPeer", "bgppeers", false),
		blockAffinities,
		nodeStatuses,
		c("ClusterInformation", "clusterinformations", false),
		c("FelixConfiguration", "felixconfigurations", false),
		c("GlobalNetworkPolicy", "globalnetworkpolicies", false),
		c("GlobalNetworkSet", "globalnetworksets", false),
		c("HostEndpoint", "hostendpoints", false),
		ipamBlocks,
		ipamConfigs,
		ipamHandles,
		ipPools,
		c("IPReservation", "ipreservations", false),
		controllersConfigs,
		c("NetworkPolicy", "networkpolicies", true),
		c("NetworkSet", "networksets", true),
		c("StagedGlobalNetworkPolicy", "stagedglobalnetworkpolicies", false),
		c("StagedKubernetesNetworkPolicy", "stagedkubernetesnetworkpolicies", true),
		c("StagedNetworkPolicy", "stagednetworkpolicies", true),
		c("Tier", "tiers", false),
		anp,
		banp,
	}
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(all))
	for _, d := range all {
		out = append(out, d.definition())
	}
	return out
}

func (d calicoCRD) definition() *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	spec := calicoOpen(d.spec)
	spec.Required = d.specRequired
	root := apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: d.required,
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"apiVersion": str,
			"kind":       str,
			"metadata":   {Type: "object"},
			"spec":       spec,
		},
		XValidations: d.rules,
	}
	if d.status {
		status := calicoOpen(nil)
		status.Required = d.statusRequired
		root.Properties["status"] = status
	}
	scope := apiextensionsv1.ClusterScoped
	if d.namespaced {
		scope = apiextensionsv1.NamespaceScoped
	}
	version := apiextensionsv1.CustomResourceDefinitionVersion{
		Name: d.version, Served: true, Storage: true,
		Schema:                   &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &root},
		AdditionalPrinterColumns: d.columns,
	}
	if d.subresource {
		version.Subresources = &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   typeMeta("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
		ObjectMeta: metav1.ObjectMeta{Name: d.plural + "." + d.group, Annotations: d.annotations},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: d.group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Kind: d.kind, ListKind: d.kind + "List", Plural: d.plural, Singular: strings.ToLower(d.kind), ShortNames: d.shortNames,
			},
			Scope:    scope,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{version},
		},
	}
}

// calicoOpen is an object schema that keeps every field, with the given
// fields specified.
func calicoOpen(props map[string]apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr(true), Properties: props}
}

func calicoArray(items apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &items}}
}
