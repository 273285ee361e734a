package compiler

import (
	"encoding/json"
	"fmt"
	"github.com/kcompile/kcompile/compiler/calendar"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"cuelang.org/go/cue"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
)

// lower builds the IR from a checked model. It may assume every check
// passed: addresses parse, CIDRs are canonical, references resolve.
func lower(m *model) *ir.Cluster {
	s := &m.spec
	c := &ir.Cluster{APIVersion: s.APIVersion, Name: s.Name}
	c.Kubernetes = ir.Kubernetes{
		Version:                 s.Kubernetes.Version,
		APIServer:               s.Kubernetes.Components.APIServer,
		ControllerManager:       s.Kubernetes.Components.ControllerManager,
		Scheduler:               s.Kubernetes.Components.Scheduler,
		Kubelet:                 s.Kubernetes.Components.Kubelet,
		KubeProxy:               s.Kubernetes.Components.KubeProxy,
		SchedulableControlPlane: s.ControlPlane.Schedulable,
		APIServerPort:           s.ControlPlane.APIServer.Port,
		ExtraSANs:               s.ControlPlane.APIServer.ExtraSANs,
	}
	settings := m.specSettings()
	// Derived values are kept as JSON, as the spec's own values are, so
	// that a consumer reads every value one way.
	derive := func(path string, v any, from string) {
		// Strings and numbers always marshal.
		value, _ := json.Marshal(v)
		settings = append(settings, ir.Setting{Path: path, Value: string(value),
			Origin: ir.Origin{Kind: ir.FromDerived, From: from, Pos: firstPos(m.at(firstPath(from)))}})
	}

	c.Network = lowerNetwork(m)
	n := &c.Network
	for i, ip := range n.FirstServiceIPs {
		from := []string{"network.serviceCIDR", "network.secondaryServiceCIDR"}[i]
		derive(fmt.Sprintf("network.firstServiceIPs[%d]", i), ip.String(), from+" (its first address: the kubernetes Service)")
	}
	if s.Network.DNSServiceIP == "" {
		derive("network.dnsServiceIP", n.DNSServiceIP.String(), "network.serviceCIDR (its tenth address)")
	}
	if s.Network.CNI.MTU == 0 {
		derive("network.cni.mtu", n.PodMTU, "network.mtu minus the overhead of network.cni.mode")
	}

	c.Endpoint = lowerEndpoint(m)
	derive("controlPlane.endpoint.url", c.Endpoint.URL(), endpointSource(m))
	derive("controlPlane.endpoint.served", c.Endpoint.Served(), endpointModeSource(m))

	members := m.etcdMembers()
	onNode := map[string]bool{}
	for _, e := range members {
		onNode[e.name] = true
	}
	for _, mn := range m.nodes {
		node := lowerNode(m, mn, onNode[mn.name] && mn.role == ir.RoleControlPlane)
		c.Nodes = append(c.Nodes, node)
		base := "nodes." + quoteLabel(node.Name)
		src := mn.path
		derive(base+".role", string(node.Role), src)
		derive(base+".address", node.Address().String(), mn.fieldPath("address"))
		derive(base+".components", joinComponents(node.Components), src)
		if node.Zone != "" {
			derive(base+".zone", node.Zone, mn.fieldPath("zone"))
		}
	}
	c.Etcd = lowerEtcd(m, c.Nodes, members)
	c.Rollouts = lowerRollouts(m, c.Nodes)
	derive("etcd.initialCluster", c.Etcd.InitialCluster(), "etcd.members and their node addresses")

	for _, name := range sortedKeys(s.Storage.Drivers) {
		d := s.Storage.Drivers[name]
		c.Storage.Drivers = append(c.Storage.Drivers, ir.CSIDriver{Name: name, TopologyAware: d.TopologyAware, AttachRequired: d.AttachRequired, PodInfoOnMount: d.PodInfoOnMount})
	}
	for _, name := range sortedKeys(s.Storage.Classes) {
		sc := s.Storage.Classes[name]
		c.Storage.Classes = append(c.Storage.Classes, ir.StorageClass{Name: name, Driver: sc.Driver, Default: sc.Default,
			ReclaimPolicy: sc.ReclaimPolicy, VolumeBindingMode: sc.VolumeBindingMode, AllowVolumeExpansion: sc.AllowVolumeExpansion,
			Parameters: labels(sc.Parameters)})
	}
	socket := "unix:///run/containerd/containerd.sock"
	if s.Runtime.Engine == "cri-o" {
		socket = "unix:///var/run/crio/crio.sock"
	}
	c.Runtime = ir.Runtime{Engine: s.Runtime.Engine, Version: s.Runtime.Version, CgroupDriver: s.Runtime.CgroupDriver, Socket: socket,
		RestrictOOMScoreAdj: s.Runtime.RestrictOOMScoreAdj}
	for _, host := range sortedKeys(s.Runtime.Mirrors) {
		c.Runtime.Mirrors = append(c.Runtime.Mirrors, ir.Mirror{Registry: host, Endpoints: m.mirrors[host]})
	}
	derive("runtime.socket", socket, "runtime.engine")
	c.Kubelet = ir.Kubelet{CgroupDriver: s.Kubelet.CgroupDriver, FailCgroupV1: s.Kubelet.FailCgroupV1,
		ShutdownGrace:         time.Duration(s.Kubelet.Shutdown.GracePeriodSeconds) * time.Second,
		ShutdownGraceCritical: time.Duration(s.Kubelet.Shutdown.CriticalPodsSeconds) * time.Second}
	c.PKI = ir.PKI{KeyAlgorithm: s.PKI.KeyAlgorithm, CAValidity: parseValidity(s.PKI.CAValidity), LeafValidity: parseValidity(s.PKI.LeafValidity),
		ClockSkew: parseSkew(s.PKI.ClockSkew)}
	c.Security = ir.Security{
		EncryptionAtRest:   s.Security.EncryptionAtRest.Enabled,
		EncryptionProvider: s.Security.EncryptionAtRest.Provider,
		Audit: ir.Audit{Enabled: s.Security.Audit.Enabled, MaxAgeDays: s.Security.Audit.MaxAgeDays,
			MaxBackups: s.Security.Audit.MaxBackups, MaxSizeMB: s.Security.Audit.MaxSizeMB},
		AdmissionPlugins: s.Security.Admission.Plugins,
		PodSecurity:      s.Security.Admission.PodSecurity,
		AnonymousAuth:    s.Security.AnonymousAuth,
	}
	c.Addons = ir.Addons{CoreDNS: ir.CoreDNS{Version: s.Addons.CoreDNS.Version, Replicas: s.Addons.CoreDNS.Replicas}}
	c.Install = ir.Install{Source: s.Install.Source}
	for _, name := range sortedKeys(s.Install.Artifacts) {
		a := s.Install.Artifacts[name]
		c.Install.Artifacts = append(c.Install.Artifacts, ir.Artifact{Name: name, URL: a.URL, SHA256: a.SHA256, Path: a.Path, Extract: labels(a.Extract)})
	}
	for i := range c.Nodes {
		c.Nodes[i].Binaries = nodeBinaries(s, c.Nodes[i])
	}
	c.MaxUserDataBytes = s.CloudInit.MaxUserDataBytes
	c.Boot = lowerBoot(s.Boot, c.Nodes)
	for _, name := range sortedKeys(s.Access.Users) {
		u := s.Access.Users[name]
		c.Users = append(c.Users, ir.User{Name: name, SSHAuthorizedKeys: u.SSHAuthorizedKeys, Sudo: u.Sudo})
	}

	sort.SliceStable(settings, func(i, j int) bool { return settings[i].Path < settings[j].Path })
	c.Settings = settings
	return c
}

