// Package layout is every path a node carries, in the manner of kubeadm's
// constants: the PKI, kubeconfigs, units and their drop-ins, the
// components' and the runtime's configurations, kcompile's own scripts,
// state directories and the host paths the addons mount; and where a
// node's files sit in a target's tree. It is the one package that spells
// a node path: the compiler, the renderers, the runtimes and review name
// these constants. Paths are relative to the node's root, as trees hold
// them; Abs gives the absolute path a program on the node is told.
package layout

import "strings"

// Abs is a root-relative path as seen on the node.
func Abs(p string) string { return "/" + p }

// Where a node's files and the cluster's sit in a target's tree.
const (
	nodesDir   = "nodes/"
	clusterDir = "cluster/"
)

// NodeTree is where a node's root-relative file goes in a target's tree.
func NodeTree(node, p string) string { return nodesDir + node + "/" + p }

// ClusterTree is where a cluster-wide file goes in a target's tree.
func ClusterTree(p string) string { return clusterDir + p }

// SplitTree reads a tree path back: the node and the path on its root,
// or ok false for a file that is not a node's.
func SplitTree(p string) (node, rel string, ok bool) {
	rest, ok := strings.CutPrefix(p, nodesDir)
	if !ok {
		return "", "", false
	}
	node, rel, ok = strings.Cut(rest, "/")
	return node, rel, ok && node != ""
}

// The PKI, kubeadm's layout. A certificate's stem takes ".crt", its key
// ".key" (CertFile, KeyFile).
const (
	PKIDir     = "etc/kubernetes/pki/"
	EtcdPKIDir = PKIDir + "etcd/"

	// The CAs' certificates (and the cluster CA's key, on control-plane
	// nodes, where the controller-manager signs kubelet certificates).
	ClusterCACert = PKIDir + "ca.crt"
	ClusterCAKey  = PKIDir + "ca.key"
	// ClusterSigningCACert is the certificate of ClusterCAKey alone: the
	// controller-manager's CSR signer takes a file of one certificate,
	// while ca.crt holds two during a rotation of the CA.
	ClusterSigningCACert = PKIDir + "cluster-signing-ca.crt"
	FrontProxyCACert     = PKIDir + "front-proxy-ca.crt"
	EtcdCACert           = EtcdPKIDir + "ca.crt"
	// The other CAs' keys, where a kubeadm PKI directory holds them
	// (secrets import-kubeadm reads them).
	EtcdCAKey       = EtcdPKIDir + "ca.key"
	FrontProxyCAKey = PKIDir + "front-proxy-ca.key"

	// The service-account signing key and its public half.
	ServiceAccountKey    = PKIDir + "sa.key"
	ServiceAccountPubKey = PKIDir + "sa.pub"

	// Leaf certificate stems.
	APIServerStem              = PKIDir + "apiserver"
	APIServerKubeletClientStem = PKIDir + "apiserver-kubelet-client"
	APIServerEtcdClientStem    = PKIDir + "apiserver-etcd-client"
	FrontProxyClientStem       = PKIDir + "front-proxy-client"
	EtcdServerStem             = EtcdPKIDir + "server"
	EtcdPeerStem               = EtcdPKIDir + "peer"
	EtcdHealthcheckClientStem  = EtcdPKIDir + "healthcheck-client"
	KubeletServingStem         = KubeletDir + "pki/kubelet"
	// EndpointHealthStem is the client certificate the endpoint's HAProxy
	// checks the API servers' /readyz with (anonymous requests are off).
	EndpointHealthStem = PKIDir + "endpoint-health"
)

// CertFile is the path of a stem's certificate.
func CertFile(stem string) string { return stem + ".crt" }

// KeyFile is the path of a stem's private key.
func KeyFile(stem string) string { return stem + ".key" }

// Kubeconfigs.
const (
	KubernetesDir               = "etc/kubernetes/"
	AdminKubeconfig             = KubernetesDir + "admin.conf"
	SuperAdminKubeconfig        = KubernetesDir + "super-admin.conf"
	ControllerManagerKubeconfig = KubernetesDir + "controller-manager.conf"
	SchedulerKubeconfig         = KubernetesDir + "scheduler.conf"
	KubeletKubeconfig           = KubernetesDir + "kubelet.conf"
	KubeProxyKubeconfig         = KubeProxyDir + "kubeconfig.conf"
	CalicoKubeconfig            = CNIConfDir + "calico-kubeconfig"
)

