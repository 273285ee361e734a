package systemd

import (
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/unitfile"
	"github.com/kcompile/kcompile/layout"
)

// UnitFile is a unit and the file name it is installed under.
type UnitFile struct {
	Name string
	Unit unitfile.File
	// Triggered says another of the node's units starts it (a timer's
	// service): the boot does not want it.
	Triggered bool
}

// NodeUnits are the units of a node's components, in the order they start,
// as the tree built with opts holds them: the simulator runs the
// components from their command lines.
func NodeUnits(c *ir.Cluster, n ir.Node, opts Options) []UnitFile {
	return nodeUnits(c, n, opts.placement(n))
}

// nodeUnits returns the systemd services of a node's components, in the
// order they start: etcd before the API server, the runtime before the
// kubelet.
func nodeUnits(c *ir.Cluster, n ir.Node, l placement) []UnitFile {
	var out []UnitFile
	args := func(comp ir.Component, compiled []string) []string { return append(compiled, l.extraArgs(comp)...) }
	members := map[string]ir.EtcdMember{}
	for _, m := range c.Etcd.Members {
		members[m.Node] = m
	}
	const docs = "https://kubernetes.io/docs/reference/command-line-tools-reference/"
	if m, ok := members[n.Name]; ok && n.Runs(ir.ComponentEtcd) {
		online := []string{"network-online.target"}
		u := service("etcd member "+m.Name, "https://etcd.io/docs/", online, online, nil, l.program("etcd"), args(ir.ComponentEtcd, etcdArgs(c, m, l)))
		withEtcdDataDir(&u)
		// Root without DAC override could not enter the etcd user's
		// data directory. "-": systemd sets the sandbox up for the
		// ExecStartPre that creates the directory too, and a missing
		// path fails it on a first boot (226/NAMESPACE); etcd's own
		// ExecStart finds it in place.
		sandbox(&u, []string{"CAP_DAC_OVERRIDE"}, unitfile.Directive{Key: "ReadWritePaths", Value: "-" + l.at(layout.EtcdDataDir)})
		out = append(out, UnitFile{Name: "etcd.service", Unit: u})
		if c.Etcd.Backup != nil {
			out = append(out, backupUnits(m, c.Etcd.Backup, l)...)
		}
	}
	if n.Runs(ir.ComponentAPIServer) {
		after := []string{"network-online.target"}
		if n.Runs(ir.ComponentEtcd) {
			after = append(after, "etcd.service")
		}
		apiserver := service("Kubernetes API server", docs+"kube-apiserver/", after, after, nil, l.program("kube-apiserver"), args(ir.ComponentAPIServer, apiServerArgs(c, n, l)))
		// The audit log is the one place the API server writes
		// (LogsDirectory= is relative to /var/log).
		sandbox(&apiserver, nil, unitfile.Directive{Key: "LogsDirectory", Value: strings.TrimPrefix(layout.AuditLogDir, layout.LogDir)},
			unitfile.Directive{Key: "LogsDirectoryMode", Value: "0700"})
		// Ordered after the API server, but not pulling it in: each
		// exits when it loses its leader lease, and its restart would
		// start an API server an operator (or a halt) had just stopped.
		// The boot starts all three (multi-user.target).
		apiAfter := []string{"kube-apiserver.service"}
		kcm := service("Kubernetes controller manager", docs+"kube-controller-manager/", apiAfter, nil, nil, l.program("kube-controller-manager"), args(ir.ComponentControllerManager, controllerManagerArgs(c, l)))
		sandbox(&kcm, nil)
		scheduler := service("Kubernetes scheduler", docs+"kube-scheduler/", apiAfter, nil, nil, l.program("kube-scheduler"), args(ir.ComponentScheduler, schedulerArgs(l)))
		sandbox(&scheduler, nil)
		out = append(out,
			UnitFile{Name: "kube-apiserver.service", Unit: apiserver},
			UnitFile{Name: "kube-controller-manager.service", Unit: kcm},
			UnitFile{Name: "kube-scheduler.service", Unit: scheduler},
		)
	}
	out = append(out, endpointUnits(c, n, l)...)
	if n.RunsPods() {
		runtime := runtimeUnit(c, l)
		out = append(out, runtime)
		kubeletAfter := []string{"network-online.target", runtime.Name}
		kubelet := service("Kubernetes node agent", docs+"kubelet/", kubeletAfter, kubeletAfter, []string{runtime.Name}, l.program("kubelet"), args(ir.ComponentKubelet, kubeletArgs(n, l)))
		out = append(out, UnitFile{Name: "kubelet.service", Unit: kubelet})
		if n.Runs(ir.ComponentKubeProxy) {
			online := []string{"network-online.target"}
			out = append(out, UnitFile{Name: "kube-proxy.service", Unit: service("Kubernetes network proxy", docs+"kube-proxy/", online, online, nil, l.program("kube-proxy"),
				args(ir.ComponentKubeProxy, []string{flag("config", l.at(layout.KubeProxyConfig)), flag("hostname-override", n.Name)}))})
		}
	}
	if len(out) == 0 {
		return nil
	}
	for i := range out {
		requireInstall(&out[i].Unit)
	}
	return append([]UnitFile{installUnitFile(l)}, out...)
}

