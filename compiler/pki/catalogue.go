package pki

import (
	"crypto/x509"
	"github.com/kcompile/kcompile/layout"
	"net/netip"
	"slices"

	"github.com/kcompile/kcompile/compiler/ir"
)

// Cert is one leaf certificate of the catalogue: who it is for, which CA
// signs it, what it asserts, and where it goes.
type Cert struct {
	// ID is unique in the cluster, e.g. "apiserver@cp1" or "admin".
	ID string
	// Name is the catalogue entry, e.g. "apiserver" or "kubelet-client".
	Name string
	// Node is the node the certificate belongs to; empty for cluster-wide
	// identities (admin, super-admin).
	Node         string
	CA           Authority
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []netip.Addr
	// Server and Client say which extended key usages the certificate has.
	Server, Client bool
	// File is the stem of where the certificate (CertFile) and key (KeyFile)
	// go, relative to the node's root; empty when the certificate lives
	// only inside its kubeconfig.
	File string
	// Kubeconfig, when set, embeds the certificate in a kubeconfig.
	Kubeconfig *Kubeconfig
}

// Kubeconfig says where a client certificate's kubeconfig goes and which
// API server URL its consumer dials.
type Kubeconfig struct {
	// Path relative to the node's root, e.g. "etc/kubernetes/admin.conf".
	Path   string
	Server string
}

// ExtKeyUsages returns the certificate's extended key usages.
func (c Cert) ExtKeyUsages() []x509.ExtKeyUsage {
	var u []x509.ExtKeyUsage
	if c.Server {
		u = append(u, x509.ExtKeyUsageServerAuth)
	}
	if c.Client {
		u = append(u, x509.ExtKeyUsageClientAuth)
	}
	return u
}

// Identities that RBAC grants permissions to; the catalogue issues them and
// CheckIdentities holds the catalogue to them.
const (
	userAdmin             = "kubernetes-admin"
	userSuperAdmin        = "kubernetes-super-admin"
	groupClusterAdmins    = "kubeadm:cluster-admins"
	groupMasters          = "system:masters"
	userControllerManager = "system:kube-controller-manager"
	userScheduler         = "system:kube-scheduler"
	userKubeProxy         = "system:kube-proxy"
	groupNodes            = "system:nodes"
	nodeUserPrefix        = "system:node:"
	userCalicoCNI         = "calico-cni"
	// userEndpointHealth needs no binding: every authenticated user may
	// read /readyz (system:public-info-viewer).
	userEndpointHealth   = "kcompile:endpoint-health"
	frontProxyClientName = "front-proxy-client"
)

// APIServerKubeletClientUser is the user the API server is to kubelets
// (logs, exec, port-forward). It is in no group: a group such as
// kubeadm:cluster-admins would make the API server's kubelet credential,
// present on every control-plane node, a cluster-admin credential for the
// API too. The cluster's RBAC binds this user to the ClusterRole
// system:kubelet-api-admin, which is what the kubelet API needs.
const APIServerKubeletClientUser = "kube-apiserver-kubelet-client"

// Catalogue lists every leaf certificate of a cluster in a stable order:
// control-plane certificates per control-plane node, etcd certificates per
// member, kubelet and node-agent certificates per node, then cluster-wide
// identities. Each entry depends only on the cluster-wide settings and its
// own node, so adding a node adds entries without changing others.
func Catalogue(c *ir.Cluster) []Cert {
	var out []Cert
	members := map[string]ir.EtcdMember{}
	for _, m := range c.Etcd.Members {
		members[m.Node] = m
	}
	for _, n := range c.Nodes {
		if n.Runs(ir.ComponentAPIServer) {
			out = append(out, controlPlaneCerts(c, n)...)
		}
		if m, ok := members[n.Name]; ok && n.Runs(ir.ComponentEtcd) {
			out = append(out, etcdCerts(n, m)...)
		}
		if n.RunsPods() {
			out = append(out, nodeCerts(c, n)...)
		}
		if c.Endpoint.ProxiedOn(n) {
			out = append(out, Cert{ID: "endpoint-health@" + n.Name, Name: "endpoint-health", Node: n.Name, CA: ClusterCA,
				CommonName: userEndpointHealth, Client: true, File: layout.EndpointHealthStem})
		}
	}
	out = append(out,
		Cert{ID: "admin", Name: "admin", CA: ClusterCA, CommonName: userAdmin, Organization: []string{groupClusterAdmins},
			Client: true, Kubeconfig: &Kubeconfig{Path: layout.AdminKubeconfig, Server: c.Endpoint.URL()}},
		Cert{ID: "super-admin", Name: "super-admin", CA: ClusterCA, CommonName: userSuperAdmin, Organization: []string{groupMasters},
			Client: true, Kubeconfig: &Kubeconfig{Path: layout.SuperAdminKubeconfig, Server: c.Endpoint.URL()}},
	)
	return out
}

