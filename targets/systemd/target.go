package systemd

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/targets"
)

// Target is the systemd target.
type Target struct{}

// Name is the target's name on the command line and under OUT.
func (Target) Name() string { return "systemd" }

// Build renders every node's root tree and the cluster tree, and verifies
// them before returning.
func (Target) Build(m *pki.Material) (*targets.Tree, error) {
	tree := targets.NewTree()
	rc := newRenderCache()
	if err := nodeFiles(m, tree, rc); err != nil {
		return nil, err
	}
	if err := clusterFiles(m.Cluster, tree); err != nil {
		return nil, err
	}
	if err := verify(tree, m.Cluster, rc); err != nil {
		return nil, err
	}
	return tree, nil
}

// addonSet is one file of cluster/addons, applied in name order.
type addonSet struct {
	name string
	objs []runtime.Object
}

// clusterFiles writes the addon manifests, applied in file-name order
// with the super-admin kubeconfig when the control plane is up.
func clusterFiles(c *ir.Cluster, tree *targets.Tree) error {
	cni, err := cniManifests(c)
	if err != nil {
		return err
	}
	sets := []addonSet{
		{"00-rbac.yaml", clusterRBAC()},
		{"10-nodes.yaml", nodeLabels(c)},
		{"20-cni-" + c.Network.CNI.Plugin + ".yaml", cni},
		{"30-coredns.yaml", coreDNS(c)},
		{"40-storage.yaml", storage(c)},
	}
	for _, s := range sets {
		if len(s.objs) == 0 {
			continue
		}
		data, err := manifest(s.objs...)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		if err := tree.Add(targets.ClusterPath("addons/"+s.name), data, 0o644); err != nil {
			return err
		}
	}
	return tree.Add(targets.ClusterPath("README"), []byte(clusterReadme), 0o644)
}

const clusterReadme = `This is the cluster tree kcompile built.

- admin.conf is the administrators' kubeconfig (group kubeadm:cluster-admins).
- super-admin.conf is the break-glass kubeconfig (group system:masters): keep
  it offline; it is needed once, to apply the addons.
- addons/ holds the cluster's manifests. When the control-plane units are up,
  apply them in order:

      kubectl --kubeconfig super-admin.conf apply -f addons/

  00-rbac.yaml gives admin.conf its rights; after it, admin.conf is enough.
`

// verifyAddons decodes every manifest of the cluster tree strictly and
// checks the DNS Service is on the cluster's DNS IP.
func verifyAddons(tree *targets.Tree, c *ir.Cluster) error {
	dnsFound := false
	for _, f := range tree.Files() {
		if len(f.Path) < len("cluster/addons/") || f.Path[:len("cluster/addons/")] != "cluster/addons/" {
			continue
		}
		objs, err := decodeManifest(f.Data)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		for _, o := range objs {
			if svc, ok := o.(*corev1.Service); ok && svc.Name == "kube-dns" {
				dnsFound = true
				if svc.Spec.ClusterIP != c.Network.DNSServiceIP.String() {
					return fmt.Errorf("%s: kube-dns is on %s, not the kubelets' cluster DNS %s", f.Path, svc.Spec.ClusterIP, c.Network.DNSServiceIP)
				}
			}
		}
	}
	if !dnsFound {
		return fmt.Errorf("the cluster tree has no kube-dns Service")
	}
	return nil
}
