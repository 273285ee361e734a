package systemd

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/internal/fixture"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestAddonsDecodeStrictly(t *testing.T) {
	for _, name := range fixture.Examples() {
		c := compileExample(t, name)
		for _, set := range [][]runtime.Object{coreDNS(c), storage(c), clusterRBAC(), nodeLabels(c)} {
			if len(set) == 0 {
				continue
			}
			data, err := manifest(set...)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := decodeManifest(data)
			if err != nil {
				t.Errorf("%s: %v\n%s", name, err, data)
				continue
			}
			if len(objs) != len(set) {
				t.Errorf("%s: %d objects rendered, %d decoded", name, len(set), len(objs))
			}
		}
	}
}

func TestCoreDNSServesTheClusterDNSIP(t *testing.T) {
	c := compileExample(t, "dual-stack")
	data, err := manifest(coreDNS(c)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	var svc *corev1.Service
	var cm *corev1.ConfigMap
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.Service:
			svc = x
		case *corev1.ConfigMap:
			cm = x
		}
	}
	if svc == nil || svc.Spec.ClusterIP != c.Network.DNSServiceIP.String() || len(svc.Spec.ClusterIPs) != 2 || svc.Spec.ClusterIPs[1] != "fd00:10:96::a" {
		t.Errorf("kube-dns Service %+v", svc)
	}
	if cm == nil || !strings.Contains(cm.Data["Corefile"], "kubernetes cluster.local in-addr.arpa ip6.arpa") {
		t.Errorf("Corefile %v", cm)
	}
}

func TestStorageClasses(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	objs := storage(c)
	if len(objs) != 2 {
		t.Fatalf("%d storage objects", len(objs))
	}
	sc := objs[1].(*storagev1.StorageClass)
	if sc.Provisioner != "rbd.csi.ceph.com" || sc.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
		t.Errorf("StorageClass %+v", sc)
	}
}

func TestNodeLabelsCarryRestrictedLabels(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	objs := nodeLabels(c)
	if len(objs) != 3 {
		t.Fatalf("%d Node objects, want the 3 control-plane nodes", len(objs))
	}
	n := objs[0].(*corev1.Node)
	if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; !ok || n.Name != "cp1" {
		t.Errorf("Node %+v", n)
	}
	// The rendered manifest keeps the label whose value is "", and
	// carries no status.
	data, err := manifest(objs...)
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := decodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range decoded {
		n := o.(*corev1.Node)
		if v, ok := n.Labels["node-role.kubernetes.io/control-plane"]; !ok || v != "" {
			t.Errorf("rendered Node %s lost its node-role label: %v", n.Name, n.Labels)
		}
	}
	if bytes.Contains(data, []byte("status:")) {
		t.Errorf("rendered Nodes carry a status:\n%s", data)
	}
}
