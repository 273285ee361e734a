package nspawn

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/targets/systemd"
)

// Adjustment is one thing up does that the compiled tree does not say:
// set-up of the machines that a bare-metal host does by itself, or a
// change this host needs. up prints every one it applies.
type Adjustment struct {
	// Name is short and stable: docs/up.md lists every adjustment by it.
	Name string
	// What is done, and Why.
	What, Why string
}

// String is how up prints it.
func (a Adjustment) String() string { return a.Name + ": " + a.What + ": " + a.Why }

// hostFacts is what up must work around on this host.
type hostFacts struct {
	// cgroupV1 says the host mounts cgroup v1 controllers, which nspawn
	// mounts read-only inside.
	cgroupV1 bool
	// noSysResource says the host's capability bounding set lacks
	// CAP_SYS_RESOURCE: a container runtime in a machine cannot raise
	// OOM score adjustments.
	noSysResource bool
	// kernel is what the host's kernel has of the modules the nodes
	// load.
	kernel kernelFacts
	// conntrack are the host's connection tracking limits, which
	// kube-proxy raises.
	conntrack conntrackFacts
	// cgroups are the host's cgroup hierarchies.
	cgroups []cgroupMount
}

// readHostFacts reads /proc for what the adjustments depend on.
func readHostFacts() (hostFacts, error) {
	var h hostFacts
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return h, err
	}
	h.cgroups = readCgroupMounts(mounts)
	sc := bufio.NewScanner(bytes.NewReader(mounts))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[2] == "cgroup" {
			h.cgroupV1 = true
		}
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return h, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			bits, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return h, fmt.Errorf("/proc/self/status: CapBnd %q", v)
			}
			const capSysResource = 24
			h.noSysResource = bits&(1<<capSysResource) == 0
		}
	}
	if h.kernel, err = readKernelFacts(); err != nil {
		return h, err
	}
	h.conntrack, err = readConntrackFacts()
	return h, err
}

// adjustments is everything up applies, decided once before any machine
// starts.
type adjustments struct {
	list []Adjustment
	// nspawn are extra systemd-nspawn options.
	nspawn []string
	// init is the PID-1 script, layout.UpInit.
	init string
	// sysctls are files bound over read-only /proc/sys entries, by
	// /proc/sys path, with their initial content.
	sysctls map[string]string
	// files are written into every machine's upper layer, by
	// root-relative path.
	files map[string][]byte
	// hosts is every machine's /etc/hosts but its own name's line.
	hosts string
	// overrides are the changes to the compiled files of the nodes that
	// run pods, made by files the systemd target renders beside them.
	overrides systemd.UpOverrides
	// cgroups are the hierarchies each machine gets a cgroup of its own
	// in.
	cgroups []cgroupMount
}

func (a *adjustments) add(name, what, why string) {
	a.list = append(a.list, Adjustment{Name: name, What: what, Why: why})
}

// cloudInitOff disables the image's cloud-init, which is there for the
// cloud-init target: the file's comment and the reason say what the
// target has instead.
func (a *adjustments) cloudInitOff(comment, why string) {
	a.files[layout.CloudInitOff] = []byte("# kcompile up: " + comment + "\n")
	a.add("cloud-init-disabled", "cloud-init disabled ("+layout.CloudInitOff+")", "the image carries cloud-init for the cloud-init target; "+why)
}

