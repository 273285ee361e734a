package systemd

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
)

// flannelNamespace is where flannel's kube-flannel.yml puts its objects.
const flannelNamespace = "kube-flannel"

// The programs the flannel images hold, where the DaemonSet runs them:
// up's stand-in images (runtimes/nspawn/images) put theirs there too.
const (
	FlanneldProgram  = "/opt/bin/flanneld"
	FlannelCNIPlugin = "/flannel"
)

// flannelCNIPluginTags pairs flannel releases with the flannel-cni-plugin
// image their kube-flannel.yml installs: each entry holds from its flannel
// version up to the next entry's. Taken from Documentation/kube-flannel.yml
// at each flannel release tag.
func flannelCNIPluginTags() []struct{ from, tag string } {
	return []struct{ from, tag string }{
		{"0.24.0", "v1.2.0"},
		{"0.24.2", "v1.4.0-flannel1"},
		{"0.25.2", "v1.4.1-flannel1"},
		{"0.25.5", "v1.5.1-flannel1"},
		{"0.25.6", "v1.5.1-flannel2"},
		{"0.26.2", "v1.6.0-flannel1"},
		{"0.26.4", "v1.6.2-flannel1"},
		{"0.27.0", "v1.7.1-flannel1"},
		{"0.27.4", "v1.8.0-flannel1"},
		{"0.28.1", "v1.9.0-flannel1"},
		{"0.28.3", "v1.9.1-flannel1"},
		{"0.28.6", "v1.9.1-flannel2"},
		{"0.28.9", "v1.9.1-flannel3"},
	}
}

// flannelCNIPluginTag is the flannel-cni-plugin tag released with flannel
// version v: that of the newest pairing not after v (the oldest known for
// older releases).
func flannelCNIPluginTag(v string) string {
	tags := flannelCNIPluginTags()
	tag := tags[0].tag
	for _, p := range tags {
		if flannelCompareVersions(p.from, v) <= 0 {
			tag = p.tag
		}
	}
	return tag
}

// flannelCompareVersions orders dotted release versions ("1.18.2", "v0.27.4",
// "1.19.0-rc.1" counts as 1.19.0) numerically, field by field.
func flannelCompareVersions(a, b string) int {
	fields := func(v string) []int {
		v = strings.TrimPrefix(v, "v")
		if i := strings.IndexAny(v, "-+"); i >= 0 {
			v = v[:i]
		}
		var out []int
		for _, f := range strings.Split(v, ".") {
			n, _ := strconv.Atoi(f)
			out = append(out, n)
		}
		return out
	}
	x, y := fields(a), fields(b)
	for i := 0; i < len(x) || i < len(y); i++ {
		var p, q int
		if i < len(x) {
			p = x[i]
		}
		if i < len(y) {
			q = y[i]
		}
		if p != q {
			if p < q {
				return -1
			}
			return 1
		}
	}
	return 0
}

// cniPodCIDRsByFamily splits the cluster's pod CIDRs into its IPv4 and IPv6
// ranges; either may be invalid (absent) in a single-stack cluster.
func cniPodCIDRsByFamily(c *ir.Cluster) (v4, v6 netip.Prefix) {
	for _, p := range c.Network.PodCIDRs {
		if p.Addr().Is4() {
			v4 = p
		} else {
			v6 = p
		}
	}
	return v4, v6
}

// flannelNetConf is flanneld's net-conf.json (Documentation/configuration.md,
// backends.md), in kube-flannel.yml's key order.
type flannelNetConf struct {
	Network        string         `json:"Network,omitempty"`
	EnableIPv4     *bool          `json:"EnableIPv4,omitempty"`
	IPv6Network    string         `json:"IPv6Network,omitempty"`
	EnableIPv6     bool           `json:"EnableIPv6,omitempty"`
	EnableNFTables bool           `json:"EnableNFTables"`
	Backend        flannelBackend `json:"Backend"`
}

type flannelBackend struct {
	// MTU is the outer MTU of the vxlan and wireguard backends: flanneld
	// gives pods MTU minus the backend's overhead.
	MTU  int    `json:"MTU,omitempty"`
	Type string `json:"Type"`
}

// flannelOverhead is what flanneld subtracts from the backend MTU for the
// pod interfaces (pkg/backend/vxlan encapOverhead, wireguard overhead);
// host-gw routes unencapsulated and has no MTU option.
func flannelOverhead(backend string) (int, bool) {
	switch backend {
	case "vxlan":
		return 50, true
	case "wireguard":
		return 80, true
	}
	return 0, false
}

