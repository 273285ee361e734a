package systemd

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/internal/fixture"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
)

// calicoObjects compiles an example, lets edit change it, and returns
// calico's objects as they decode strictly from the rendered manifest.
func calicoObjects(t *testing.T, example string, edit func(c *ir.Cluster)) (*ir.Cluster, []runtime.Object) {
	t.Helper()
	c := compileExample(t, example)
	if c.Network.CNI.Plugin != "calico" {
		c.Network.CNI = ir.CNI{Plugin: "calico", Version: "3.30.3", Mode: "vxlan"}
	}
	if edit != nil {
		edit(c)
	}
	return c, cniDecoded(t, calicoManifests(c))
}

func calicoFind[T runtime.Object](objs []runtime.Object, name string) T {
	var zero T
	for _, o := range objs {
		if x, ok := o.(T); ok {
			if m, ok := o.(interface{ GetName() string }); ok && m.GetName() == name {
				return x
			}
		}
	}
	return zero
}

func calicoDaemonSet(t *testing.T, objs []runtime.Object) *appsv1.DaemonSet {
	t.Helper()
	ds := calicoFind[*appsv1.DaemonSet](objs, "calico-node")
	if ds == nil {
		t.Fatal("no calico-node DaemonSet")
	}
	return ds
}

func calicoContainer(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, ctr := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if ctr.Name == name {
			return ctr
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// calicoEnvOf is the value a container sees for a variable, resolving
// references to the calico-config ConfigMap; ok is false when unset.
func calicoEnvOf(t *testing.T, objs []runtime.Object, ctr corev1.Container, name string) (string, bool) {
	t.Helper()
	for _, e := range ctr.Env {
		if e.Name != name {
			continue
		}
		if e.ValueFrom == nil {
			return e.Value, true
		}
		ref := e.ValueFrom.ConfigMapKeyRef
		if ref == nil {
			t.Fatalf("%s %s is not a value or a ConfigMap key", ctr.Name, name)
		}
		cm := calicoFind[*corev1.ConfigMap](objs, ref.Name)
		if cm == nil {
			t.Fatalf("%s %s refers to ConfigMap %s, which is not in the manifest", ctr.Name, name, ref.Name)
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			t.Fatalf("%s %s refers to key %s missing from %s", ctr.Name, name, ref.Key, ref.Name)
		}
		return v, true
	}
	return "", false
}

func TestCalicoManifestDecodesStrictly(t *testing.T) {
	if cni := compileExample(t, "ha-stacked").Network.CNI; cni.Plugin != "calico" || cni.Version != "3.30.3" {
		t.Errorf("ha-stacked runs %s %s, not calico 3.30.3: check the tests", cni.Plugin, cni.Version)
	}
	for _, name := range fixture.Examples() {
		calicoObjects(t, name, nil)
	}
}

func TestCalicoPoolsAndEncapsulationPerMode(t *testing.T) {
	cases := []struct {
		mode, backend, ipip, vxlan string
		bird                       bool
	}{
		{"vxlan", "vxlan", "Never", "Always", false},
		{"ipip", "bird", "Always", "Never", true},
		{"bgp", "bird", "Never", "Never", true},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			c, objs := calicoObjects(t, "ha-stacked", func(c *ir.Cluster) { c.Network.CNI.Mode = tc.mode })
			node := calicoContainer(t, calicoDaemonSet(t, objs).Spec.Template.Spec, "calico-node")
			want := map[string]string{
				"CALICO_IPV4POOL_CIDR":      c.Network.PodCIDRs[0].String(),
				"CALICO_IPV4POOL_IPIP":      tc.ipip,
				"CALICO_IPV4POOL_VXLAN":     tc.vxlan,
				"CALICO_NETWORKING_BACKEND": tc.backend,
				"DATASTORE_TYPE":            "kubernetes",
				"CLUSTER_TYPE":              "k8s,bgp",
				"IP":                        "autodetect",
				"IP_AUTODETECTION_METHOD":   "kubernetes-internal-ip",
				"FELIX_IPV6SUPPORT":         "false",
			}
			for k, v := range want {
				if got, _ := calicoEnvOf(t, objs, node, k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			for _, probe := range [][]string{node.LivenessProbe.Exec.Command, node.ReadinessProbe.Exec.Command} {
				hasBird := slices.Contains(probe, "-bird-live") || slices.Contains(probe, "-bird-ready")
				if hasBird != tc.bird {
					t.Errorf("probe %v checks BIRD: %v, want %v", probe, hasBird, tc.bird)
				}
			}
			if _, ok := calicoEnvOf(t, objs, node, "CALICO_IPV6POOL_CIDR"); ok {
				t.Error("single-stack cluster gets an IPv6 pool")
			}
		})
	}
}

func TestCalicoMTUIsThePodMTU(t *testing.T) {
	for _, mtu := range []int{1450, 1234} {
		_, objs := calicoObjects(t, "ha-stacked", func(c *ir.Cluster) { c.Network.PodMTU = mtu })
		spec := calicoDaemonSet(t, objs).Spec.Template.Spec
		node := calicoContainer(t, spec, "calico-node")
		for _, k := range []string{"FELIX_VXLANMTU", "FELIX_IPINIPMTU", "FELIX_WIREGUARDMTU"} {
			if got, _ := calicoEnvOf(t, objs, node, k); got != strconv.Itoa(mtu) {
				t.Errorf("%s = %q, want %d", k, got, mtu)
			}
		}
		if got, _ := calicoEnvOf(t, objs, calicoContainer(t, spec, "install-cni"), "CNI_MTU"); got != strconv.Itoa(mtu) {
			t.Errorf("install-cni CNI_MTU = %q, want %d", got, mtu)
		}
	}
}

func TestCalicoWireGuard(t *testing.T) {
	for _, on := range []bool{false, true} {
		_, objs := calicoObjects(t, "ha-stacked", func(c *ir.Cluster) { c.Network.CNI.WireGuard = on })
		node := calicoContainer(t, calicoDaemonSet(t, objs).Spec.Template.Spec, "calico-node")
		got, _ := calicoEnvOf(t, objs, node, "FELIX_WIREGUARDENABLED")
		if (got == "true") != on {
			t.Errorf("wireguard %v: FELIX_WIREGUARDENABLED = %q", on, got)
		}
	}
}

func TestCalicoDualStackPools(t *testing.T) {
	c, objs := calicoObjects(t, "dual-stack", func(c *ir.Cluster) { c.Network.CNI.Mode = "vxlan"; c.Network.CNI.WireGuard = true })
	node := calicoContainer(t, calicoDaemonSet(t, objs).Spec.Template.Spec, "calico-node")
	want := map[string]string{
		"CALICO_IPV4POOL_CIDR":         c.Network.PodCIDRs[0].String(),
		"CALICO_IPV6POOL_CIDR":         c.Network.PodCIDRs[1].String(),
		"CALICO_IPV6POOL_VXLAN":        "Always",
		"CALICO_IPV6POOL_NAT_OUTGOING": "true",
		"IP6":                          "autodetect",
		"IP6_AUTODETECTION_METHOD":     "kubernetes-internal-ip",
		"FELIX_IPV6SUPPORT":            "true",
		"FELIX_VXLANMTUV6":             strconv.Itoa(c.Network.PodMTU),
		"FELIX_WIREGUARDENABLEDV6":     "true",
	}
	for k, v := range want {
		if got, _ := calicoEnvOf(t, objs, node, k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if !c.Network.PodCIDRs[1].Addr().Is6() {
		t.Fatalf("dual-stack secondary pod CIDR %s", c.Network.PodCIDRs[1])
	}
}

// The CNI plugin authenticates with the client certificate kcompile
// issues, so its role must be bound to that certificate's user.
func TestCalicoCNIRoleBindsTheIssuedUser(t *testing.T) {
	c, objs := calicoObjects(t, "ha-stacked", nil)
	var cn string
	for _, cert := range pki.Catalogue(c) {
		if cert.Name == "calico-cni" {
			cn = cert.CommonName
		}
	}
	if cn != "calico-cni" {
		t.Fatalf("the PKI issues the CNI plugin %q, want calico-cni", cn)
	}
	b := calicoFind[*rbacv1.ClusterRoleBinding](objs, "calico-cni-plugin")
	if b == nil {
		t.Fatal("no calico-cni-plugin ClusterRoleBinding")
	}
	want := []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: cn}}
	if !slices.Equal(b.Subjects, want) || b.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "calico-cni-plugin"}) {
		t.Errorf("calico-cni-plugin binding %+v %+v", b.RoleRef, b.Subjects)
	}
	role := calicoFind[*rbacv1.ClusterRole](objs, "calico-cni-plugin")
	if role == nil {
		t.Fatal("no calico-cni-plugin ClusterRole")
	}
	var ipam bool
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, "crd.projectcalico.org") && slices.Contains(r.Resources, "ipamblocks") && slices.Contains(r.Verbs, "create") {
			ipam = true
		}
	}
	if !ipam {
		t.Errorf("calico-cni-plugin cannot allocate addresses: %+v", role.Rules)
	}
	// install-cni runs as calico-node and mints a calico-cni-plugin token.
	if calicoFind[*corev1.ServiceAccount](objs, "calico-cni-plugin") == nil {
		t.Error("no calico-cni-plugin ServiceAccount for install-cni's token request")
	}
}