// decide works out the adjustments for a cluster on this host.
func decide(c *ir.Cluster, p *plan, h hostFacts, target pipeline.Target, mirror string) (*adjustments, error) {
	a := &adjustments{sysctls: map[string]string{}, files: map[string][]byte{}}
	var init strings.Builder
	init.WriteString("#!/bin/sh\n# kcompile up: the machine's PID 1 until it execs systemd. Each step is\n# an adjustment kcompile up printed when it started.\nset -eu\n")

	if len(h.cgroups) > 0 {
		a.cgroups = h.cgroups
		a.add("cgroups", "each machine started in a cgroup of its own in every hierarchy ("+filepath.Join(cgroupRoot, "*", p.bridge, "<node>")+"), removed by down",
			"systemd-nspawn run outside systemd keeps a machine in the cgroup it was started in, which would be up's own for every machine: the machines' systemd and kubelets would share the host's top-level system.slice and kubepods.slice and leave them behind, and cilium's socket programs, attached at the root a machine sees, would apply to every machine")
	}
	a.nspawn = append(a.nspawn, "--capability=all")
	a.add("capabilities", "every capability for the machines (systemd-nspawn --capability=all)",
		"a machine in a network namespace of up's gets no CAP_NET_ADMIN by default, and kube-proxy, flannel and the CNI plugins need it")
	a.nspawn = append(a.nspawn, "--system-call-filter=@keyring")
	a.add("keyring", "keyring system calls allowed (systemd-nspawn --system-call-filter=@keyring)",
		"runc makes each container a session keyring")
	if c.Network.CNI.Plugin == "cilium" {
		a.nspawn = append(a.nspawn, "--system-call-filter=bpf perf_event_open")
		a.add("bpf", "bpf() and perf_event_open() allowed (systemd-nspawn --system-call-filter=bpf perf_event_open)",
			"cilium's agent loads its datapath as eBPF programs and reads its events from perf buffers; systemd-nspawn denies both system calls by default")
		if h.noSysResource {
			const why = "this host's capability bounding set lacks CAP_SYS_RESOURCE, and runc does not start a container that adds a capability outside it"
			a.overrides.DropCapabilities, a.overrides.CapabilitiesWhy = []corev1.Capability{"SYS_RESOURCE"}, why
			a.add("cilium-sys-resource", "cilium's agent and clean-cilium-state containers started without CAP_SYS_RESOURCE (up applies a copy of "+layout.ClusterTree("addons/20-cni-cilium.yaml")+" without it)",
				why+"; the agent needs it only to lift the memlock limit on kernels older than 5.11, which account BPF memory to it")
		}
	}
	a.nspawn = append(a.nspawn, "--bind=/dev/kmsg")
	a.add("kmsg", "/dev/kmsg bound into the machines", "the kubelet's OOM watcher reads the kernel log")

	init.WriteString("# /proc/sys/net is read-only in a machine whose namespace nspawn did not make.\nmount -o remount,bind,rw /proc/sys/net 2>/dev/null || { mount --bind /proc/sys/net /proc/sys/net && mount -o remount,bind,rw /proc/sys/net; }\n")
	a.add("proc-sys-net", "/proc/sys/net read-write inside the machines",
		"systemd-nspawn --network-namespace-path leaves it read-only; kube-proxy and flannel set per-namespace network sysctls")

	sysfs := layout.Abs(layout.UpSysfs)
	init.WriteString("# A sysfs of the machine's own network namespace: nspawn shows the host's\n# devices under /sys/class/net.\nmkdir -p " + sysfs + "\nmount -t sysfs sysfs " + sysfs + "\nmount --bind " + sysfs + "/class/net /sys/class/net\nmount --bind " + sysfs + "/devices/virtual/net /sys/devices/virtual/net\numount -l " + sysfs + "\n")
	a.add("sysfs-net", "a sysfs of the machine's own network namespace over /sys/class/net and /sys/devices/virtual/net",
		"systemd-nspawn --network-namespace-path shows the host's devices there; cloud-init matches the spec's MAC through it, and the kubelet reads its interfaces")

	// Check refused a cluster whose modules the kernel lacks.
	if have, _ := h.kernel.split(clusterModules(c)); len(have) > 0 {
		release := h.kernel.release
		a.files[layout.ModulesDir+release+"/modules.builtin"] = modulesBuiltin(have)
		init.WriteString("# The modules.builtin stand-in's indexes, for modprobe.\nd=" + layout.Abs(layout.ModulesDir) + "$(uname -r)\nif [ -f \"$d/modules.builtin\" ] && [ ! -f \"$d/modules.builtin.bin\" ]; then depmod 2>/dev/null; fi\n")
		a.add("modules-builtin", "a modules.builtin stand-in in each machine's "+layout.Abs(layout.ModulesDir)+release+" ("+strings.Join(have, ", ")+")",
			"the machines have none of the host kernel's modules, so modprobe fails even for what the kernel has built in; with the stand-in it answers as on the host")
	}
	if h.cgroupV1 {
		init.WriteString("# cgroup v1 controllers, which nspawn mounts read-only.\nwhile read -r _ dir type _ _ _; do\n\tif [ \"$type\" = cgroup ]; then mount -o remount,bind,rw \"$dir\"; fi\ndone </proc/self/mounts\n")
		a.add("cgroup-v1-rw", "cgroup v1 controllers remounted read-write inside the machines",
			"this host has cgroup v1 (hybrid); systemd-nspawn mounts the controllers read-only and runc must write them")
	}

	if p.kubelets() > 0 {
		a.add("containerd-dir", layout.Abs(layout.ContainerdStateDir)+" of each kubelet machine is a directory of the host's, bound in (under the work directory)",
			"containerd's overlayfs snapshots cannot have their upper layers on the machine's own overlay root")
		for _, s := range []struct{ path, value string }{
			{"vm/overcommit_memory", "1"}, {"kernel/panic", "10"}, {"kernel/panic_on_oops", "1"},
		} {
			a.sysctls[s.path] = s.value + "\n"
		}
		a.add("sysctl-files", "files bound over /proc/sys/vm/overcommit_memory, kernel/panic and kernel/panic_on_oops (1, 10, 1)",
			"the kubelet writes these host-wide sysctls, which a machine may not change")
		if old := oldKubeProxies(c); len(old) > 0 && h.conntrack.max >= h.conntrack.want() {
			// Check refused a host whose limit is lower than kube-proxy
			// wants: the file holds the host's, at least as large.
			a.sysctls["net/netfilter/nf_conntrack_max"] = strconv.Itoa(h.conntrack.max) + "\n"
			a.add("conntrack-max-file", fmt.Sprintf("a file holding the host's nf_conntrack_max (%d) bound over /proc/sys/net/netfilter/nf_conntrack_max", h.conntrack.max),
				fmt.Sprintf("kube-proxy before 1.37 (%s) writes the limit it computes (%d) whenever the current one differs, even to lower it, and exits when it cannot, and a machine may not change this host-wide sysctl; the host's limit is already at least that", strings.Join(old, ", "), h.conntrack.want()))
		}
		var paths []string
		for p := range a.sysctls {
			paths = append(paths, p)
		}
		slices.Sort(paths)
		init.WriteString("# Files over the host-wide sysctls the kubelet (and an older kube-proxy)\n# sets, which are not per-namespace and so read-only in a machine.\nfor s in " + strings.Join(paths, " ") + "; do\n\tmount --bind \"" + layout.Abs(layout.UpSysctlDir) + "$(echo \"$s\" | tr / .)\" \"/proc/sys/$s\"\ndone\n")
		if h.cgroupV1 {
			// A machine's systemd sees its cgroups above its own root
			// ("/.." in /proc/1/cgroup): it never hears that a
			// container's scope emptied, and a halt waits out every
			// scope's stop timeout.
			a.files[layout.UnitDropIn(containerScopePrefix, layout.UpDropIn)] = []byte("# Written by kcompile up: on a cgroup v1 host systemd in a machine is\n# not told that a container's scope emptied.\n[Scope]\nTimeoutStopSec=2s\n")
			a.add("scope-stop", "containers' scopes stop within 2 s ("+layout.Abs(layout.UnitDropIn(containerScopePrefix, layout.UpDropIn))+")",
				"this host has cgroup v1: systemd in a machine is not told when a container's scope empties, so a halt would wait out each scope's 90 s stop timeout after its processes are gone")
		}
		if h.cgroupV1 && c.Kubelet.FailCgroupV1 {
			const why = "this host has cgroup v1 and the spec leaves kubelet.failCgroupV1 true; set it to false in the spec to compile this in"
			a.overrides.KubeletArgs, a.overrides.KubeletWhy = []string{"--fail-cgroupv1=false"}, why
			a.add("fail-cgroupv1", "kubelet started with --fail-cgroupv1=false (a drop-in, "+layout.UnitDropIn("kubelet.service", layout.UpDropIn)+")", why)
		}
		if h.noSysResource && c.Runtime.Engine == "containerd" && !c.Runtime.RestrictOOMScoreAdj {
			const why = "this host's capability bounding set lacks CAP_SYS_RESOURCE; set runtime.restrictOOMScoreAdj: true in the spec to compile this in"
			a.overrides.RestrictOOMScoreAdj = true
			a.containerdWhy(why)
			a.add("restrict-oom-score-adj", "containerd's restrict_oom_score_adj = true, in a copy of its configuration ("+layout.ContainerdUpConfig+", which a drop-in of containerd.service gives it)", why)
		}
	}

	a.files[layout.ResolvConf] = resolvConf(c, p)
	a.add("resolv-conf", layout.Abs(layout.ResolvConf)+" written in each machine ("+strings.TrimSpace(strings.ReplaceAll(string(a.files[layout.ResolvConf]), "\n", "; "))+")",
		"a host's resolver configuration is the installed system's business, not the tree's; the spec's network.nameservers, or else the gateway")
	a.hosts = "# Written by kcompile up.\n" + localHosts
	what, why := layout.Abs(layout.Hosts)+" written in each machine, naming the machine at its address",
		"the machines resolve no names, and programs look their own up (sudo waits 20 s for the answer otherwise), as an installed system's /etc/hosts answers"
	var names []string
	for _, e := range p.hosts {
		a.hosts += e.addr.String() + "\t" + e.name + "\n"
		names = append(names, e.name+" "+e.addr.String())
	}
	if len(names) > 0 {
		what += ", and " + strings.Join(names, ", ")
		why += "; the endpoint is given by name, and its address is what the name resolves to on this host"
	}
	a.add("hosts", what, why)
	switch target {
	case pipeline.Systemd:
		a.cloudInitOff("the systemd target carries no cloud-init seed.", "with a systemd tree it has nothing to do and would configure the network by DHCP")
		a.add("addresses", "node addresses and default routes configured in each machine's network namespace before it boots",
			"a systemd tree carries no network configuration: on bare metal the installed system has it (the cloud-init target carries the spec's)")
	case pipeline.Ignition:
		a.cloudInitOff("the Ignition target's machines are configured by Ignition.", "Flatcar and Fedora CoreOS have none, and it would configure the network by DHCP")
		a.add("stand-in", "each Flatcar or Fedora CoreOS node boots the Debian image, configured by its Ignition config as its family would be",
			"up has no Flatcar or Fedora CoreOS image; the config, its files, units, users and the binaries it fetches are the node's own")
		a.add("initramfs-network", "on a machine's first boot its PID 1 configures the node's addresses and default routes ("+layout.Abs(layout.UpNetwork)+") before Ignition and removes them after, as a network boot's initramfs does with DHCP's; the config's network file then configures the node (systemd-networkd on Flatcar)",
			"Ignition fetches the config over the network before the system, which reads the config's network file, starts")
		a.add("fcos-network", "Fedora CoreOS machines keep those addresses and routes, on every boot ("+layout.Abs(layout.UpNetworkKept)+")",
			"Fedora CoreOS's network file is a NetworkManager keyfile, which the Debian image standing in for it has nothing to read; the addresses are the keyfile's")
		a.add("first-boot", "on a machine's first boot (the family's flag, /boot/flatcar/first_boot or /boot/ignition.firstboot, which up writes and the boot removes), its PID 1 runs Ignition's stages against its root ("+layout.Abs(layout.UpIgnition)+" --platform=metal: fetch-offline, fetch, files) with the node's Matchbox profile's kernel command line ("+layout.Abs(layout.UpCmdline)+") bound over /proc/cmdline, then makes the boot systemd's first (/etc/machine-id \"uninitialized\"), which applies the presets Ignition wrote",
			"a network-booted Flatcar or Fedora CoreOS machine runs Ignition in its initramfs before systemd; up's machines have no initramfs, and systemd-nspawn shows them the host's kernel command line")
		a.add("wheel", "a wheel group made in Fedora CoreOS machines before Ignition adds users",
			"Fedora CoreOS has the group its sudo users join; the Debian image standing in for it has not, and Ignition's useradd refuses a group that does not exist")
		init.WriteString(ignitionInit)
	}
	if mirror != "" {
		const why = "the spec names no mirror up can serve its images at; set runtime.mirrors to compile one in"
		what := "registry mirrors written to each machine's " + layout.Abs(layout.ContainerdHostsDir) + " (" + mirror + ")"
		if len(c.Runtime.Mirrors) == 0 && c.Runtime.Engine == "containerd" && p.kubelets() > 0 {
			// The compiled configuration names the directory only
			// when the spec names mirrors.
			a.overrides.RegistryHosts = true
			a.containerdWhy(why)
			what += ", and config_path set in containerd's copy of its configuration (" + layout.ContainerdUpConfig + ", which a drop-in of containerd.service gives it)"
		}
		a.add("mirrors", what, why)
	}
	if p.endpoint.IsValid() {
		a.add("endpoint", "the API endpoint "+p.endpoint.String()+" served by up on the bridge, balancing TCP over the API servers",
			"no node holds the endpoint's address; on bare metal a load balancer or VIP does")
	}
	init.WriteString("exec " + layout.Abs(layout.SystemdInit) + " \"$@\"\n")
	a.init = init.String()
	return a, nil
}