// flannelNetConfJSON is net-conf.json for the spec: the pod CIDR of each
// family and the backend of network.cni.mode, with the outer MTU that
// gives pods the spec's pod MTU.
func flannelNetConfJSON(c *ir.Cluster) string {
	v4, v6 := cniPodCIDRsByFamily(c)
	// Masquerading in the framework kube-proxy programs: an nftables
	// node then needs no iptables at all.
	conf := flannelNetConf{Backend: flannelBackend{Type: c.Network.CNI.Mode}, EnableNFTables: c.Network.KubeProxyMode == "nftables"}
	if conf.Backend.Type == "" {
		conf.Backend.Type = "vxlan"
	}
	if v4.IsValid() {
		conf.Network = v4.String()
	} else {
		conf.EnableIPv4 = ptr(false)
	}
	if v6.IsValid() {
		conf.IPv6Network, conf.EnableIPv6 = v6.String(), true
	}
	if o, ok := flannelOverhead(conf.Backend.Type); ok && c.Network.PodMTU > 0 {
		conf.Backend.MTU = c.Network.PodMTU + o
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("kcompile bug: flannel net-conf.json: %v", err))
	}
	return string(b) + "\n"
}

// flannelTmpfiles removes flannel's CNI configuration at boot, and only
// then ('r!'): its postStart hook installs it once flanneld has leased
// the node's subnet, whose subnet.env is under /run and so gone after a
// reboot. A configuration left from before the reboot would make the
// node Ready again before its pods can get addresses. A kubelet or
// runtime restart leaves it, as flanneld goes on running.
const flannelTmpfiles = "r! /" + layout.CNIConfDir + flannelConfList + "\n"

// flannelInstallCNI waits for flanneld's subnet.env, then installs the
// CNI configuration, whole (the runtime ignores a name that does not end
// in .conflist, .conf or .json). It gives up after 2 minutes: the kubelet then kills
// and restarts the container (a failed postStart hook), whose log says
// why flanneld leased no subnet.
func flannelInstallCNI() string {
	return `i=0
until [ -s ` + layout.Abs(layout.FlannelRunDir) + `/subnet.env ]; do
	i=$((i+1))
	if [ "$i" -gt 1200 ]; then echo "flanneld wrote no subnet.env in 2 minutes" >&2; exit 1; fi
	sleep 0.1
done
cp -f /etc/kube-flannel/cni-conf.json ` + layout.Abs(layout.CNIConfDir) + `.` + flannelConfList + `.tmp
mv -f ` + layout.Abs(layout.CNIConfDir) + `.` + flannelConfList + `.tmp ` + layout.Abs(layout.CNIConfDir) + flannelConfList + `
`
}