// install-cni and calico-node must leave kcompile's conflist and
// calico-kubeconfig alone, and install only calico's own plugins.
func TestCalicoLeavesKcompilesCNIFiles(t *testing.T) {
	c, objs := calicoObjects(t, "ha-stacked", nil)
	spec := calicoDaemonSet(t, objs).Spec.Template.Spec
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = strings.TrimSuffix(v.HostPath.Path, "/")
		}
	}
	for _, ctr := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, m := range ctr.VolumeMounts {
			if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
				t.Errorf("%s mounts volume %s, which the pod does not have", ctr.Name, m.Name)
			}
			if p := hostPaths[m.Name]; p == "/etc/cni/net.d" || p == "/etc/cni" || p == "/etc" {
				t.Errorf("%s mounts the host's %s at %s", ctr.Name, p, m.MountPath)
			}
		}
	}
	node := calicoContainer(t, spec, "calico-node")
	if got, _ := calicoEnvOf(t, objs, node, "CALICO_MANAGE_CNI"); got != "false" {
		t.Errorf("CALICO_MANAGE_CNI = %q: calico-node would rewrite calico-kubeconfig", got)
	}
	install := calicoContainer(t, spec, "install-cni")
	skip, _ := calicoEnvOf(t, objs, install, "SKIP_CNI_BINARIES")
	skipped := strings.Split(skip, ",")
	for _, n := range c.Nodes {
		for _, b := range n.Binaries {
			if p, ok := strings.CutPrefix(b.Path, "/opt/cni/bin/"); ok && !slices.Contains(skipped, p) {
				t.Errorf("install-cni would overwrite %s, which kcompile installs on %s", b.Path, n.Name)
			}
		}
	}
	for _, p := range []string{"calico", "calico-ipam"} {
		if slices.Contains(skipped, p) {
			t.Errorf("install-cni skips %s", p)
		}
	}
	var binDir bool
	for _, m := range install.VolumeMounts {
		binDir = binDir || m.MountPath == "/host/opt/cni/bin" && hostPaths[m.Name] == "/opt/cni/bin"
	}
	if !binDir {
		t.Error("install-cni does not get the host's /opt/cni/bin")
	}
}