// runtimeUnit is the container runtime's service. Its binaries come from
// the runtime's release, not from a distribution package, so the unit is
// ours. It names its configuration, though it is the runtime's default,
// so that the unit says what it reads (kcompile diff restarts it when
// that changes).
func runtimeUnit(c *ir.Cluster, l placement) UnitFile {
	if c.Runtime.Engine == "cri-o" {
		online := []string{"network-online.target"}
		u := service("CRI-O container runtime", "https://cri-o.io/", online, online, nil,
			l.program("crio"), append([]string{flag("config-dir", l.at(layout.CRIODropInDir))}, l.extraArgs(ir.ComponentRuntime)...))
		withRuntimeLimits(&u)
		return UnitFile{Name: "crio.service", Unit: u}
	}
	after := []string{"network-online.target", "local-fs.target"}
	u := service("containerd container runtime", "https://containerd.io/", after, after, nil,
		l.program("containerd"), append([]string{flag("config", l.at(l.containerdConfig))}, l.extraArgs(ir.ComponentRuntime)...))
	withRuntimeLimits(&u)
	return UnitFile{Name: "containerd.service", Unit: u}
}

// withRuntimeLimits gives a runtime what its upstream unit does: its
// children survive a restart of the daemon, and it manages its own
// delegated cgroup tree.
func withRuntimeLimits(u *unitfile.File) {
	for i := range u.Sections {
		if u.Sections[i].Name == "Service" {
			u.Sections[i].Directives = append([]unitfile.Directive{unitfile.Exec("ExecStartPre", "-", layout.Abs(layout.Modprobe), "overlay")}, u.Sections[i].Directives...)
			u.Sections[i].Directives = append(u.Sections[i].Directives,
				unitfile.Directive{Key: "Type", Value: "notify"}, unitfile.Directive{Key: "Delegate", Value: "yes"}, unitfile.Directive{Key: "KillMode", Value: "process"},
				unitfile.Directive{Key: "OOMScoreAdjust", Value: "-999"}, unitfile.Directive{Key: "TasksMax", Value: "infinity"})
		}
	}
}

// etcdSysusers and etcdTmpfiles give the data directory the owner and
// mode CIS 1.1.11 and 1.1.12 ask for: an etcd system user, 0700. etcd
// itself runs as root, because its keys stay root-owned (CIS 1.1.19).
const (
	etcdSysusers = "u etcd - \"etcd data\" " + "/" + layout.EtcdDataDir + "\n"
	etcdTmpfiles = "d " + "/" + layout.EtcdDataDir + " 0700 etcd etcd -\n"
)

// sandbox confines a control-plane daemon: it reads its configuration
// and keys, listens and dials, and writes only where extra says. It
// keeps only the capabilities caps. They run as root because their keys
// are root's (CIS 1.1.19), so that reading them needs no capability.
func sandbox(u *unitfile.File, caps []string, extra ...unitfile.Directive) {
	d := []unitfile.Directive{
		{Key: "CapabilityBoundingSet", Value: strings.Join(caps, " ")},
		{Key: "NoNewPrivileges", Value: "yes"},
		{Key: "ProtectSystem", Value: "strict"},
		{Key: "ProtectHome", Value: "yes"},
		{Key: "PrivateTmp", Value: "yes"},
		{Key: "PrivateDevices", Value: "yes"},
		{Key: "ProtectKernelTunables", Value: "yes"},
		{Key: "ProtectKernelModules", Value: "yes"},
		{Key: "ProtectKernelLogs", Value: "yes"},
		{Key: "ProtectControlGroups", Value: "yes"},
		{Key: "ProtectClock", Value: "yes"},
		{Key: "ProtectHostname", Value: "yes"},
		{Key: "ProtectProc", Value: "invisible"},
		// Netlink: Go lists the host's interfaces through it.
		{Key: "RestrictAddressFamilies", Value: "AF_UNIX AF_INET AF_INET6 AF_NETLINK"},
		{Key: "RestrictNamespaces", Value: "yes"},
		{Key: "RestrictRealtime", Value: "yes"},
		{Key: "RestrictSUIDSGID", Value: "yes"},
		{Key: "LockPersonality", Value: "yes"},
		{Key: "MemoryDenyWriteExecute", Value: "yes"},
		{Key: "SystemCallArchitectures", Value: "native"},
		{Key: "SystemCallFilter", Value: "@system-service"},
		// A call outside the filter fails; it does not kill the daemon.
		{Key: "SystemCallErrorNumber", Value: "EPERM"},
		{Key: "UMask", Value: "0077"},
	}
	d = append(d, extra...)
	for i := range u.Sections {
		if u.Sections[i].Name == "Service" {
			u.Sections[i].Directives = append(u.Sections[i].Directives, d...)
		}
	}
}

// unsafeBecause says why a unit systemd-analyze rates UNSAFE cannot be
// confined, or "" for units that must not be.
func unsafeBecause(unit string) string {
	switch unit {
	case "kubelet.service":
		return "the kubelet mounts volumes, manages cgroups and devices, and starts every pod through the runtime: it needs the host as root"
	case "containerd.service", "crio.service":
		return "the runtime creates the namespaces, cgroups, mounts and devices of every container"
	case "kube-proxy.service":
		return "kube-proxy programs the host's packet filter (iptables, IPVS or nftables), which needs CAP_NET_ADMIN on the host's network"
	case "kcompile-install.service":
		return "the installer writes the component binaries under " + layout.Abs(layout.BinDir) + ", downloading them first"
	}
	return ""
}

// withEtcdDataDir applies the two files before etcd starts: at boot
// systemd applies them anyway, but cloud-init writes them after that.
func withEtcdDataDir(u *unitfile.File) {
	for i := range u.Sections {
		if u.Sections[i].Name == "Service" {
			u.Sections[i].Directives = append([]unitfile.Directive{
				// "+": outside the sandbox, which cannot add users.
				unitfile.Exec("ExecStartPre", "+", layout.Abs(layout.SystemdSysusers), layout.Abs(layout.EtcdSysusersConf)),
				unitfile.Exec("ExecStartPre", "+", layout.Abs(layout.SystemdTmpfiles), "--create", layout.Abs(layout.EtcdTmpfilesConf)),
			}, u.Sections[i].Directives...)
		}
	}
}