func controlPlaneCerts(c *ir.Cluster, n ir.Node) []Cert {
	id := func(name string) string { return name + "@" + n.Name }
	return []Cert{
		{ID: id("apiserver"), Name: "apiserver", Node: n.Name, CA: ClusterCA, CommonName: "kube-apiserver",
			DNSNames: apiServerDNSNames(c, n), IPs: apiServerIPs(c, n), Server: true, File: layout.APIServerStem},
		{ID: id("apiserver-kubelet-client"), Name: "apiserver-kubelet-client", Node: n.Name, CA: ClusterCA,
			CommonName: APIServerKubeletClientUser, Client: true,
			File: layout.APIServerKubeletClientStem},
		{ID: id("apiserver-etcd-client"), Name: "apiserver-etcd-client", Node: n.Name, CA: EtcdCA,
			CommonName: "kube-apiserver-etcd-client", Client: true, File: layout.APIServerEtcdClientStem},
		{ID: id("front-proxy-client"), Name: "front-proxy-client", Node: n.Name, CA: FrontProxyCA,
			CommonName: frontProxyClientName, Client: true, File: layout.FrontProxyClientStem},
		{ID: id("controller-manager"), Name: "controller-manager", Node: n.Name, CA: ClusterCA,
			CommonName: userControllerManager, Client: true,
			Kubeconfig: &Kubeconfig{Path: layout.ControllerManagerKubeconfig, Server: c.APIServerURL(n)}},
		{ID: id("scheduler"), Name: "scheduler", Node: n.Name, CA: ClusterCA,
			CommonName: userScheduler, Client: true,
			Kubeconfig: &Kubeconfig{Path: layout.SchedulerKubeconfig, Server: c.APIServerURL(n)}},
	}
}

func etcdCerts(n ir.Node, m ir.EtcdMember) []Cert {
	id := func(name string) string { return name + "@" + n.Name }
	return []Cert{
		{ID: id("etcd-server"), Name: "etcd-server", Node: n.Name, CA: EtcdCA, CommonName: m.Name,
			DNSNames: []string{m.Name, "localhost"}, IPs: uniqueAddrs(append(slices.Clone(n.Addresses), loopback4, loopback6)),
			Server: true, Client: true, File: layout.EtcdServerStem},
		{ID: id("etcd-peer"), Name: "etcd-peer", Node: n.Name, CA: EtcdCA, CommonName: m.Name,
			DNSNames: []string{m.Name}, IPs: slices.Clone(n.Addresses), Server: true, Client: true, File: layout.EtcdPeerStem},
		{ID: id("etcd-healthcheck-client"), Name: "etcd-healthcheck-client", Node: n.Name, CA: EtcdCA,
			CommonName: "kube-etcd-healthcheck-client", Client: true, File: layout.EtcdHealthcheckClientStem},
	}
}

func nodeCerts(c *ir.Cluster, n ir.Node) []Cert {
	id := func(name string) string { return name + "@" + n.Name }
	out := []Cert{
		{ID: id("kubelet-client"), Name: "kubelet-client", Node: n.Name, CA: ClusterCA,
			CommonName: nodeUserPrefix + n.Name, Organization: []string{groupNodes}, Client: true,
			Kubeconfig: &Kubeconfig{Path: layout.KubeletKubeconfig, Server: c.Endpoint.NodeURL()}},
		{ID: id("kubelet-serving"), Name: "kubelet-serving", Node: n.Name, CA: ClusterCA,
			CommonName: nodeUserPrefix + n.Name, Organization: []string{groupNodes},
			DNSNames: []string{n.Name}, IPs: slices.Clone(n.Addresses), Server: true, File: layout.KubeletServingStem},
	}
	if n.Runs(ir.ComponentKubeProxy) {
		out = append(out, Cert{ID: id("kube-proxy"), Name: "kube-proxy", Node: n.Name, CA: ClusterCA,
			CommonName: userKubeProxy, Client: true,
			Kubeconfig: &Kubeconfig{Path: layout.KubeProxyKubeconfig, Server: c.Endpoint.NodeURL()}})
	}
	// Calico's CNI plugin runs outside any pod, on the node, and calls the
	// API with its own identity; flannel and cilium use the service
	// accounts of their DaemonSets.
	if c.Network.CNI.Plugin == "calico" {
		out = append(out, Cert{ID: id("calico-cni"), Name: "calico-cni", Node: n.Name, CA: ClusterCA,
			CommonName: userCalicoCNI, Client: true,
			Kubeconfig: &Kubeconfig{Path: layout.CalicoKubeconfig, Server: c.Endpoint.NodeURL()}})
	}
	return out
}

var (
	loopback4 = netip.MustParseAddr("127.0.0.1")
	loopback6 = netip.MustParseAddr("::1")
)

// apiServerDNSNames are the names clients reach an API server by: its
// node's name, the endpoint's DNS name, the in-cluster Service names and
// localhost, plus the spec's extras.
func apiServerDNSNames(c *ir.Cluster, n ir.Node) []string {
	names := []string{n.Name, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc." + c.Network.Domain, "localhost"}
	if !c.Endpoint.Address.IsValid() {
		names = append(names, c.Endpoint.Host)
	}
	for _, s := range c.Kubernetes.ExtraSANs {
		if _, err := netip.ParseAddr(s); err != nil {
			names = append(names, s)
		}
	}
	return uniqueStrings(names)
}

// apiServerIPs are the addresses clients reach an API server at: its
// node's, the endpoint VIP, the kubernetes Service's first IP of each
// family, loopback, plus the spec's extras.
func apiServerIPs(c *ir.Cluster, n ir.Node) []netip.Addr {
	ips := slices.Clone(n.Addresses)
	if c.Endpoint.Address.IsValid() {
		ips = append(ips, c.Endpoint.Address)
	}
	ips = append(ips, c.Network.FirstServiceIPs...)
	ips = append(ips, loopback4)
	for _, s := range c.Kubernetes.ExtraSANs {
		if a, err := netip.ParseAddr(s); err == nil {
			ips = append(ips, a)
		}
	}
	return uniqueAddrs(ips)
}

func uniqueStrings(s []string) []string {
	var out []string
	for _, x := range s {
		if x != "" && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func uniqueAddrs(s []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		if x.IsValid() && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