func TestCalicoRunsOnControlPlaneNodes(t *testing.T) {
	c, objs := calicoObjects(t, "ha-stacked", nil)
	tolerations := calicoDaemonSet(t, objs).Spec.Template.Spec.Tolerations
	taints := []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	for _, n := range c.Nodes {
		for _, x := range n.Taints {
			taints = append(taints, corev1.Taint{Key: x.Key, Value: x.Value, Effect: corev1.TaintEffect(x.Effect)})
		}
	}
	for _, taint := range taints {
		if !slices.ContainsFunc(tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), &taint, false) }) {
			t.Errorf("calico-node does not tolerate %v", taint)
		}
	}
}

func TestCalicoImageOverrides(t *testing.T) {
	_, objs := calicoObjects(t, "ha-stacked", func(c *ir.Cluster) { c.Network.CNI.Version = "3.30.3" })
	spec := calicoDaemonSet(t, objs).Spec.Template.Spec
	controllers := calicoFind[*appsv1.Deployment](objs, "calico-kube-controllers")
	if controllers == nil {
		t.Fatal("no calico-kube-controllers Deployment")
	}
	images := func(spec corev1.PodSpec, ctrl *appsv1.Deployment) map[string]string {
		return map[string]string{
			"upgrade-ipam":            calicoContainer(t, spec, "upgrade-ipam").Image,
			"install-cni":             calicoContainer(t, spec, "install-cni").Image,
			"mount-bpffs":             calicoContainer(t, spec, "mount-bpffs").Image,
			"calico-node":             calicoContainer(t, spec, "calico-node").Image,
			"calico-kube-controllers": calicoContainer(t, ctrl.Spec.Template.Spec, "calico-kube-controllers").Image,
		}
	}
	want := map[string]string{
		"upgrade-ipam": "quay.io/calico/cni:v3.30.3", "install-cni": "quay.io/calico/cni:v3.30.3",
		"mount-bpffs": "quay.io/calico/node:v3.30.3", "calico-node": "quay.io/calico/node:v3.30.3",
		"calico-kube-controllers": "quay.io/calico/kube-controllers:v3.30.3",
	}
	if got := images(spec, controllers); !maps.Equal(got, want) {
		t.Errorf("default images %v, want %v", got, want)
	}

	_, objs = calicoObjects(t, "ha-stacked", func(c *ir.Cluster) {
		c.Network.CNI.Images = map[string]string{
			"calico-node":             "registry.example/node@sha256:1111",
			"calico-cni":              "registry.example/cni:x",
			"calico-kube-controllers": "registry.example/kc:y",
		}
	})
	want = map[string]string{
		"upgrade-ipam": "registry.example/cni:x", "install-cni": "registry.example/cni:x",
		"mount-bpffs": "registry.example/node@sha256:1111", "calico-node": "registry.example/node@sha256:1111",
		"calico-kube-controllers": "registry.example/kc:y",
	}
	controllers = calicoFind[*appsv1.Deployment](objs, "calico-kube-controllers")
	if got := images(calicoDaemonSet(t, objs).Spec.Template.Spec, controllers); !maps.Equal(got, want) {
		t.Errorf("overridden images %v, want %v", got, want)
	}
}