// flannelManifests is what flannel's kube-flannel.yml installs for the
// spec: its namespace, RBAC, the kube-flannel-cfg ConfigMap and the
// kube-flannel-ds DaemonSet running flanneld with the Kubernetes subnet
// manager (pod ranges are the controller manager's node CIDRs).
//
// kcompile installs the bridge, host-local and portmap plugins on every
// node itself; the DaemonSet installs the flannel plugin binary and the
// CNI configuration (cni-conf.json of the ConfigMap as
// /etc/cni/net.d/10-flannel.conflist). The kubelet reports a node's
// network ready once the runtime finds a conflist, so one written before
// flanneld has leased the node's subnet (subnet.env) makes a node Ready
// whose pods cannot get addresses: their sandboxes fail, and the kubelet
// retries them only after 10 s. So the node's tree carries none, and
// flanneld's container copies it once subnet.env is written (a postStart
// hook), where upstream's install-cni init container copies it before
// flanneld starts.
func flannelManifests(c *ir.Cluster) []runtime.Object {
	version := c.Network.CNI.Version
	if version == "" {
		version = "0.28.10"
	}
	image := c.Network.CNI.Image("flannel", "ghcr.io/flannel-io/flannel:v"+version)
	pluginImage := c.Network.CNI.Image("flannel-cni-plugin", "ghcr.io/flannel-io/flannel-cni-plugin:"+flannelCNIPluginTag(version))

	flannelCluster := *c
	flannelCluster.Network.CNI.Plugin = "flannel"
	_, cniConf, err := cniConfList(&flannelCluster, ir.Node{})
	if err != nil {
		panic(fmt.Sprintf("kcompile bug: flannel CNI configuration: %v", err))
	}

	appLabels := map[string]string{"tier": "node", "app": "flannel"}
	labels := map[string]string{"tier": "node", "app": "flannel", "k8s-app": "flannel"}
	meta := func(name string, l map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: flannelNamespace, Labels: l}
	}
	k8sApp := map[string]string{"k8s-app": "flannel"}
	hostPath := func(name, path string, typ *corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: typ}}}
	}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}

	return []runtime.Object{
		&corev1.Namespace{
			TypeMeta: typeMeta("v1", "Namespace"),
			ObjectMeta: metav1.ObjectMeta{Name: flannelNamespace, Labels: map[string]string{
				"k8s-app": "flannel", "pod-security.kubernetes.io/enforce": "privileged"}},
		},
		&rbacv1.ClusterRole{
			TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"),
			ObjectMeta: metav1.ObjectMeta{Name: "flannel", Labels: k8sApp},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
			ObjectMeta: metav1.ObjectMeta{Name: "flannel", Labels: k8sApp},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "flannel"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "flannel", Namespace: flannelNamespace}},
		},
		&corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: meta("flannel", k8sApp)},
		&corev1.ConfigMap{
			TypeMeta:   typeMeta("v1", "ConfigMap"),
			ObjectMeta: meta("kube-flannel-cfg", labels),
			Data: map[string]string{
				"cni-conf.json": string(cniConf),
				"net-conf.json": flannelNetConfJSON(c),
			},
		},
		&appsv1.DaemonSet{
			TypeMeta:   typeMeta("apps/v1", "DaemonSet"),
			ObjectMeta: meta("kube-flannel-ds", labels),
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "flannel"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: appLabels},
					Spec: corev1.PodSpec{
						Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
							RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
								MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}},
							}}},
						}},
						HostNetwork:       true,
						PriorityClassName: "system-node-critical",
						// Upstream tolerates every NoSchedule taint (the
						// control plane's among them); the pod network must
						// also stay on nodes the spec taints NoExecute.
						Tolerations: []corev1.Toleration{
							{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
							{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
						},
						ServiceAccountName: "flannel",
						InitContainers: []corev1.Container{{
							Name:         "install-cni-plugin",
							Image:        pluginImage,
							Command:      []string{"cp"},
							Args:         []string{"-f", FlannelCNIPlugin, layout.Abs(layout.CNIBinDir) + "/flannel"},
							VolumeMounts: []corev1.VolumeMount{{Name: "cni-plugin", MountPath: layout.Abs(layout.CNIBinDir)}},
						}},
						Containers: []corev1.Container{{
							Name:    "kube-flannel",
							Image:   image,
							Command: []string{FlanneldProgram},
							// The interface holding the node's address (the
							// kubelet's --node-ip), not the one of the default
							// route, which a node may not have or which may
							// lie on another network.
							Args: []string{"--ip-masq", "--kube-subnet-mgr", "--iface=$(NODE_IP)"},
							Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
								corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("50Mi")}},
							SecurityContext: &corev1.SecurityContext{
								Privileged:   ptr(false),
								Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}},
							},
							Env: []corev1.EnvVar{
								fieldEnv("POD_NAME", "metadata.name"),
								fieldEnv("POD_NAMESPACE", "metadata.namespace"),
								fieldEnv("NODE_IP", "status.hostIP"),
								{Name: "EVENT_QUEUE_DEPTH", Value: "5000"},
								{Name: "CONT_WHEN_CACHE_NOT_READY", Value: "false"},
							},
							Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
								Command: []string{"/bin/sh", "-c", flannelInstallCNI()}}}},
							VolumeMounts: []corev1.VolumeMount{
								{Name: "run", MountPath: layout.Abs(layout.FlannelRunDir)},
								{Name: "flannel-cfg", MountPath: "/etc/kube-flannel/"},
								{Name: "xtables-lock", MountPath: layout.Abs(layout.XtablesLock)},
								{Name: "cni", MountPath: strings.TrimSuffix(layout.Abs(layout.CNIConfDir), "/")},
							},
						}},
						Volumes: []corev1.Volume{
							hostPath("run", layout.Abs(layout.FlannelRunDir), nil),
							hostPath("cni-plugin", layout.Abs(layout.CNIBinDir), nil),
							hostPath("cni", strings.TrimSuffix(layout.Abs(layout.CNIConfDir), "/"), nil),
							{Name: "flannel-cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
								LocalObjectReference: corev1.LocalObjectReference{Name: "kube-flannel-cfg"}}}},
							hostPath("xtables-lock", layout.Abs(layout.XtablesLock), ptr(corev1.HostPathFileOrCreate)),
						},
					},
				},
			},
		},
	}
}