func lowerNetwork(m *model) ir.Network {
	s := m.spec.Network
	n := ir.Network{
		NodeMaskIPv4: s.NodeCIDRMaskSize.IPv4, NodeMaskIPv6: s.NodeCIDRMaskSize.IPv6,
		Domain: s.Domain, MTU: s.MTU, NetworkPolicy: s.NetworkPolicy, KubeProxyMode: s.KubeProxy.Mode,
		CNI: ir.CNI{Plugin: s.CNI.Plugin, Version: s.CNI.Version, Mode: s.CNI.Mode, WireGuard: s.CNI.WireGuard,
			KubeProxyReplacement: s.CNI.KubeProxyReplacement, Images: s.CNI.Images},
	}
	for _, x := range s.Nodes {
		n.NodeNetworks = append(n.NodeNetworks, netip.MustParsePrefix(x))
	}
	for _, x := range s.Gateways {
		n.Gateways = append(n.Gateways, netip.MustParseAddr(x))
	}
	for _, x := range s.Nameservers {
		n.Nameservers = append(n.Nameservers, netip.MustParseAddr(x))
	}
	n.PodCIDRs = append(n.PodCIDRs, netip.MustParsePrefix(s.PodCIDR))
	n.ServiceCIDRs = append(n.ServiceCIDRs, netip.MustParsePrefix(s.ServiceCIDR))
	if s.SecondaryPodCIDR != "" {
		n.PodCIDRs = append(n.PodCIDRs, netip.MustParsePrefix(s.SecondaryPodCIDR))
		n.ServiceCIDRs = append(n.ServiceCIDRs, netip.MustParsePrefix(s.SecondaryServiceCIDR))
	}
	for _, p := range n.ServiceCIDRs {
		n.FirstServiceIPs = append(n.FirstServiceIPs, p.Addr().Next())
	}
	// The checks (KC0314) made sure every range holds its tenth address.
	if s.DNSServiceIP != "" {
		n.DNSServiceIP = netip.MustParseAddr(s.DNSServiceIP)
	} else {
		n.DNSServiceIP, _ = nthAddr(n.ServiceCIDRs[0], 10)
	}
	n.DNSServiceIPs = []netip.Addr{n.DNSServiceIP}
	if len(n.ServiceCIDRs) > 1 {
		a, _ := nthAddr(n.ServiceCIDRs[1], 10)
		n.DNSServiceIPs = append(n.DNSServiceIPs, a)
	}
	overhead, _ := encapOverhead(s.CNI.Plugin, s.CNI.Mode, s.CNI.WireGuard)
	n.PodMTU = s.MTU - overhead
	if s.CNI.MTU != 0 {
		n.PodMTU = s.CNI.MTU
	}
	return n
}