// What kcompile restore lays and moves on an etcd member.
const (
	// EtcdRestoringDir is where etcdutl writes a member's data from the
	// snapshot, renamed to EtcdDataDir once whole; the data it replaces
	// is moved to EtcdBeforeRestoreDir plus the restore's time.
	EtcdRestoringDir     = "var/lib/etcd.restoring"
	EtcdBeforeRestoreDir = "var/lib/etcd.before-restore-"
	// RestoreDir holds what the restore lays on a member while it runs
	// (the snapshot, etcdutl when the node has none); it is removed at
	// the end.
	RestoreDir      = "var/lib/kcompile-restore/"
	RestoreSnapshot = RestoreDir + "snapshot.db"
	RestoreEtcdutl  = RestoreDir + "etcdutl"
)

// The components' configurations and state.
const (
	KubeletDir           = "var/lib/kubelet/"
	KubeletConfig        = KubeletDir + "config.yaml"
	KubeProxyDir         = "var/lib/kube-proxy/"
	KubeProxyConfig      = KubeProxyDir + "config.conf"
	SchedulerConfig      = KubernetesDir + "scheduler-config.yaml"
	EncryptionConfig     = KubernetesDir + "encryption-config.yaml"
	AuditPolicy          = KubernetesDir + "audit-policy.yaml"
	LogDir               = "var/log/"
	EtcdDataDir          = "var/lib/etcd"
	HAProxyConfig        = "etc/haproxy/haproxy.cfg"
	KeepalivedConfig     = "etc/keepalived/keepalived.conf"
	KeepalivedInterface  = "run/keepalived/interface.conf"
	HAProxyProgram       = "usr/sbin/haproxy"
	KeepalivedProgram    = "usr/sbin/keepalived"
	SystemdSysusers      = "usr/bin/systemd-sysusers"
	SystemdTmpfiles      = "usr/bin/systemd-tmpfiles"
	ContainerdStateDir   = "var/lib/containerd"
	CloudInitNoCloudSeed = "var/lib/cloud/seed/nocloud/"
)

// The files of a node's cloud-init NoCloud seed: in the cloudinit
// target's tree beside each other, under CloudInitNoCloudSeed on a
// machine kcompile up boots.
const (
	UserData      = "user-data"
	MetaData      = "meta-data"
	NetworkConfig = "network-config"
)

// Units, drop-ins and the host's configuration directories.
const (
	UnitDir = "etc/systemd/system/"
	// BootDropIn makes multi-user.target want kcompile's units.
	BootDropIn       = UnitDir + "multi-user.target.d/kcompile.conf"
	ModulesLoadDir   = "etc/modules-load.d/"
	ModulesConf      = ModulesLoadDir + "kubernetes.conf"
	SysctlConf       = "etc/sysctl.d/99-kubernetes.conf"
	EtcdSysusersConf = "etc/sysusers.d/kcompile-etcd.conf"
	EtcdTmpfilesConf = "etc/tmpfiles.d/kcompile-etcd.conf"
	// EtcdBackupTmpfilesConf makes etcd's snapshot directory, 0700.
	EtcdBackupTmpfilesConf = "etc/tmpfiles.d/kcompile-etcd-backup.conf"
	// FlannelTmpfilesConf removes flannel's CNI configuration at boot.
	FlannelTmpfilesConf = "etc/tmpfiles.d/kcompile-flannel.conf"
	Hostname            = "etc/hostname"
	Hosts               = "etc/hosts"
	ResolvConf          = "etc/resolv.conf"
	MachineID           = "etc/machine-id"
	NetworkdNetwork     = "etc/systemd/network/00-kcompile.network"
	NMConnection        = "etc/NetworkManager/system-connections/kcompile.nmconnection"
	CloudInitCfgDir     = "etc/cloud/cloud.cfg.d/"
	CloudInitOff        = "etc/cloud/cloud-init.disabled"
	ModulesDir          = "lib/modules/"
)

// UnitDropIn is a drop-in of a unit, named name.
func UnitDropIn(unit, name string) string { return UnitDir + unit + ".d/" + name }

// The container runtime's configuration and the CNI.
const (
	ContainerdConfig      = "etc/containerd/config.toml"
	ContainerdHostsDir    = "etc/containerd/certs.d"
	CRIODropInDir         = "etc/crio/crio.conf.d/"
	CRIOConfig            = CRIODropInDir + "10-kcompile.conf"
	ContainersRegistries  = "etc/containers/registries.conf.d/10-kcompile.conf"
	CNIConfDir            = "etc/cni/net.d/"
	CNIBinDir             = "opt/cni/bin"
	CNIStateDir           = "var/lib/cni/networks"
	XtablesLock           = "run/xtables.lock"
	KernelModulesHostPath = "lib/modules"
)

