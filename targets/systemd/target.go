package systemd

import (
	"fmt"
	"net/netip"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
)

// Options say where the tree will live, as kubeadm's certificates
// directory does: the zero value is a tree laid on the nodes' own root
// file systems. The simulator lays every node's files out in its work
// directory and gives each node an address of its own by asking for it
// here, so that no rendered unit is rewritten.
type Options struct {
	// Root is the directory a node's files live under (its root file
	// system): every path to a file of the node's tree on a command line
	// or in a configuration starts there. Nil: "/".
	Root func(node string) string
	// Loopback is the address a node's components bind their node-local
	// listeners to (etcd's local client and metrics URLs, the
	// controller-manager's and scheduler's secure ports, kube-proxy's
	// metrics). Nil: 127.0.0.1 (::1 for an IPv6 node).
	Loopback func(node string) netip.Addr
	// ExtraArgs are appended to a component's command line on a node.
	ExtraArgs func(node string, c ir.Component) []string
	// Trees says whose root trees to render. Nil: every node's. A node
	// left out gets only the PKI files of the certificates issued for it:
	// the simulator issues and reads nothing else for the kubelets it
	// simulates, and thousands of trees would cost more than the boot.
	Trees func(ir.Node) bool
}

// placement places one node's files and node-local listeners.
type placement struct {
	root      string
	loopback  netip.Addr
	extraArgs func(ir.Component) []string
	// os places the binaries and kcompile's scripts where the node's
	// operating system lets them be written.
	os ir.OS
	// containerdConfig is the configuration containerd.service names:
	// layout.ContainerdConfig, or kcompile up's copy of it for the
	// drop-in that gives containerd the copy (UpFiles).
	containerdConfig string
}

func (o Options) placement(n ir.Node) placement {
	l := placement{root: "/", loopback: netip.MustParseAddr("127.0.0.1"), extraArgs: func(ir.Component) []string { return nil }, os: n.OS,
		containerdConfig: layout.ContainerdConfig}
	if n.Address().Is6() {
		l.loopback = netip.IPv6Loopback()
	}
	if o.Root != nil {
		l.root = o.Root(n.Name)
	}
	if o.Loopback != nil {
		l.loopback = o.Loopback(n.Name)
	}
	if o.ExtraArgs != nil {
		l.extraArgs = func(c ir.Component) []string { return o.ExtraArgs(n.Name, c) }
	}
	return l
}

// at is where a component finds the file of the node's tree at rel.
func (l placement) at(rel string) string { return path.Join(l.root, rel) }

// program is the path of a binary the install unit puts in place.
func (l placement) program(name string) string { return path.Join(l.os.BinDir(), name) }

// lib is the tree path of one of kcompile's scripts and lists.
func (l placement) lib(name string) string { return path.Join(l.os.LibDir(), name)[1:] }

// Build renders every node's root tree and the cluster tree, and verifies
// them before returning. An error is a compiler bug: the spec was checked.
func Build(m *pki.Material, opts Options) (*targets.Tree, error) {
	tree := targets.NewTree()
	rc := newRenderCache()
	if err := nodeFiles(m, tree, rc, opts); err != nil {
		return nil, err
	}
	if err := clusterFiles(m.Cluster, tree); err != nil {
		return nil, err
	}
	// The kubeconfigs of nodes without trees are the simulator's kubelets'
	// credentials, which it loads with client-go itself.
	unverified := map[string]bool{}
	if opts.Trees != nil {
		for _, n := range m.Cluster.Nodes {
			if !opts.Trees(n) {
				unverified[n.Name] = true
			}
		}
	}
	if err := verify(tree, m.Cluster, rc, unverified); err != nil {
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
	sets, err := addonSets(c)
	if err != nil {
		return err
	}
	for _, s := range sets {
		if len(s.objs) == 0 {
			continue
		}
		data, err := manifest(s.objs...)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		if err := tree.Add(layout.ClusterTree("addons/"+s.name), data, 0o644); err != nil {
			return err
		}
	}
	return tree.Add(layout.ClusterTree("README"), []byte(clusterReadme), 0o644)
}

// addonSets are the files of cluster/addons as objects, in order.
func addonSets(c *ir.Cluster) ([]addonSet, error) {
	cni, err := cniManifests(c)
	if err != nil {
		return nil, err
	}
	return []addonSet{
		{"00-rbac.yaml", clusterRBAC()},
		{"10-nodes.yaml", nodeLabels(c)},
		{"20-cni-" + c.Network.CNI.Plugin + ".yaml", cni},
		{"30-coredns.yaml", coreDNS(c)},
		{"40-storage.yaml", storage(c)},
	}, nil
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
		if !strings.HasPrefix(f.Path, layout.ClusterTree("addons/")) {
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
