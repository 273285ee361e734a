// Package ir is the typed, ordered model of a cluster that the compiler hands
// to targets. It is plain data: no CUE, no I/O, no defaults left to compute.
// Every derived value (first service IPs, DNS IP, endpoint URL, etcd initial
// cluster, node roles and components) is computed once by the compiler, and
// every effective value keeps its provenance in Cluster.Settings.
package ir

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kcompile/kcompile/layout"
)

// Cluster is a whole compiled cluster.
type Cluster struct {
	APIVersion string
	Name       string
	Kubernetes Kubernetes
	Endpoint   Endpoint
	// Nodes are ordered by role (control plane, etcd, worker), then name.
	Nodes    []Node
	Etcd     Etcd
	Network  Network
	Storage  Storage
	Runtime  Runtime
	Kubelet  Kubelet
	PKI      PKI
	Security Security
	Addons   Addons
	Install  Install
	// Users log in to every node.
	Users []User
	// MaxUserDataBytes limits each node's cloud-init user-data; 0 for no
	// limit.
	MaxUserDataBytes int
	// Boot is how machines network-boot; nil when the spec has no boot
	// section.
	Boot *Boot
	// Settings are every effective value with its origin, sorted by path.
	Settings []Setting
	// Rollouts are the worker groups in the order a change rolls through
	// them: the workers written one by one, then the pools of
	// workers.order, then the others by name. Groups without nodes are
	// left out.
	Rollouts []Rollout
}

// Kubernetes holds the version of each component.
type Kubernetes struct {
	Version           string
	APIServer         string
	ControllerManager string
	Scheduler         string
	Kubelet           string
	KubeProxy         string
	// SchedulableControlPlane lets ordinary pods run on control-plane nodes.
	SchedulableControlPlane bool
	APIServerPort           int
	ExtraSANs               []string
}

// Endpoint is how every client reaches the API servers.
type Endpoint struct {
	// Host is the DNS name or the address literal clients dial.
	Host string
	// Address is set when the endpoint is an IP address (a VIP or, for a
	// single control-plane node, that node's address).
	Address netip.Addr
	Port    int
	// Mode is what serves the endpoint: EndpointExternal, EndpointVIP,
	// EndpointNodeLocal, or EndpointNode (a single control-plane node
	// without an endpoint: that node's API server itself).
	Mode EndpointMode
	// RouterID and AdvertInterval (seconds) configure VRRP (EndpointVIP).
	RouterID, AdvertInterval int
	// LocalPort is the node-local proxy's port on 127.0.0.1
	// (EndpointNodeLocal).
	LocalPort int
}

// EndpointMode is what serves the API endpoint.
type EndpointMode string

const (
	EndpointExternal  EndpointMode = "external"
	EndpointVIP       EndpointMode = "vip"
	EndpointNodeLocal EndpointMode = "nodeLocal"
	EndpointNode      EndpointMode = "node"
)

// URL is what clients outside the nodes dial: "https://host:port", an
// IPv6 literal bracketed.
func (e Endpoint) URL() string { return httpsURL(e.Host, e.Port) }

// APIServerURL is node n's own API server: its control-plane
// components dial it, as kubeadm configures them, so that they keep
// working when the endpoint's load balancer does not.
func (c *Cluster) APIServerURL(n Node) string {
	return httpsURL(n.Address().String(), c.Kubernetes.APIServerPort)
}