func lowerEndpoint(m *model) ir.Endpoint {
	cp := m.spec.ControlPlane
	var e ir.Endpoint
	switch {
	case cp.Endpoint != nil && cp.Endpoint.Host != "":
		e.Host, e.Port = cp.Endpoint.Host, cp.Endpoint.Port
	case cp.Endpoint != nil:
		e.Address, e.Port = netip.MustParseAddr(cp.Endpoint.Address), cp.Endpoint.Port
		e.Host = e.Address.String()
	default:
		node := cp.Nodes[sortedKeys(cp.Nodes)[0]]
		e.Address, e.Port = netip.MustParseAddr(node.Address), cp.APIServer.Port
		e.Host = e.Address.String()
		e.Mode = ir.EndpointNode
	}
	if ep := cp.Endpoint; ep != nil {
		e.Mode = ir.EndpointMode(ep.Mode)
		if e.Mode == "" {
			e.Mode = ir.EndpointExternal
		}
		e.RouterID, e.AdvertInterval, e.LocalPort = ep.VIP.RouterID, ep.VIP.AdvertInterval, ep.NodeLocal.Port
	}
	return e
}

func endpointModeSource(m *model) string {
	switch {
	case m.spec.ControlPlane.Endpoint == nil:
		return "controlPlane.nodes (one control-plane node and no endpoint)"
	case m.written("controlPlane.endpoint.mode"):
		return "controlPlane.endpoint.mode"
	}
	return "controlPlane.endpoint.mode (the schema's default, external)"
}

func endpointSource(m *model) string {
	if m.spec.ControlPlane.Endpoint == nil {
		return "controlPlane.nodes (the only control-plane node's address) and controlPlane.apiServer.port"
	}
	return "controlPlane.endpoint"
}