// calicoUpstreamCRDs are the CustomResourceDefinitions of calico.yaml
// v3.30.3: name, kind and whether namespaced.
var calicoUpstreamCRDs = []struct {
	name, kind string
	namespaced bool
}{
	{"bgpconfigurations.crd.projectcalico.org", "BGPConfiguration", false},
	{"bgpfilters.crd.projectcalico.org", "BGPFilter", false},
	{"bgppeers.crd.projectcalico.org", "BGPPeer", false},
	{"blockaffinities.crd.projectcalico.org", "BlockAffinity", false},
	{"caliconodestatuses.crd.projectcalico.org", "CalicoNodeStatus", false},
	{"clusterinformations.crd.projectcalico.org", "ClusterInformation", false},
	{"felixconfigurations.crd.projectcalico.org", "FelixConfiguration", false},
	{"globalnetworkpolicies.crd.projectcalico.org", "GlobalNetworkPolicy", false},
	{"globalnetworksets.crd.projectcalico.org", "GlobalNetworkSet", false},
	{"hostendpoints.crd.projectcalico.org", "HostEndpoint", false},
	{"ipamblocks.crd.projectcalico.org", "IPAMBlock", false},
	{"ipamconfigs.crd.projectcalico.org", "IPAMConfig", false},
	{"ipamhandles.crd.projectcalico.org", "IPAMHandle", false},
	{"ippools.crd.projectcalico.org", "IPPool", false},
	{"ipreservations.crd.projectcalico.org", "IPReservation", false},
	{"kubecontrollersconfigurations.crd.projectcalico.org", "KubeControllersConfiguration", false},
	{"networkpolicies.crd.projectcalico.org", "NetworkPolicy", true},
	{"networksets.crd.projectcalico.org", "NetworkSet", true},
	{"stagedglobalnetworkpolicies.crd.projectcalico.org", "StagedGlobalNetworkPolicy", false},
	{"stagedkubernetesnetworkpolicies.crd.projectcalico.org", "StagedKubernetesNetworkPolicy", true},
	{"stagednetworkpolicies.crd.projectcalico.org", "StagedNetworkPolicy", true},
	{"tiers.crd.projectcalico.org", "Tier", false},
	{"adminnetworkpolicies.policy.networking.k8s.io", "AdminNetworkPolicy", false},
	{"baselineadminnetworkpolicies.policy.networking.k8s.io", "BaselineAdminNetworkPolicy", false},
}