// httpsURL is https://host:port, an IPv6 literal bracketed.
func httpsURL(host string, port int) string {
	return "https://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// NodeURL is the URL the node-level clients of every node (kubelet,
// kube-proxy, a CNI plugin's own kubeconfig) dial: the node-local proxy
// in mode nodeLocal, the endpoint otherwise.
func (e Endpoint) NodeURL() string {
	return httpsURL(e.NodeHostPort())
}

// Served says in words what serves the endpoint, as kcompile explain
// shows it (controlPlane.endpoint.served) and the pictures label it.
func (e Endpoint) Served() string {
	switch e.Mode {
	case EndpointVIP:
		return fmt.Sprintf("by the control-plane nodes: keepalived (VRRP router %d) moves %s between them, HAProxy balances to every ready API server", e.RouterID, e.Host)
	case EndpointNodeLocal:
		return fmt.Sprintf("on every node by HAProxy on 127.0.0.1:%d, balancing to every ready API server; %s by what is outside the spec", e.LocalPort, e.Host)
	case EndpointNode:
		return "by the only control-plane node's API server"
	}
	return "outside the spec (a load balancer or DNS in front of the API servers)"
}

// ProxiedOn says whether node n runs the endpoint's HAProxy: every API
// server's node in mode vip (beside keepalived), every node that runs
// pods in mode nodeLocal. The PKI (its health-check client), the systemd
// target (the units) and the binaries a node needs all ask here.
func (e Endpoint) ProxiedOn(n Node) bool {
	switch e.Mode {
	case EndpointVIP:
		return n.Runs(ComponentAPIServer)
	case EndpointNodeLocal:
		return n.RunsPods()
	}
	return false
}

// NodeHostPort is the host and port of NodeURL.
func (e Endpoint) NodeHostPort() (string, int) {
	if e.Mode == EndpointNodeLocal {
		return "127.0.0.1", e.LocalPort
	}
	return e.Host, e.Port
}

// Role is what a node is for.
type Role string

const (
	RoleControlPlane Role = "control-plane"
	RoleEtcd         Role = "etcd"
	RoleWorker       Role = "worker"
)

// Rank orders roles for sorting nodes.
func (r Role) Rank() int {
	switch r {
	case RoleControlPlane:
		return 0
	case RoleEtcd:
		return 1
	}
	return 2
}

// Component is a process kcompile runs on a node.
type Component string

const (
	ComponentEtcd              Component = "etcd"
	ComponentAPIServer         Component = "kube-apiserver"
	ComponentControllerManager Component = "kube-controller-manager"
	ComponentScheduler         Component = "kube-scheduler"
	ComponentKubelet           Component = "kubelet"
	ComponentKubeProxy         Component = "kube-proxy"
	ComponentRuntime           Component = "container-runtime"
)

// Node is one machine of the cluster.
type Node struct {
	Name string
	// Role is the node's primary role; Components says what runs on it (a
	// stacked control-plane node also runs etcd).
	Role       Role
	Components []Component
	// Addresses are the node's addresses, primary first.
	Addresses []netip.Addr
	MAC       string
	Zone      string
	Rack      string
	// Pool is the worker pool the node was expanded from, if any.
	Pool string
	// SpecPath is where the node is declared: the node itself, or the
	// pool it was expanded from. MACPath is the field that gives its MAC.
	SpecPath, MACPath string
	Labels            []Label
	Taints            []Taint
	Capacity          Capacity
	KubeletVersion    string
	// The versions of the node's other Kubernetes components, each the
	// cluster's (Kubernetes) unless the node overrides it during a
	// rolling upgrade; empty where the node does not run the component.
	APIServerVersion, ControllerManagerVersion, SchedulerVersion, KubeProxyVersion string
	// OS is the node's operating system family; OSPath is the spec field
	// that chose it.
	OS     OS
	OSPath string
	// Binaries are the programs the node's components need, with the
	// version each must report.
	Binaries []Binary
}

// Rollout is how a change reaches one group of workers (kcompile plan
// and apply): a pool, or the workers written one by one (Pool "").
type Rollout struct {
	// Pool is the pool; the group's nodes are the workers of it.
	Pool string
	// MaxUnavailable is the budget resolved against the group's size: how
	// many of its nodes may restart at once.
	MaxUnavailable int
	Drain          bool
	DrainTimeout   time.Duration
	// Path is the spec path of the group's rollout settings.
	Path string
}

// OS is a node's operating system family.
type OS string

// The operating system families.
const (
	OSDebian       OS = "debian"
	OSFlatcar      OS = "flatcar"
	OSFedoraCoreOS OS = "fedora-coreos"
)

// Ignition says whether the OS is configured by Ignition rather than
// cloud-init.
func (o OS) Ignition() bool { return o == OSFlatcar || o == OSFedoraCoreOS }

// BinDir is where the component binaries are installed: /usr/local/bin,
// except on Flatcar, whose /usr (and /usr/local) is read-only and whose
// PATH has /opt/bin.
func (o OS) BinDir() string {
	if o == OSFlatcar {
		return layout.Abs(layout.FlatcarBinDir)
	}
	return layout.Abs(layout.BinDir)
}

// LibDir is where kcompile's own scripts live, beside the binaries.
func (o OS) LibDir() string {
	if o == OSFlatcar {
		return layout.Abs(layout.FlatcarLibDir)
	}
	return layout.Abs(layout.LibDir)
}

// Writable says whether kcompile may write path p on the OS: under /usr
// anywhere on Debian, under /usr/local only on Fedora CoreOS (a link to
// /var/usrlocal), nowhere on Flatcar.
func (o OS) Writable(p string) bool {
	usr, local := layout.Abs(layout.UsrDir), layout.Abs(layout.UsrLocalDir)+"/"
	switch o {
	case OSFlatcar:
		return p != usr && !strings.HasPrefix(p, usr+"/")
	case OSFedoraCoreOS:
		return p != usr && !strings.HasPrefix(p, usr+"/") || strings.HasPrefix(p, local)
	}
	return true
}

// Name is the family's name for messages.
func (o OS) Name() string {
	switch o {
	case OSFlatcar:
		return "Flatcar Container Linux"
	case OSFedoraCoreOS:
		return "Fedora CoreOS"
	}
	return "Debian"
}

// Binary is a program a node needs.
type Binary struct {
	// Path is absolute, e.g. "/usr/local/bin/kubelet".
	Path string
	// Version is what the program's version output must contain; empty
	// for helpers whose version is not checked (runc, CNI plugins).
	Version string
	// VersionFlag makes the program print its version.
	VersionFlag string
	// OS says the program comes with the operating system's packages
	// (keepalived, HAProxy): checked for, never downloaded.
	OS bool
}

// Address is the node's primary address.
func (n Node) Address() netip.Addr { return n.Addresses[0] }

// Runs reports whether the node runs component c.
func (n Node) Runs(c Component) bool {
	for _, x := range n.Components {
		if x == c {
			return true
		}
	}
	return false
}

// RunsPods reports whether the node has a kubelet and so a pod CIDR.
func (n Node) RunsPods() bool { return n.Runs(ComponentKubelet) }

// Label is a node label.
type Label struct{ Key, Value string }

// Taint is a node taint.
type Taint struct{ Key, Value, Effect string }

// Capacity is what a node offers to pods.
type Capacity struct {
	CPU     int
	Memory  string
	MaxPods int
}

// Etcd is the datastore topology.
type Etcd struct {
	// Topology is "stacked" or "external".
	Topology          string
	Version           string
	Members           []EtcdMember
	QuotaBackendBytes int64
	SnapshotCount     int
	// Backup is the members' snapshots on a schedule; nil takes none.
	Backup *EtcdBackup
}

// EtcdBackup is when and where every member snapshots itself.
type EtcdBackup struct {
	// Schedule is a systemd calendar event in its normalized form, in
	// UTC.
	Schedule  string
	Retention int
	// Directory holds the snapshots, 0700.
	Directory string
	// Upload is a command (its arguments) run after each snapshot, with
	// the snapshot's path in KCOMPILE_SNAPSHOT; none when empty.
	Upload []string
	// Timeout bounds one run, upload included.
	Timeout time.Duration
}

// InitialCluster is etcd's --initial-cluster value:
// "name=https://addr:2380,...".
func (e Etcd) InitialCluster() string {
	var out []string
	for _, m := range e.Members {
		out = append(out, m.Name+"="+m.PeerURL())
	}
	return strings.Join(out, ",")
}

// ClientURLs are the members' client URLs, as the API server's
// --etcd-servers lists them.
func (e Etcd) ClientURLs() []string {
	var out []string
	for _, m := range e.Members {
		out = append(out, m.ClientURL())
	}
	return out
}

// EtcdMember is one etcd member.
type EtcdMember struct {
	Name string
	// Node is the node the member runs on (its own node when external).
	Node    string
	Address netip.Addr
	Zone    string
	Rack    string
	// Joining says the member joins a cluster already running
	// (--initial-cluster-state=existing).
	Joining bool
}

// The ports etcd members listen on.
const (
	EtcdClientPort = 2379
	EtcdPeerPort   = 2380
)

// PeerURL is where the other members reach the member.
func (m EtcdMember) PeerURL() string { return httpsURL(m.Address.String(), EtcdPeerPort) }

// ClientURL is where the API servers reach the member.
func (m EtcdMember) ClientURL() string { return httpsURL(m.Address.String(), EtcdClientPort) }

// Network is every address range and the pod network.
type Network struct {
	// NodeNetworks are the networks node addresses come from.
	NodeNetworks []netip.Prefix
	// PodCIDRs and ServiceCIDRs hold one prefix per family, primary first.
	PodCIDRs     []netip.Prefix
	ServiceCIDRs []netip.Prefix
	// FirstServiceIPs are the kubernetes Service address of each family.
	FirstServiceIPs []netip.Addr
	DNSServiceIP    netip.Addr
	// DNSServiceIPs are the cluster DNS addresses of each family, primary
	// (DNSServiceIP) first; the secondary is the tenth of its range.
	DNSServiceIPs []netip.Addr
	NodeMaskIPv4  int
	NodeMaskIPv6  int
	Domain        string
	// Gateways are the nodes' default routes, one per family at most;
	// Nameservers the resolvers the nodes use.
	Gateways    []netip.Addr
	Nameservers []netip.Addr
	// MTU is the nodes' interface MTU; PodMTU the pod interfaces'.
	MTU           int
	PodMTU        int
	NetworkPolicy bool
	CNI           CNI
	KubeProxyMode string
}

// DualStack reports whether pods and services get an address of each family.
func (n Network) DualStack() bool { return len(n.PodCIDRs) == 2 }

// CNI is the pod network plugin.
type CNI struct {
	Plugin               string
	Version              string
	Mode                 string
	WireGuard            bool
	KubeProxyReplacement bool
	// Images overrides the plugin's component images by component name.
	Images map[string]string
}

// CNIImageComponents are the components of each CNI plugin whose image
// network.cni.images may replace, by the names the spec uses.
func CNIImageComponents(plugin string) []string {
	switch plugin {
	case "calico":
		return []string{"calico-cni", "calico-kube-controllers", "calico-node"}
	case "cilium":
		return []string{"cilium-agent", "cilium-operator"}
	}
	return []string{"flannel", "flannel-cni-plugin"}
}

// Image returns the image of a CNI component: the spec's override, or
// fallback (the plugin's release image of Version).
func (c CNI) Image(component, fallback string) string {
	if img, ok := c.Images[component]; ok {
		return img
	}
	return fallback
}

// Storage is the CSI drivers and StorageClasses.
type Storage struct {
	Drivers []CSIDriver
	Classes []StorageClass
}

// CSIDriver is one CSI driver.
type CSIDriver struct {
	Name           string
	TopologyAware  bool
	AttachRequired bool
	PodInfoOnMount bool
}

// StorageClass is one StorageClass.
type StorageClass struct {
	Name                 string
	Driver               string
	Default              bool
	ReclaimPolicy        string
	VolumeBindingMode    string
	AllowVolumeExpansion bool
	Parameters           []Label
}

// Runtime is the container runtime.
type Runtime struct {
	Engine       string
	Version      string
	CgroupDriver string
	// Socket is the CRI endpoint the kubelet dials.
	Socket string
	// Mirrors are the registry mirrors, by registry host in order.
	Mirrors []Mirror
	// RestrictOOMScoreAdj keeps containers' OOM score adjustment at or
	// above the runtime's own.
	RestrictOOMScoreAdj bool
}

// Mirror is where a registry's images are pulled from first.
type Mirror struct {
	// Registry is the host (and port) image references name, such as
	// "registry.k8s.io".
	Registry string
	// Endpoints are the mirrors, scheme://host[:port] URLs (no path,
	// no query: the checks hold them to it), parsed once by the checks
	// and tried in order before the registry itself.
	Endpoints []*url.URL
}

// URLs are the endpoints as written.
func (m Mirror) URLs() []string {
	out := make([]string, len(m.Endpoints))
	for i, u := range m.Endpoints {
		out[i] = u.String()
	}
	return out
}

// Kubelet holds settings shared by every kubelet.
type Kubelet struct {
	CgroupDriver string
	// FailCgroupV1 makes the kubelet refuse a cgroup v1 host.
	FailCgroupV1 bool
	// ShutdownGrace is how long the kubelet delays a power-off to end
	// the node's pods, ShutdownGraceCritical the part of it kept for
	// critical pods; zero turns graceful node shutdown off.
	ShutdownGrace, ShutdownGraceCritical time.Duration
}

// PKI sets how certificates are issued.
type PKI struct {
	// KeyAlgorithm is "ECDSA-P256", "ECDSA-P384" or "RSA-<bits>".
	KeyAlgorithm string
	CAValidity   time.Duration
	LeafValidity time.Duration
	// ClockSkew is how far a leaf's notBefore lies before the issuance
	// epoch, for nodes whose clocks run behind; never before its CA's.
	// At most MaxClockSkew.
	ClockSkew time.Duration
}

// MaxClockSkew bounds every backdating, of leaves and of CAs: clocks a
// day apart are a broken time service to fix, not a skew to paper over,
// and a long backdating makes a renewed certificate valid before the
// decision to issue it.
const MaxClockSkew = 24 * time.Hour

// Security configures the API server's protections.
type Security struct {
	EncryptionAtRest   bool
	EncryptionProvider string
	Audit              Audit
	AdmissionPlugins   []string
	PodSecurity        string
	// AnonymousAuth lets the API server serve unauthenticated requests.
	AnonymousAuth bool
}

// Audit configures the audit log.
type Audit struct {
	Enabled    bool
	MaxAgeDays int
	MaxBackups int
	MaxSizeMB  int
}

// User is a login on every node.
type User struct {
	Name              string
	SSHAuthorizedKeys []string
	Sudo              bool
}

// Install says how binaries reach the nodes.
type Install struct {
	// Source is "preinstalled" or "download".
	Source    string
	Artifacts []Artifact
}

// Artifact is one file to download and check.
type Artifact struct {
	Name   string
	URL    string
	SHA256 string
	// Path is where a single binary goes; Extract maps archive members
	// to paths.
	Path    string
	Extract []Label
}

// Addons are the cluster services kcompile deploys.
type Addons struct {
	CoreDNS CoreDNS
}

// CoreDNS is the cluster DNS addon.
type CoreDNS struct {
	Version  string
	Replicas int
}

// Position is where the spec set path, or the first setting below it;
// false when neither was written in a file.
func (c *Cluster) Position(path string) (Pos, bool) {
	for _, s := range c.Settings {
		if (s.Path == path || strings.HasPrefix(s.Path, path+".")) && s.Origin.Pos.File != "" {
			return s.Origin.Pos, true
		}
	}
	return Pos{}, false
}

// Boot is how bare-metal machines network-boot through Matchbox.
type Boot struct {
	// MatchboxURL is Matchbox's HTTP endpoint, without a trailing slash.
	MatchboxURL string
	// Images holds the boot image of every role the cluster has, in role
	// order.
	Images []BootImage
	// OwnKernel are the families whose kernel boot.os names; the others
	// boot the cluster's (or their role's).
	OwnKernel []OS
}

// BootImage is what the nodes of one role boot.
type BootImage struct {
	Role Role
	// OS is the family of the role's nodes this image boots.
	OS     OS
	Kernel string
	Initrd []string
	Args   []string
}

// Strings renders addresses or prefixes as their String methods do, in
// order.
func Strings[T fmt.Stringer](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.String()
	}
	return out
}

// Join renders addresses or prefixes as a list, separated by sep.
func Join[T fmt.Stringer](xs []T, sep string) string { return strings.Join(Strings(xs), sep) }