func lowerNode(m *model, mn *mnode, stacked bool) ir.Node {
	s := m.spec
	n := ir.Node{Name: mn.name, Role: mn.role, Addresses: mn.addrs, MAC: strings.ToLower(mn.spec.MAC),
		Zone: mn.spec.Zone, Rack: mn.spec.Rack, Pool: mn.pool, SpecPath: mn.path, MACPath: mn.fieldPath("mac"),
		Capacity:       ir.Capacity{CPU: mn.spec.Capacity.CPU, Memory: mn.spec.Capacity.Memory, MaxPods: mn.spec.Capacity.MaxPods},
		KubeletVersion: s.Kubernetes.Components.Kubelet,
	}
	if mn.spec.KubeletVersion != "" {
		n.KubeletVersion = mn.spec.KubeletVersion
	}
	k := s.Kubernetes.Components
	own := func(node, cluster string) string {
		if node != "" {
			return node
		}
		return cluster
	}
	n.OS, n.OSPath = ir.OS(s.OS), "os"
	if mn.spec.OS != "" {
		n.OS, n.OSPath = ir.OS(mn.spec.OS), mn.fieldPath("os")
	}
	if mn.role == ir.RoleEtcd {
		n.Components = []ir.Component{ir.ComponentEtcd}
		n.KubeletVersion = ""
		n.Capacity = ir.Capacity{}
		return n
	}
	if stacked {
		n.Components = append(n.Components, ir.ComponentEtcd)
	}
	if mn.role == ir.RoleControlPlane {
		n.Components = append(n.Components, ir.ComponentAPIServer, ir.ComponentControllerManager, ir.ComponentScheduler)
		n.APIServerVersion = own(mn.spec.APIServerVersion, k.APIServer)
		n.ControllerManagerVersion = own(mn.spec.ControllerManagerVersion, k.ControllerManager)
		n.SchedulerVersion = own(mn.spec.SchedulerVersion, k.Scheduler)
	}
	n.Components = append(n.Components, ir.ComponentRuntime, ir.ComponentKubelet)
	if s.Network.KubeProxy.Mode != "none" {
		n.Components = append(n.Components, ir.ComponentKubeProxy)
		n.KubeProxyVersion = own(mn.spec.KubeProxyVersion, k.KubeProxy)
	}
	lbl := map[string]string{}
	for k, v := range mn.spec.Labels {
		lbl[k] = v
	}
	if mn.role == ir.RoleControlPlane {
		lbl["node-role.kubernetes.io/control-plane"] = ""
		if !s.ControlPlane.Schedulable {
			n.Taints = append(n.Taints, ir.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: "NoSchedule"})
		}
	}
	if n.Zone != "" {
		lbl["topology.kubernetes.io/zone"] = n.Zone
	}
	n.Labels = labels(lbl)
	for _, t := range mn.spec.Taints {
		n.Taints = append(n.Taints, ir.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	return n
}

func lowerEtcd(m *model, nodes []ir.Node, members []etcdMember) ir.Etcd {
	s := m.spec.Etcd
	e := ir.Etcd{Topology: s.Topology, Version: s.Version, QuotaBackendBytes: s.QuotaBackendBytes, SnapshotCount: s.SnapshotCount}
	byName := map[string]ir.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	for _, mem := range members {
		n := byName[mem.name]
		e.Members = append(e.Members, ir.EtcdMember{Name: mem.name, Node: n.Name, Address: n.Address(), Zone: mem.zone, Rack: mem.rack,
			Joining: slices.Contains(s.Joining, mem.name)})
	}
	if b := s.Backup; b != nil {
		timeout, _ := time.ParseDuration(b.Timeout)
		e.Backup = &ir.EtcdBackup{Schedule: b.Schedule, Retention: b.Retention, Directory: b.Directory, Upload: slices.Clone(b.Upload), Timeout: timeout}
		// The check refused a schedule systemd would not read; the timer
		// carries its normalized form, as systemctl shows it, in UTC as
		// the schema says it is.
		if ev, err := calendar.Parse(b.Schedule); err == nil {
			e.Backup.Schedule = ev.InUTC().String()
		}
	}
	return e
}

// specSettings lists every effective leaf of the spec with its origin: the
// user's position when they wrote it, the schema's when it is a default.
func (m *model) specSettings() []ir.Setting {
	var out []ir.Setting
	var walk func(v cue.Value)
	walk = func(v cue.Value) {
		if v.IncompleteKind() == cue.StructKind {
			eachChild(v, walk)
			return
		}
		path := v.Path().String()
		o := ir.Origin{Kind: ir.FromDefault, Pos: toIRPos(v.Pos())}
		if ps, ok := m.l.written[path]; ok && len(ps) > 0 {
			o = ir.Origin{Kind: ir.FromSpec, Pos: toIRPos(ps[0])}
		}
		out = append(out, ir.Setting{Path: path, Value: formatValue(v), Origin: o})
	}
	walk(m.l.value)
	return out
}

func labels(m map[string]string) []ir.Label {
	out := make([]ir.Label, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, ir.Label{Key: k, Value: m[k]})
	}
	return out
}