// calicoValidateCRD runs the API server's validation of a new
// CustomResourceDefinition, which rejects non-structural schemas, invalid
// defaults and CEL rules, and protected groups without approval.
func calicoValidateCRD(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) []string {
	t.Helper()
	internal := calicoInternalCRD(t, crd)
	var out []string
	for _, e := range crdvalidation.ValidateCustomResourceDefinition(context.Background(), internal) {
		out = append(out, e.Error())
	}
	return out
}

// calicoInternalCRD is a CRD as the API server holds it on creation.
func calicoInternalCRD(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) *apiextensions.CustomResourceDefinition {
	t.Helper()
	s := runtime.NewScheme()
	if err := apiextensions.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	v1 := crd.DeepCopy()
	s.Default(v1)
	var internal apiextensions.CustomResourceDefinition
	if err := s.Convert(v1, &internal, nil); err != nil {
		t.Fatal(err)
	}
	// What the registry's PrepareForCreate sets.
	internal.Status = apiextensions.CustomResourceDefinitionStatus{}
	for _, v := range internal.Spec.Versions {
		if v.Storage {
			internal.Status.StoredVersions = []string{v.Name}
		}
	}
	return &internal
}

// calicoStructural is the structural schema of a CRD's only version.
func calicoStructural(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) *structuralschema.Structural {
	t.Helper()
	internal := calicoInternalCRD(t, crd)
	// The internal form hoists a schema shared by all versions.
	schema := internal.Spec.Validation
	if v := internal.Spec.Versions[0]; v.Schema != nil {
		schema = v.Schema
	}
	st, err := structuralschema.NewStructural(schema.OpenAPIV3Schema)
	if err != nil {
		t.Fatalf("%s: %v", crd.Name, err)
	}
	return st
}

func TestCalicoCRDs(t *testing.T) {
	_, objs := calicoObjects(t, "ha-stacked", nil)
	crds := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, o := range objs {
		if crd, ok := o.(*apiextensionsv1.CustomResourceDefinition); ok {
			crds[crd.Name] = crd
		}
	}
	if len(crds) != len(calicoUpstreamCRDs) {
		t.Errorf("%d CustomResourceDefinitions, want %d", len(crds), len(calicoUpstreamCRDs))
	}
	for _, want := range calicoUpstreamCRDs {
		crd := crds[want.name]
		if crd == nil {
			t.Errorf("no %s", want.name)
			continue
		}
		plural, group, _ := strings.Cut(want.name, ".")
		version := "v1"
		if group == "policy.networking.k8s.io" {
			version = "v1alpha1"
		}
		scope := apiextensionsv1.ClusterScoped
		if want.namespaced {
			scope = apiextensionsv1.NamespaceScoped
		}
		n := crd.Spec.Names
		if crd.Spec.Group != group || crd.Spec.Scope != scope || n.Kind != want.kind || n.ListKind != want.kind+"List" ||
			n.Plural != plural || n.Singular != strings.ToLower(want.kind) {
			t.Errorf("%s: group %s scope %s names %+v", want.name, crd.Spec.Group, crd.Spec.Scope, n)
		}
		if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != version || !crd.Spec.Versions[0].Served || !crd.Spec.Versions[0].Storage {
			t.Errorf("%s: versions %+v, want %s served and stored", want.name, crd.Spec.Versions, version)
			continue
		}
		v := crd.Spec.Versions[0]
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil || v.Schema.OpenAPIV3Schema.Properties["spec"].Type != "object" {
			t.Errorf("%s has no schema with a spec", want.name)
		}
		if errs := calicoValidateCRD(t, crd); len(errs) > 0 {
			t.Errorf("%s is rejected by the API server: %v", want.name, errs)
		}
	}
	// Defaults survive the manifest.
	seq := crds["ipamblocks.crd.projectcalico.org"].Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["sequenceNumber"]
	if seq.Default == nil || string(seq.Default.Raw) != "0" {
		t.Errorf("IPAMBlock sequenceNumber default %v", seq.Default)
	}
	anp := crds["adminnetworkpolicies.policy.networking.k8s.io"].Spec.Versions[0]
	proto := anp.Schema.OpenAPIV3Schema.Properties["spec"].Properties["egress"].Items.Schema.Properties["ports"].Items.Schema.Properties["portNumber"].Properties["protocol"]
	if proto.Default == nil || string(proto.Default.Raw) != `"TCP"` || anp.Subresources == nil || anp.Subresources.Status == nil {
		t.Errorf("AdminNetworkPolicy port protocol default %v, subresources %+v", proto.Default, anp.Subresources)
	}
}

