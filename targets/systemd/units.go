package systemd

import (
	"github.com/kcompile/kcompile/compiler/ir"
	"path"
)

// unitFile is a unit and the file name it is installed under.
type unitFile struct {
	Name string
	Unit Unit
}

const unitDir = "etc/systemd/system/"

// nodeUnits returns the systemd services of a node's components, in the
// order they start: etcd before the API server, the runtime before the
// kubelet.
func nodeUnits(c *ir.Cluster, n ir.Node) []unitFile {
	var out []unitFile
	members := map[string]ir.EtcdMember{}
	for _, m := range c.Etcd.Members {
		members[m.Node] = m
	}
	const docs = "https://kubernetes.io/docs/reference/command-line-tools-reference/"
	if m, ok := members[n.Name]; ok && n.Runs(ir.ComponentEtcd) {
		u := service("etcd member "+m.Name, "https://etcd.io/docs/",
			[]string{"network-online.target"}, nil, program("etcd"), etcdArgs(c, m))
		withEtcdDataDir(&u)
		out = append(out, unitFile{"etcd.service", u})
	}
	if n.Runs(ir.ComponentAPIServer) {
		after := []string{"network-online.target"}
		if n.Runs(ir.ComponentEtcd) {
			after = append(after, "etcd.service")
		}
		out = append(out,
			unitFile{"kube-apiserver.service", service("Kubernetes API server", docs+"kube-apiserver/",
				after, nil, program("kube-apiserver"), apiServerArgs(c, n))},
			unitFile{"kube-controller-manager.service", service("Kubernetes controller manager", docs+"kube-controller-manager/",
				[]string{"kube-apiserver.service"}, nil, program("kube-controller-manager"), controllerManagerArgs(c))},
			unitFile{"kube-scheduler.service", service("Kubernetes scheduler", docs+"kube-scheduler/",
				[]string{"kube-apiserver.service"}, nil, program("kube-scheduler"), schedulerArgs())},
		)
	}
	if n.RunsPods() {
		runtime := runtimeUnit(c)
		out = append(out, runtime)
		kubelet := service("Kubernetes node agent", docs+"kubelet/",
			[]string{"network-online.target", runtime.Name}, []string{runtime.Name}, program("kubelet"), kubeletArgs(n))
		out = append(out, unitFile{"kubelet.service", kubelet})
		if n.Runs(ir.ComponentKubeProxy) {
			out = append(out, unitFile{"kube-proxy.service", service("Kubernetes network proxy", docs+"kube-proxy/",
				[]string{"network-online.target"}, nil, program("kube-proxy"),
				[]string{flag("config", kubeProxyConfigPath), flag("hostname-override", n.Name)})})
		}
	}
	if len(out) == 0 {
		return nil
	}
	for i := range out {
		requireInstall(&out[i].Unit)
	}
	return append([]unitFile{installUnitFile()}, out...)
}

// runtimeUnit is the container runtime's service. Its binaries come from
// the runtime's release, not from a distribution package, so the unit is
// ours. It names its configuration, though it is the runtime's default,
// so that the unit says what it reads (kcompile diff restarts it when
// that changes).
func runtimeUnit(c *ir.Cluster) unitFile {
	if c.Runtime.Engine == "cri-o" {
		u := service("CRI-O container runtime", "https://cri-o.io/", []string{"network-online.target"}, nil,
			program("crio"), []string{flag("config-dir", "/"+path.Dir(crioConfigPath))})
		withRuntimeLimits(&u)
		return unitFile{"crio.service", u}
	}
	u := service("containerd container runtime", "https://containerd.io/", []string{"network-online.target", "local-fs.target"}, nil,
		program("containerd"), []string{flag("config", "/"+containerdConfigPath)})
	withRuntimeLimits(&u)
	return unitFile{"containerd.service", u}
}

// withRuntimeLimits gives a runtime what its upstream unit does: its
// children survive a restart of the daemon, and it manages its own
// delegated cgroup tree.
func withRuntimeLimits(u *Unit) {
	for i := range u.Sections {
		if u.Sections[i].Name == "Service" {
			u.Sections[i].Directives = append([]Directive{{"ExecStartPre", "-/sbin/modprobe overlay"}}, u.Sections[i].Directives...)
			u.Sections[i].Directives = append(u.Sections[i].Directives,
				Directive{"Type", "notify"}, Directive{"Delegate", "yes"}, Directive{"KillMode", "process"},
				Directive{"OOMScoreAdjust", "-999"}, Directive{"TasksMax", "infinity"})
		}
	}
}

// etcdSysusers and etcdTmpfiles give the data directory the owner and
// mode CIS 1.1.11 and 1.1.12 ask for: an etcd system user, 0700. etcd
// itself runs as root, because its keys stay root-owned (CIS 1.1.19).
const (
	etcdDataDir      = "/var/lib/etcd"
	etcdSysusersPath = "etc/sysusers.d/kcompile-etcd.conf"
	etcdTmpfilesPath = "etc/tmpfiles.d/kcompile-etcd.conf"
	etcdSysusers     = "u etcd - \"etcd data\" " + etcdDataDir + "\n"
	etcdTmpfiles     = "d " + etcdDataDir + " 0700 etcd etcd -\n"
)

// withEtcdDataDir applies the two files before etcd starts: at boot
// systemd applies them anyway, but cloud-init writes them after that.
func withEtcdDataDir(u *Unit) {
	for i := range u.Sections {
		if u.Sections[i].Name == "Service" {
			u.Sections[i].Directives = append([]Directive{
				{"ExecStartPre", "/usr/bin/systemd-sysusers /" + etcdSysusersPath},
				{"ExecStartPre", "/usr/bin/systemd-tmpfiles --create /" + etcdTmpfilesPath},
			}, u.Sections[i].Directives...)
		}
	}
}
