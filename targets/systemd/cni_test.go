package systemd

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/layout"
)

// cniDecoded renders objects with manifest, decodes them back strictly and
// fails unless every object survives.
func cniDecoded(t *testing.T, objs []runtime.Object) []runtime.Object {
	t.Helper()
	data, err := manifest(objs...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeManifest(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if len(out) != len(objs) {
		t.Fatalf("%d objects rendered, %d decoded", len(objs), len(out))
	}
	return out
}

// cniFind returns the decoded object of type T named name.
func cniFind[T runtime.Object](t *testing.T, objs []runtime.Object, name string) T {
	t.Helper()
	for _, o := range objs {
		if x, ok := o.(T); ok {
			if m, ok := any(x).(interface{ GetName() string }); ok && m.GetName() == name {
				return x
			}
		}
	}
	var zero T
	t.Fatalf("no %T %s in %d objects", zero, name, len(objs))
	return zero
}

// cniTolerates reports whether tolerations let a pod onto a node with the
// taint, with the API's matching rules for Exists and Equal.
func cniTolerates(tols []corev1.Toleration, taint ir.Taint) bool {
	for _, tol := range tols {
		if tol.Effect != "" && string(tol.Effect) != taint.Effect {
			continue
		}
		switch {
		case tol.Key == "" && tol.Operator == corev1.TolerationOpExists:
			return true
		case tol.Key != taint.Key:
			continue
		case tol.Operator == corev1.TolerationOpExists, tol.Value == taint.Value:
			return true
		}
	}
	return false
}

func cniContainers(spec corev1.PodSpec) []corev1.Container {
	return append(slices.Clone(spec.InitContainers), spec.Containers...)
}

func cniEnv(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func flannelNetConfOf(t *testing.T, objs []runtime.Object) flannelNetConf {
	t.Helper()
	cm := cniFind[*corev1.ConfigMap](t, objs, "kube-flannel-cfg")
	var conf flannelNetConf
	dec := json.NewDecoder(strings.NewReader(cm.Data["net-conf.json"]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&conf); err != nil {
		t.Fatalf("net-conf.json: %v\n%s", err, cm.Data["net-conf.json"])
	}
	return conf
}

func TestFlannelManifestsDecodeStrictly(t *testing.T) {
	for _, name := range []string{"single-node", "dual-stack"} {
		t.Run(name, func(t *testing.T) {
			c := compileExample(t, name)
			if c.Network.CNI.Plugin != "flannel" {
				t.Fatalf("%s uses %s", name, c.Network.CNI.Plugin)
			}
			objs := cniDecoded(t, flannelManifests(c))
			ns := cniFind[*corev1.Namespace](t, objs, "kube-flannel")
			if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
				t.Errorf("namespace labels %v", ns.Labels)
			}
			ds := cniFind[*appsv1.DaemonSet](t, objs, "kube-flannel-ds")
			if ds.Namespace != "kube-flannel" || !ds.Spec.Template.Spec.HostNetwork || ds.Spec.Template.Spec.PriorityClassName != "system-node-critical" {
				t.Errorf("DaemonSet %s/%s hostNetwork %v priority %q", ds.Namespace, ds.Name, ds.Spec.Template.Spec.HostNetwork, ds.Spec.Template.Spec.PriorityClassName)
			}
			flanneld := ds.Spec.Template.Spec.Containers[0]
			if !slices.Equal(flanneld.Command, []string{"/opt/bin/flanneld"}) || !slices.Equal(flanneld.Args, []string{"--ip-masq", "--kube-subnet-mgr", "--iface=$(NODE_IP)"}) {
				t.Errorf("flanneld runs %v %v", flanneld.Command, flanneld.Args)
			}
			// $(NODE_IP) expands to the node's address only if the
			// container declares it from the pod's host IP.
			if !slices.ContainsFunc(flanneld.Env, func(e corev1.EnvVar) bool {
				return e.Name == "NODE_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP"
			}) {
				t.Errorf("flanneld has no NODE_IP from status.hostIP: %+v", flanneld.Env)
			}
			if init := ds.Spec.Template.Spec.InitContainers; len(init) != 1 || init[0].Name != "install-cni-plugin" ||
				!slices.Equal(init[0].Args, []string{"-f", "/flannel", "/opt/cni/bin/flannel"}) {
				t.Errorf("init containers %+v", init)
			}
			sa := cniFind[*corev1.ServiceAccount](t, objs, "flannel")
			crb := cniFind[*rbacv1.ClusterRoleBinding](t, objs, "flannel")
			if ds.Spec.Template.Spec.ServiceAccountName != sa.Name || crb.Subjects[0].Namespace != sa.Namespace || crb.RoleRef.Name != "flannel" {
				t.Errorf("service account %s/%s bound as %+v", sa.Namespace, sa.Name, crb.Subjects)
			}
			cr := cniFind[*rbacv1.ClusterRole](t, objs, "flannel")
			if !slices.ContainsFunc(cr.Rules, func(r rbacv1.PolicyRule) bool {
				return slices.Contains(r.Resources, "nodes/status") && slices.Contains(r.Verbs, "patch")
			}) {
				t.Errorf("flannel cannot patch nodes/status: %+v", cr.Rules)
			}
		})
	}
}

func TestFlannelNetConfIsTheSpecs(t *testing.T) {
	c := compileExample(t, "single-node")
	conf := flannelNetConfOf(t, cniDecoded(t, flannelManifests(c)))
	if conf.Network != c.Network.PodCIDRs[0].String() || conf.Network != "10.244.0.0/16" {
		t.Errorf("Network %q, want the pod CIDR %s", conf.Network, c.Network.PodCIDRs[0])
	}
	if conf.EnableIPv6 || conf.IPv6Network != "" || conf.EnableIPv4 != nil {
		t.Errorf("single-stack IPv4 net-conf %+v", conf)
	}
	// flanneld gives pods the backend MTU minus its 50 bytes of VXLAN.
	if conf.Backend.Type != "vxlan" || conf.Backend.MTU-50 != c.Network.PodMTU {
		t.Errorf("Backend %+v for pod MTU %d", conf.Backend, c.Network.PodMTU)
	}
	// flanneld masquerades in kube-proxy's framework.
	if c.Network.KubeProxyMode != "nftables" || !conf.EnableNFTables {
		t.Errorf("kube-proxy mode %s, EnableNFTables %v", c.Network.KubeProxyMode, conf.EnableNFTables)
	}
	ipt := compileExample(t, "single-node")
	ipt.Network.KubeProxyMode = "iptables"
	if conf := flannelNetConfOf(t, cniDecoded(t, flannelManifests(ipt))); conf.EnableNFTables {
		t.Errorf("iptables kube-proxy, flannel on nftables: %+v", conf)
	}

	ds := compileExample(t, "dual-stack")
	conf = flannelNetConfOf(t, cniDecoded(t, flannelManifests(ds)))
	if conf.Network != "10.244.0.0/16" || conf.IPv6Network != "fd00:10:244::/56" || !conf.EnableIPv6 {
		t.Errorf("dual-stack net-conf %+v", conf)
	}

	v6 := compileExample(t, "single-node")
	v6.Network.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("fd00:10:244::/56")}
	conf = flannelNetConfOf(t, cniDecoded(t, flannelManifests(v6)))
	if conf.Network != "" || conf.EnableIPv4 == nil || *conf.EnableIPv4 || conf.IPv6Network != "fd00:10:244::/56" || !conf.EnableIPv6 {
		t.Errorf("IPv6-only net-conf %+v", conf)
	}
}

func TestFlannelBackendPerMode(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		overhead int
	}{{"vxlan", 50}, {"host-gw", 0}, {"wireguard", 80}} {
		c := compileExample(t, "single-node")
		c.Network.CNI.Mode = tc.mode
		c.Network.PodMTU = c.Network.MTU - tc.overhead
		conf := flannelNetConfOf(t, cniDecoded(t, flannelManifests(c)))
		if conf.Backend.Type != tc.mode {
			t.Errorf("mode %s: backend Type %q", tc.mode, conf.Backend.Type)
		}
		// host-gw has no MTU option: pods get the interface's.
		want := c.Network.MTU
		if tc.mode == "host-gw" {
			want = 0
		}
		if conf.Backend.MTU != want {
			t.Errorf("mode %s: backend MTU %d, want %d", tc.mode, conf.Backend.MTU, want)
		}
	}
}

// TestFlannelInstallsTheCNIConf: the nodes' trees carry no flannel
// conflist (the kubelet would report their network ready before flannel
// runs); flanneld's container installs the ConfigMap's, the plugin's
// configuration for every node, once flanneld has written subnet.env:
// its postStart hook is run here by the shell, on a scratch root.
func TestFlannelInstallsTheCNIConf(t *testing.T) {
	c := compileExample(t, "dual-stack")
	objs := cniDecoded(t, flannelManifests(c))
	cm := cniFind[*corev1.ConfigMap](t, objs, "kube-flannel-cfg")
	for _, n := range c.Nodes {
		if !n.RunsPods() {
			continue
		}
		if _, data, err := cniConfList(c, n); err != nil || cm.Data["cni-conf.json"] != string(data) {
			t.Errorf("%s: the node's configuration is\n%s (%v)\nbut cni-conf.json is\n%s", n.Name, data, err, cm.Data["cni-conf.json"])
		}
	}
	tree, err := Build(fixture.Material(t, "dual-stack", nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tree.Files() {
		if strings.Contains(f.Path, "/"+layout.CNIConfDir) {
			t.Errorf("the tree has %s: flannel's DaemonSet installs the CNI configuration", f.Path)
		}
	}

	spec := cniFind[*appsv1.DaemonSet](t, objs, "kube-flannel-ds").Spec.Template.Spec
	flanneld := spec.Containers[0]
	if flanneld.Lifecycle == nil || flanneld.Lifecycle.PostStart == nil || flanneld.Lifecycle.PostStart.Exec == nil {
		t.Fatalf("flanneld has no postStart command: %+v", flanneld.Lifecycle)
	}
	argv := flanneld.Lifecycle.PostStart.Exec.Command
	if len(argv) != 3 || argv[0] != "/bin/sh" || argv[1] != "-c" {
		t.Fatalf("postStart runs %q", argv)
	}
	// Each directory the script uses, where it lies in the container:
	// mounted from the right source.
	root := t.TempDir()
	script := argv[2]
	for dir, want := range map[string]string{
		"/run/flannel/":      "host:/run/flannel",
		"/etc/cni/net.d/":    "host:/etc/cni/net.d",
		"/etc/kube-flannel/": "configmap:kube-flannel-cfg",
	} {
		got := "nothing"
		for _, m := range flanneld.VolumeMounts {
			if strings.TrimSuffix(m.MountPath, "/")+"/" != dir {
				continue
			}
			for _, v := range spec.Volumes {
				switch {
				case v.Name != m.Name:
				case v.ConfigMap != nil:
					got = "configmap:" + v.ConfigMap.Name
				case v.HostPath != nil:
					got = "host:" + v.HostPath.Path
				}
			}
		}
		if got != want {
			t.Errorf("%s in flanneld's container is %s, want %s", dir, got, want)
		}
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		script = strings.ReplaceAll(script, dir, filepath.Join(root, dir)+"/")
	}
	if err := os.WriteFile(filepath.Join(root, "etc/kube-flannel/cni-conf.json"), []byte(cm.Data["cni-conf.json"]), 0o644); err != nil {
		t.Fatal(err)
	}
	conflist := filepath.Join(root, "etc/cni/net.d/10-flannel.conflist")
	cmd := exec.Command("/bin/sh", "-c", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if _, err := os.Stat(conflist); err == nil {
		t.Errorf("the conflist was installed before subnet.env was written")
	}
	if err := os.WriteFile(filepath.Join(root, "run/flannel/subnet.env"), []byte("FLANNEL_SUBNET=10.244.0.1/24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("postStart: %v: %s", err, stderr.Bytes())
	}
	got, err := os.ReadFile(conflist)
	if err != nil || string(got) != cm.Data["cni-conf.json"] {
		t.Errorf("installed %s (%v), want cni-conf.json:\n%s", got, err, cm.Data["cni-conf.json"])
	}
	if left, _ := filepath.Glob(filepath.Join(root, "etc/cni/net.d/.*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestFlannelImages(t *testing.T) {
	c := compileExample(t, "single-node")
	ds := cniFind[*appsv1.DaemonSet](t, cniDecoded(t, flannelManifests(c)), "kube-flannel-ds")
	spec := ds.Spec.Template.Spec
	if c.Network.CNI.Version != "0.28.10" ||
		spec.Containers[0].Image != "ghcr.io/flannel-io/flannel:v0.28.10" ||
		spec.InitContainers[0].Image != "ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3" {
		t.Errorf("version %s: images %s, %s", c.Network.CNI.Version, spec.Containers[0].Image, spec.InitContainers[0].Image)
	}

	c.Network.CNI.Images = map[string]string{
		"flannel":            "registry.example.com/flannel@sha256:0123",
		"flannel-cni-plugin": "registry.example.com/flannel-cni-plugin:v9",
	}
	ds = cniFind[*appsv1.DaemonSet](t, cniDecoded(t, flannelManifests(c)), "kube-flannel-ds")
	spec = ds.Spec.Template.Spec
	if spec.Containers[0].Image != "registry.example.com/flannel@sha256:0123" || spec.InitContainers[0].Image != "registry.example.com/flannel-cni-plugin:v9" {
		t.Errorf("overridden images %s, %s", spec.Containers[0].Image, spec.InitContainers[0].Image)
	}

	for version, want := range map[string]string{
		"0.23.0": "v1.2.0", "0.24.1": "v1.2.0", "0.25.6": "v1.5.1-flannel2", "0.26.1": "v1.5.1-flannel2",
		"0.26.3": "v1.6.0-flannel1", "0.27.3": "v1.7.1-flannel1", "0.27.4": "v1.8.0-flannel1", "0.28.0": "v1.8.0-flannel1",
		"0.28.2": "v1.9.0-flannel1", "0.28.10": "v1.9.1-flannel3", "v0.28.5": "v1.9.1-flannel1",
	} {
		if got := flannelCNIPluginTag(version); got != want {
			t.Errorf("flannel %s pairs with flannel-cni-plugin %s, want %s", version, got, want)
		}
	}
}

func TestFlannelRunsOnEveryPodNode(t *testing.T) {
	for _, name := range []string{"single-node", "dual-stack"} {
		c := compileExample(t, name)
		ds := cniFind[*appsv1.DaemonSet](t, cniDecoded(t, flannelManifests(c)), "kube-flannel-ds")
		tols := ds.Spec.Template.Spec.Tolerations
		for _, taint := range []ir.Taint{
			{Key: "node-role.kubernetes.io/control-plane", Effect: "NoSchedule"},
			{Key: "dedicated", Value: "db", Effect: "NoExecute"},
		} {
			if !cniTolerates(tols, taint) {
				t.Errorf("%s: flannel does not tolerate %+v", name, taint)
			}
		}
		for _, n := range c.Nodes {
			for _, taint := range n.Taints {
				if !cniTolerates(tols, taint) {
					t.Errorf("%s: flannel does not tolerate %+v of %s", name, taint, n.Name)
				}
			}
		}
	}
}

// ciliumExample is a compiled example switched to cilium with a mode.
func ciliumExample(t *testing.T, name, mode string, kpr, wireguard bool) *ir.Cluster {
	t.Helper()
	c := compileExample(t, name)
	c.Network.CNI = ir.CNI{Plugin: "cilium", Version: "1.18.2", Mode: mode, KubeProxyReplacement: kpr, WireGuard: wireguard}
	overhead := map[string]int{"vxlan": 50, "geneve": 50}[mode]
	if wireguard {
		overhead = 80
	}
	c.Network.PodMTU = c.Network.MTU - overhead
	return c
}

func TestCiliumManifestsDecodeStrictly(t *testing.T) {
	c := compileExample(t, "external-etcd")
	objs := cniDecoded(t, ciliumManifests(c))
	for _, o := range objs {
		if o.GetObjectKind().GroupVersionKind().Kind == "CustomResourceDefinition" {
			t.Errorf("a CRD is in the manifest: the operator registers them")
		}
	}
	cniFind[*corev1.ServiceAccount](t, objs, "cilium")
	cniFind[*corev1.ServiceAccount](t, objs, "cilium-operator")
	cniFind[*rbacv1.Role](t, objs, "cilium-config-agent")
	for _, name := range []string{"cilium", "cilium-operator"} {
		crb := cniFind[*rbacv1.ClusterRoleBinding](t, objs, name)
		if crb.RoleRef.Name != name || crb.Subjects[0].Name != name || crb.Subjects[0].Namespace != "kube-system" {
			t.Errorf("ClusterRoleBinding %s: %+v %+v", name, crb.RoleRef, crb.Subjects)
		}
		cniFind[*rbacv1.ClusterRole](t, objs, name)
	}
	op := cniFind[*rbacv1.ClusterRole](t, objs, "cilium-operator")
	if !slices.ContainsFunc(op.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "customresourcedefinitions") && slices.Contains(r.Verbs, "create")
	}) {
		t.Errorf("the operator may not create the CRDs it registers: %+v", op.Rules)
	}
	ds := cniFind[*appsv1.DaemonSet](t, objs, "cilium")
	var init []string
	for _, ic := range ds.Spec.Template.Spec.InitContainers {
		init = append(init, ic.Name)
	}
	if want := []string{"config", "mount-cgroup", "apply-sysctl-overwrites", "mount-bpf-fs", "clean-cilium-state", "install-cni-binaries"}; !slices.Equal(init, want) {
		t.Errorf("init containers %v, want %v", init, want)
	}
	cniFind[*corev1.Namespace](t, objs, "cilium-secrets")
	cniFind[*rbacv1.Role](t, objs, "cilium-operator-tlsinterception-secrets")
	cniFind[*appsv1.Deployment](t, objs, "cilium-operator")
}

func TestCiliumConfigIsTheSpecs(t *testing.T) {
	c := compileExample(t, "external-etcd")
	objs := cniDecoded(t, ciliumManifests(c))
	cfg := cniFind[*corev1.ConfigMap](t, objs, "cilium-config").Data
	mtu, _ := strconv.Atoi(cfg["mtu"])
	for key, want := range map[string]string{
		"kube-proxy-replacement": "true", "routing-mode": "tunnel", "tunnel-protocol": "vxlan",
		"ipam": "kubernetes", "enable-ipv4": "true", "enable-ipv6": "false", "custom-cni-conf": "true",
		"auto-direct-node-routes": "false",
		// The chart's MTU is the underlying network's: Cilium takes the
		// 50 bytes of VXLAN off for the pod routes.
		"mtu": strconv.Itoa(c.Network.MTU),
	} {
		if cfg[key] != want {
			t.Errorf("cilium-config %s = %q, want %q", key, cfg[key], want)
		}
	}
	if mtu-50 != c.Network.PodMTU {
		t.Errorf("mtu %d gives pods %d, the spec's pod MTU is %d", mtu, mtu-50, c.Network.PodMTU)
	}
	for _, key := range []string{"enable-wireguard", "ipv4-native-routing-cidr", "enable-node-port", "write-cni-conf-when-ready"} {
		if v, ok := cfg[key]; ok {
			t.Errorf("cilium-config has %s = %q", key, v)
		}
	}

	// Without kube-proxy every container that talks to the API dials the
	// cluster's endpoint, not the kubernetes Service.
	ds := cniFind[*appsv1.DaemonSet](t, objs, "cilium")
	op := cniFind[*appsv1.Deployment](t, objs, "cilium-operator")
	if c.Endpoint.Host != "api.core.example.com" {
		t.Fatalf("endpoint %s", c.Endpoint.Host)
	}
	for _, ct := range append(cniContainers(ds.Spec.Template.Spec), op.Spec.Template.Spec.Containers...) {
		host, ok := cniEnv(ct, "KUBERNETES_SERVICE_HOST")
		port, _ := cniEnv(ct, "KUBERNETES_SERVICE_PORT")
		needs := slices.Contains([]string{"cilium-agent", "config", "clean-cilium-state", "cilium-operator"}, ct.Name)
		if needs && (host != c.Endpoint.Host || port != strconv.Itoa(c.Endpoint.Port)) || !needs && ok {
			t.Errorf("%s: KUBERNETES_SERVICE_HOST %q PORT %q", ct.Name, host, port)
		}
	}
}

func TestCiliumModes(t *testing.T) {
	c := ciliumExample(t, "external-etcd", "native", false, false)
	cfg := cniFind[*corev1.ConfigMap](t, cniDecoded(t, ciliumManifests(c)), "cilium-config").Data
	for key, want := range map[string]string{
		"routing-mode": "native", "ipv4-native-routing-cidr": c.Network.PodCIDRs[0].String(), "auto-direct-node-routes": "true",
		"kube-proxy-replacement": "false", "enable-node-port": "false", "mtu": strconv.Itoa(c.Network.PodMTU),
	} {
		if cfg[key] != want {
			t.Errorf("native: cilium-config %s = %q, want %q", key, cfg[key], want)
		}
	}
	ds := cniFind[*appsv1.DaemonSet](t, cniDecoded(t, ciliumManifests(c)), "cilium")
	for _, ct := range cniContainers(ds.Spec.Template.Spec) {
		if v, ok := cniEnv(ct, "KUBERNETES_SERVICE_HOST"); ok {
			t.Errorf("with kube-proxy, %s dials %s instead of the kubernetes Service", ct.Name, v)
		}
	}

	c = ciliumExample(t, "external-etcd", "geneve", true, true)
	cfg = cniFind[*corev1.ConfigMap](t, cniDecoded(t, ciliumManifests(c)), "cilium-config").Data
	if cfg["tunnel-protocol"] != "geneve" || cfg["routing-mode"] != "tunnel" || cfg["enable-wireguard"] != "true" {
		t.Errorf("geneve with WireGuard: %v", cfg)
	}
	// WireGuard over a tunnel costs Cilium 130 bytes: the configured MTU
	// never exceeds the node's.
	if mtu, _ := strconv.Atoi(cfg["mtu"]); mtu > c.Network.MTU || mtu-130 > c.Network.PodMTU {
		t.Errorf("mtu %s for node MTU %d and pod MTU %d", cfg["mtu"], c.Network.MTU, c.Network.PodMTU)
	}

	c = ciliumExample(t, "dual-stack", "native", false, false)
	cfg = cniFind[*corev1.ConfigMap](t, cniDecoded(t, ciliumManifests(c)), "cilium-config").Data
	if cfg["enable-ipv4"] != "true" || cfg["enable-ipv6"] != "true" ||
		cfg["ipv4-native-routing-cidr"] != "10.244.0.0/16" || cfg["ipv6-native-routing-cidr"] != "fd00:10:244::/56" {
		t.Errorf("dual-stack native: %v", cfg)
	}

	c = ciliumExample(t, "dual-stack", "vxlan", false, false)
	c.Network.PodCIDRs = c.Network.PodCIDRs[1:]
	objs := cniDecoded(t, ciliumManifests(c))
	cfg = cniFind[*corev1.ConfigMap](t, objs, "cilium-config").Data
	op := cniFind[*appsv1.Deployment](t, objs, "cilium-operator")
	if cfg["enable-ipv4"] != "false" || cfg["enable-ipv6"] != "true" || cfg["operator-api-serve-addr"] != "[::1]:9234" ||
		op.Spec.Template.Spec.Containers[0].LivenessProbe.HTTPGet.Host != "::1" {
		t.Errorf("IPv6-only: %v, operator probes %s", cfg, op.Spec.Template.Spec.Containers[0].LivenessProbe.HTTPGet.Host)
	}
}

func TestCiliumImages(t *testing.T) {
	c := compileExample(t, "external-etcd")
	check := func(agent, operator string) {
		t.Helper()
		objs := cniDecoded(t, ciliumManifests(c))
		ds := cniFind[*appsv1.DaemonSet](t, objs, "cilium")
		for _, ct := range cniContainers(ds.Spec.Template.Spec) {
			if ct.Image != agent {
				t.Errorf("%s runs %s, want %s", ct.Name, ct.Image, agent)
			}
		}
		op := cniFind[*appsv1.Deployment](t, objs, "cilium-operator")
		if got := op.Spec.Template.Spec.Containers[0].Image; got != operator {
			t.Errorf("operator runs %s, want %s", got, operator)
		}
	}
	if c.Network.CNI.Version != "1.18.2" {
		t.Fatalf("external-etcd has cilium %s", c.Network.CNI.Version)
	}
	check("quay.io/cilium/cilium:v1.18.2", "quay.io/cilium/operator-generic:v1.18.2")
	c.Network.CNI.Images = map[string]string{
		"cilium-agent":    "mirror.example.com/cilium/cilium@sha256:858f",
		"cilium-operator": "mirror.example.com/cilium/operator-generic:v1.18.2",
	}
	check("mirror.example.com/cilium/cilium@sha256:858f", "mirror.example.com/cilium/operator-generic:v1.18.2")
}

func TestCiliumRunsOnControlPlaneNodes(t *testing.T) {
	c := compileExample(t, "external-etcd")
	objs := cniDecoded(t, ciliumManifests(c))
	ds := cniFind[*appsv1.DaemonSet](t, objs, "cilium")
	op := cniFind[*appsv1.Deployment](t, objs, "cilium-operator")
	cp := ir.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: "NoSchedule"}
	if !cniTolerates(ds.Spec.Template.Spec.Tolerations, cp) || !cniTolerates(op.Spec.Template.Spec.Tolerations, cp) {
		t.Errorf("agent %+v or operator %+v does not tolerate the control plane", ds.Spec.Template.Spec.Tolerations, op.Spec.Template.Spec.Tolerations)
	}
	for _, n := range c.Nodes {
		for _, taint := range n.Taints {
			if !cniTolerates(ds.Spec.Template.Spec.Tolerations, taint) {
				t.Errorf("the agent does not tolerate %+v of %s", taint, n.Name)
			}
		}
	}
	if !cniTolerates(ds.Spec.Template.Spec.Tolerations, ir.Taint{Key: "dedicated", Value: "db", Effect: "NoExecute"}) {
		t.Errorf("the agent leaves NoExecute-tainted nodes without a network")
	}
	if *op.Spec.Replicas != 2 || op.Spec.Strategy.RollingUpdate.MaxUnavailable.String() != "50%" {
		t.Errorf("operator replicas %d, maxUnavailable %s", *op.Spec.Replicas, op.Spec.Strategy.RollingUpdate.MaxUnavailable)
	}

	one := ciliumExample(t, "single-node", "vxlan", false, false)
	op = cniFind[*appsv1.Deployment](t, cniDecoded(t, ciliumManifests(one)), "cilium-operator")
	if *op.Spec.Replicas != 1 || op.Spec.Strategy.RollingUpdate.MaxUnavailable.String() != "100%" {
		t.Errorf("single node: operator replicas %d, maxUnavailable %s", *op.Spec.Replicas, op.Spec.Strategy.RollingUpdate.MaxUnavailable)
	}
}

// After a reboot, flannel's CNI configuration is gone until flanneld has
// leased the node's subnet again: systemd-tmpfiles removes it at boot
// (--boot, as systemd-tmpfiles-setup.service runs it) and at no other run.
func TestFlannelConfRemovedAtBoot(t *testing.T) {
	c := compileExample(t, "dual-stack")
	tree, err := Build(fixture.Material(t, "dual-stack", nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	for _, n := range c.Nodes {
		if _, ok := tree.Get(layout.NodeTree(n.Name, layout.FlannelTmpfilesConf)); ok != n.RunsPods() {
			t.Errorf("%s (runs pods: %v) has %s: %v", n.Name, n.RunsPods(), layout.FlannelTmpfilesConf, ok)
		}
		// One node shows the boot's run; the file is the same on each.
		if !n.RunsPods() || ran {
			continue
		}
		ran = true
		root := t.TempDir()
		layNode(t, tree, n.Name, root)
		conf := filepath.Join(root, layout.CNIConfDir, "10-flannel.conflist")
		if err := os.MkdirAll(filepath.Dir(conf), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(conf, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		run := func(args ...string) {
			t.Helper()
			args = append([]string{"--root=" + root}, append(args, filepath.Join(root, layout.FlannelTmpfilesConf))...)
			if out, err := exec.Command("systemd-tmpfiles", args...).CombinedOutput(); err != nil {
				t.Fatalf("systemd-tmpfiles %v: %v\n%s", args, err, out)
			}
		}
		run("--create", "--remove")
		if _, err := os.Stat(conf); err != nil {
			t.Errorf("%s: the configuration is gone without a boot: %v", n.Name, err)
		}
		run("--create", "--remove", "--boot")
		if _, err := os.Stat(conf); !os.IsNotExist(err) {
			t.Errorf("%s: the configuration is still there after the boot's run: %v", n.Name, err)
		}
	}
	if !ran {
		t.Fatal("dual-stack has no node that runs pods")
	}
}