// ContainerdHosts is the hosts.toml of a registry's mirrors.
func ContainerdHosts(registry string) string {
	return ContainerdHostsDir + "/" + registry + "/hosts.toml"
}

// Where binaries and kcompile's own scripts go, by whether the OS's /usr
// is writable: Flatcar's is not, and its PATH has /opt/bin.
const (
	BinDir        = "usr/local/bin"
	LibDir        = "usr/local/lib/kcompile"
	FlatcarBinDir = "opt/bin"
	FlatcarLibDir = "opt/kcompile/lib"
	StartScript   = "start"
	InstallScript = "install.sh"
	// EtcdBackupScript takes, checks and prunes an etcd member's
	// snapshots (etcd.backup).
	EtcdBackupScript = "etcd-backup"
	BinariesList     = "binaries.list"
	UsrDir           = "usr"
	UsrLocalDir      = "usr/local"
)

// Logs, state, the programs units and configurations run, and the CNI
// plugins' host paths.
const (
	// AuditLogDir is the API server's audit log directory, under LogDir
	// (systemd creates it from the unit's LogsDirectory=).
	AuditLogDir = LogDir + "kubernetes/audit"
	AuditLog    = AuditLogDir + "/audit.log"
	// VRRPInterfaceScript, like StartScript, is a name in the lib
	// directory.
	VRRPInterfaceScript = "vrrp-interface"
	KeepalivedPID       = "run/keepalived/keepalived.pid"
	KeepalivedVRRPPID   = "run/keepalived/vrrp.pid"
	// InstallMarksDir records which archive members the installer put in
	// place, since an extracted binary has no sum of its own to check.
	InstallMarksDir = "var/lib/kcompile/artifacts"
	// ArtifactCacheDir holds archives a node's config fetched before the
	// first boot (Ignition's remote files, verified by their sha256),
	// each named by its sha256; the installer extracts from it rather
	// than downloading again.
	ArtifactCacheDir = "var/cache/kcompile/artifacts/"
	// Programs the units, the configurations and the users run.
	Systemctl  = "bin/systemctl"
	Kill       = "bin/kill"
	Modprobe   = "sbin/modprobe"
	LoginShell = "bin/bash"
	// The CNI plugins' host paths, which their DaemonSets mount.
	CalicoStateDir      = "var/lib/calico"
	CalicoRunDir        = "var/run/calico"
	CalicoPolicySyncDir = "var/run/nodeagent"
	CalicoCNILogDir     = "var/log/calico/cni"
	FlannelRunDir       = "run/flannel"
	CiliumRunDir        = "var/run/cilium"
	CiliumCgroupRoot    = "run/cilium/cgroupv2"
	NetnsDir            = "var/run/netns"
)

// What kcompile up adds to a machine, and the stock image it builds.
const (
	// UpDir holds what kcompile up adds to a machine beside the tree: its
	// PID 1, which makes what the host mounts read-only writable and then
	// execs systemd, and the files it binds over the sysctls a machine may
	// not write.
	UpDir  = ".kcompile-up/"
	UpInit = UpDir + "init"
	// UpCmdline is the kernel command line of a machine of the Ignition
	// target, which its PID 1 binds over /proc/cmdline while Ignition
	// runs; UpIgnition is Ignition's program, in a layer of its own.
	UpCmdline  = UpDir + "cmdline"
	UpIgnition = UpDir + "ignition"
	// UpNetwork configures the node's addresses and routes as a network
	// boot's initramfs has them (DHCP's), for Ignition to fetch with;
	// UpNetworkKept says the machine keeps them after Ignition, having
	// nothing of its own that reads its config's network file.
	UpNetwork     = UpDir + "network"
	UpNetworkKept = UpDir + "network-kept"
	UpSysctlDir   = UpDir + "sysctl/"
	// UpSysfs is where up's PID 1 mounts a sysfs of the machine's own
	// network namespace, until it has bound its network directories.
	UpSysfs = "run/kcompile-up/sys"
	// UpDropIn is the name of up's drop-ins (UnitDropIn): up changes a
	// compiled file only by adding files beside it.
	UpDropIn = "50-kcompile-up.conf"
	// ContainerdUpConfig is up's copy of ContainerdConfig, which its
	// drop-in gives containerd.
	ContainerdUpConfig = "etc/containerd/kcompile-up.toml"
	// The stock image up builds: the distribution's systemd and units, and
	// its own cloud-init configuration.
	SystemdInit       = "lib/systemd/systemd"
	SystemdLibUnitDir = "lib/systemd/system/"
	OSRelease         = "etc/os-release"
	DefaultLocale     = "etc/default/locale"
	CloudInitUpCfg    = CloudInitCfgDir + "90-kcompile-up.cfg"
)