// The validation the CRD test relies on does reject what it must.
func TestCalicoCRDValidationCanFail(t *testing.T) {
	crd := calicoCRDs()[0]
	bad := crd.DeepCopy()
	spec := bad.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.Properties = map[string]apiextensionsv1.JSONSchemaProps{"x": {}} // no type: not structural
	bad.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	if errs := calicoValidateCRD(t, bad); len(errs) == 0 {
		t.Error("a non-structural schema passes validation")
	}
	var anp *apiextensionsv1.CustomResourceDefinition
	for _, d := range calicoCRDs() {
		if d.Name == "adminnetworkpolicies.policy.networking.k8s.io" {
			anp = d.DeepCopy()
		}
	}
	delete(anp.Annotations, "api-approved.kubernetes.io")
	if errs := calicoValidateCRD(t, anp); len(errs) == 0 {
		t.Error("a policy.networking.k8s.io CRD without approval passes validation")
	}
	if errs := calicoValidateCRD(t, crd); len(errs) != 0 {
		t.Errorf("%s: %v", crd.Name, errs)
	}
}

// The API server must keep every field Calico writes (it prunes what a
// schema does not allow) and apply upstream's defaults.
func TestCalicoCRDsKeepFieldsAndDefault(t *testing.T) {
	_, objs := calicoObjects(t, "ha-stacked", nil)
	for _, o := range objs {
		crd, ok := o.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			continue
		}
		st := calicoStructural(t, crd)
		obj := map[string]any{
			"apiVersion": crd.Spec.Group + "/" + crd.Spec.Versions[0].Name,
			"kind":       crd.Spec.Names.Kind,
			"metadata":   map[string]any{"name": "default"},
			"spec": map[string]any{
				"cidr": "10.244.0.0/16", "ipipMode": "Always", "nodeSelector": "all()",
				"ingress":     []any{map[string]any{"action": "Allow", "ports": []any{map[string]any{"namedPort": "http"}}}},
				"controllers": map[string]any{"node": map[string]any{"reconcilerPeriod": "5m"}},
			},
		}
		if _, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]; ok {
			obj["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready"}}, "agent": map[string]any{"birdV4": map[string]any{"state": "Ready"}}}
		}
		want := runtime.DeepCopyJSON(obj)
		pruning.Prune(obj, st, true)
		if !reflect.DeepEqual(obj, want) {
			t.Errorf("%s: the API server would store %v of %v", crd.Name, obj, want)
		}
	}

	crds := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, crd := range calicoCRDs() {
		crds[crd.Name] = crd
	}
	block := map[string]any{"spec": map[string]any{"cidr": "10.244.0.0/26"}}
	structuraldefaulting.Default(block, calicoStructural(t, crds["ipamblocks.crd.projectcalico.org"]))
	if got := block["spec"].(map[string]any)["sequenceNumber"]; fmt.Sprint(got) != "0" {
		t.Errorf("IPAMBlock sequenceNumber defaults to %v", got)
	}
	for _, name := range []string{"adminnetworkpolicies.policy.networking.k8s.io", "baselineadminnetworkpolicies.policy.networking.k8s.io"} {
		port := map[string]any{"portNumber": map[string]any{"port": int64(80)}}
		policy := map[string]any{"spec": map[string]any{"egress": []any{map[string]any{"action": "Deny", "ports": []any{port}}}}}
		structuraldefaulting.Default(policy, calicoStructural(t, crds[name]))
		if got := port["portNumber"].(map[string]any)["protocol"]; got != "TCP" {
			t.Errorf("%s: port protocol defaults to %v", name, got)
		}
	}
}