// oldKubeProxies names the nodes whose kube-proxy is older than 1.37,
// with its version.
func oldKubeProxies(c *ir.Cluster) []string {
	var out []string
	for _, n := range c.Nodes {
		if !n.Runs(ir.ComponentKubeProxy) {
			continue
		}
		v := n.KubeProxyVersion
		if v == "" {
			v = c.Kubernetes.KubeProxy
		}
		if minor, err := strconv.Atoi(strings.Split(strings.TrimPrefix(v, "1."), ".")[0]); err == nil && strings.HasPrefix(v, "1.") && minor < 37 {
			out = append(out, n.Name+" "+v)
		}
	}
	return out
}

// containerScopePrefix names, as a drop-in prefix, the scopes runc
// makes for containerd's containers (cri-containerd-<id>.scope).
const containerScopePrefix = "cri-containerd-.scope"

// containerdWhy adds why containerd's configuration is changed.
func (a *adjustments) containerdWhy(why string) {
	if a.overrides.ContainerdWhy != "" {
		a.overrides.ContainerdWhy += "; "
	}
	a.overrides.ContainerdWhy += why
}

// machineFiles are the files up writes into a machine's upper layer:
// none has the path of a file of the node's compiled tree, which the
// lower layer below holds as compiled. Those that change what a compiled
// file says (drop-ins, a copy of containerd's configuration) are
// rendered by the systemd target from the cluster, for the tree built
// with zero systemd.Options that up boots.
func (a *adjustments) machineFiles(c *ir.Cluster, m *machine) (map[string][]byte, error) {
	files := maps.Clone(a.files)
	files[layout.Hosts] = []byte(a.hosts + m.node.Address().String() + "\t" + m.name + "\n")
	if !m.node.RunsPods() {
		return files, nil
	}
	changes, err := systemd.UpFiles(c, m.node, systemd.Options{}, a.overrides)
	if err != nil {
		return nil, err
	}
	maps.Copy(files, changes)
	for p, v := range a.sysctls {
		files[layout.UpSysctlDir+strings.ReplaceAll(p, "/", ".")] = []byte(v)
	}
	return files, nil
}

// resolvConf is the resolver configuration of the machines.
func resolvConf(c *ir.Cluster, p *plan) []byte {
	var b bytes.Buffer
	b.WriteString("# Written by kcompile up.\n")
	servers := c.Network.Nameservers
	if len(servers) == 0 && p.egress != nil {
		servers = p.egress.resolvers
	}
	if len(servers) == 0 {
		for _, g := range p.gateways {
			servers = append(servers, g.Addr())
		}
	}
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	return b.Bytes()
}