func joinComponents(cs []ir.Component) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

// firstPath is the first path named in a derivation note.
func firstPath(from string) string {
	f := strings.Fields(from)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// nodeBinaries lists the programs a node's components need, with the
// version each must report where its version is the spec's.
func nodeBinaries(s *specCluster, n ir.Node) []ir.Binary {
	bin := func(name, version, flag string) ir.Binary {
		return ir.Binary{Path: n.OS.BinDir() + "/" + name, Version: version, VersionFlag: flag}
	}
	kube := func(v string) string { return "Kubernetes v" + v }
	var out []ir.Binary
	if n.Runs(ir.ComponentEtcd) {
		out = append(out, bin("etcd", "etcd Version: "+s.Etcd.Version, "--version"))
		// The snapshot tools of etcd.backup, of the member's release.
		if s.Etcd.Backup != nil {
			out = append(out, bin("etcdctl", "etcdctl version: "+s.Etcd.Version, "version"),
				bin("etcdutl", "etcdutl version: "+s.Etcd.Version, "version"))
		}
	}
	// The endpoint's proxies come from the distribution's packages.
	if ep := s.ControlPlane.Endpoint; ep != nil {
		e := ir.Endpoint{Mode: ir.EndpointMode(ep.Mode)}
		if e.ProxiedOn(n) {
			out = append(out, ir.Binary{Path: layout.Abs(layout.HAProxyProgram), OS: true})
		}
		if e.ProxiedOn(n) && e.Mode == ir.EndpointVIP {
			out = append(out, ir.Binary{Path: layout.Abs(layout.KeepalivedProgram), OS: true})
		}
	}
	if n.Runs(ir.ComponentAPIServer) {
		out = append(out, bin("kube-apiserver", kube(n.APIServerVersion), "--version"),
			bin("kube-controller-manager", kube(n.ControllerManagerVersion), "--version"),
			bin("kube-scheduler", kube(n.SchedulerVersion), "--version"))
	}
	if !n.RunsPods() {
		return out
	}
	out = append(out, bin("kubelet", kube(n.KubeletVersion), "--version"))
	if n.Runs(ir.ComponentKubeProxy) {
		out = append(out, bin("kube-proxy", kube(n.KubeProxyVersion), "--version"))
	}
	if s.Runtime.Engine == "cri-o" {
		out = append(out, bin("crio", s.Runtime.Version, "--version"), bin("conmon", "", ""), bin("runc", "", ""))
	} else {
		out = append(out, bin("containerd", "v"+s.Runtime.Version, "--version"), bin("containerd-shim-runc-v2", "", ""), bin("runc", "", ""))
	}
	// The CNI plugins the runtime and the network configuration call;
	// calico and cilium install their own plugin from their DaemonSets.
	plugins := []string{"loopback"}
	switch s.Network.CNI.Plugin {
	case "flannel":
		plugins = append(plugins, "bridge", "host-local", "portmap")
	case "calico":
		plugins = append(plugins, "portmap")
	}
	for _, p := range plugins {
		out = append(out, ir.Binary{Path: layout.Abs(layout.CNIBinDir) + "/" + p})
	}
	return out
}

// lowerBoot resolves each role's boot image: the role's own fields where
// given, the shared ones otherwise. Only roles the cluster has are listed.
func lowerBoot(b *specBoot, nodes []ir.Node) *ir.Boot {
	if b == nil {
		return nil
	}
	out := &ir.Boot{MatchboxURL: strings.TrimSuffix(b.MatchboxURL, "/")}
	for _, os := range []ir.OS{ir.OSDebian, ir.OSFlatcar, ir.OSFedoraCoreOS} {
		if b.OS[string(os)].Kernel != nil {
			out.OwnKernel = append(out.OwnKernel, os)
		}
	}
	for _, role := range []ir.Role{ir.RoleControlPlane, ir.RoleEtcd, ir.RoleWorker} {
		for _, os := range []ir.OS{ir.OSDebian, ir.OSFlatcar, ir.OSFedoraCoreOS} {
			if !slices.ContainsFunc(nodes, func(n ir.Node) bool { return n.Role == role && n.OS == os }) {
				continue
			}
			img := ir.BootImage{Role: role, OS: os, Kernel: b.Kernel, Initrd: b.Initrd, Args: b.Args}
			// The family's kernel wins over the role's: a role's
			// override is written for the cluster's own family.
			b.Roles[string(role)].apply(&img)
			b.OS[string(os)].apply(&img)
			out.Images = append(out.Images, img)
		}
	}
	return out
}

// irNodeForBinaries lowers a node far enough to know its components, so
// the check and the lowering agree on what it runs.
func irNodeForBinaries(m *model, n *mnode) ir.Node {
	stacked := false
	if n.role == ir.RoleControlPlane {
		for _, e := range m.etcdMembers() {
			stacked = stacked || e.name == n.name
		}
	}
	node := lowerNode(m, n, stacked)
	return node
}

// lowerRollouts gives each group of workers its rollout, in the order a
// change goes through them (ir.Cluster.Rollouts). The checks have
// refused a budget or timeout that does not parse.
func lowerRollouts(m *model, nodes []ir.Node) []ir.Rollout {
	w := m.spec.Workers
	size := map[string]int{}
	for _, n := range nodes {
		if n.Role == ir.RoleWorker {
			size[n.Pool]++
		}
	}
	var out []ir.Rollout
	add := func(pool string, r specRollout, path string) {
		if size[pool] == 0 {
			return
		}
		budget, _ := rolloutBudget(r.MaxUnavailable, size[pool])
		timeout, _ := time.ParseDuration(r.DrainTimeout)
		out = append(out, ir.Rollout{Pool: pool, MaxUnavailable: budget, Drain: r.Drain, DrainTimeout: timeout, Path: path})
	}
	add("", w.Rollout, "workers.rollout")
	done := map[string]bool{}
	for _, name := range append(slices.Clone(w.Order), sortedKeys(w.Pools)...) {
		if p, ok := w.Pools[name]; ok && !done[name] {
			done[name] = true
			add(name, p.Rollout, "workers.pools."+quoteLabel(name)+".rollout")
		}
	}
	return out
}

// rolloutBudget resolves maxUnavailable (a count, or a percentage rounded
// up as a DaemonSet's is) against a group of size nodes.
func rolloutBudget(v any, size int) (int, error) {
	switch x := v.(type) {
	case int:
		return x, nil
	case int64:
		return int(x), nil
	case float64:
		return int(x), nil
	case string:
		pct, err := strconv.Atoi(strings.TrimSuffix(x, "%"))
		if err != nil || !strings.HasSuffix(x, "%") || pct > 100 {
			return 0, fmt.Errorf("%s is not a percentage from 0%% to 100%%", diag.Quote(x))
		}
		return (pct*size + 99) / 100, nil
	}
	return 0, fmt.Errorf("%v is neither a count nor a percentage", v)
}
