package compiler

import (
	"fmt"
	"strings"
	"testing"
)

// header starts every spec of the check table.
const header = `package cluster

apiVersion: "kcompile.dev/v1alpha1"
kubernetes: version: "1.37.2"
`

// checkCase is one semantic rule exercised twice: pass is a spec body
// that must not raise code, fail one that must raise it at path, with
// its primary position at pos ("line:column" in spec.cue, counting the
// header's 4 lines). Bodies set the cluster name themselves. pass is a
// small variation of fail, usually the fix its hint suggests, so that the
// pair shows where the rule's boundary lies.
type checkCase struct {
	code       string
	pass, fail string
	path, pos  string
	// ownVersion replaces the header's Kubernetes version by a comment
	// line, for bodies that set kubernetes.version themselves.
	ownVersion bool
	// profile is the Source.Profile both specs are checked with.
	profile string
}

// ownVersionHeader is header without its Kubernetes version, still 4
// lines long.
var ownVersionHeader = strings.Replace(header, `kubernetes: version: "1.37.2"`, `// kubernetes.version is set by the body`, 1)

// ha is a clean three-node control plane that many cases extend; it is
// lines 5-12 of spec.cue.
const ha = `
name: "t"
controlPlane: endpoint: address: "10.0.0.10"
controlPlane: nodes: {
	cp1: {address: "10.0.0.11", zone: "a"}
	cp2: {address: "10.0.0.12", zone: "b"}
	cp3: {address: "10.0.0.13", zone: "c"}
}
`

// haNet is ha with its node network on line 13; what follows starts on
// line 14.
const haNet = ha + `network: nodes: ["10.0.0.0/16"]
`

// fcosWorker is a Fedora CoreOS worker, one line.
const fcosWorker = `workers: nodes: w1: {address: "10.0.1.1", os: "fedora-coreos"}`

// one is a single control-plane node and its network, lines 6-8; what
// follows starts on line 9.
const one = `
name: "t"
controlPlane: nodes: cp1: address: "10.0.0.11"
network: nodes: ["10.0.0.0/16"]
`

// dual is a single dual-stack node, lines 6-8; what follows starts on
// line 9.
const dual = `
name: "t"
controlPlane: nodes: cp1: {address: "10.0.0.11", secondaryAddress: "fd00::11"}
network: nodes: ["10.0.0.0/16", "fd00::/64"]
`

// v6 is a single IPv6 node, lines 6-8; what follows starts on line 9.
const v6 = `
name: "t"
controlPlane: nodes: cp1: address: "fd00::11"
network: nodes: ["fd00::/64"]
`

// externalEtcd declares n external etcd members e1…en at 10.0.0.21 on.
func externalEtcd(n int) string {
	var ms []string
	for i := 1; i <= n; i++ {
		ms = append(ms, fmt.Sprintf("e%d: address: \"10.0.0.%d\"", i, 20+i))
	}
	return `etcd: {topology: "external", members: {` + strings.Join(ms, ", ") + "}}\n"
}

// rbd declares one CSI driver for the storage cases.
const rbd = `storage: drivers: "rbd.csi.ceph.com": {}
`

func checkCases() []checkCase {
	return append(append(append(append(append(installCases(), gatewayCases()...), designCases()...), valueCases()...), clockSkewCases()...), []checkCase{
		// names
		{code: CodeClusterName,
			pass: haNet,
			fail: strings.Replace(haNet, `name: "t"`, `name: "UPPER"`, 1),
			path: "name", pos: "6:7"},
		{code: CodeNodeName, // reported at the node's key: a node has no name field
			pass: haNet + `workers: nodes: w1: address: "10.0.1.1"`,
			fail: haNet + `workers: nodes: W1: address: "10.0.1.1"`,
			path: "workers.nodes.W1", pos: "14:17"},
		{code: CodeDupName, // the pool's nodes cp1 and cp2 clash with the control plane's
			pass: haNet + `workers: pools: w: {count: 2, namePattern: "w%d", firstAddress: "10.0.1.1"}`,
			fail: haNet + `workers: pools: w: {count: 2, namePattern: "cp%d", firstAddress: "10.0.1.1"}`,
			path: "workers.pools.w.namePattern", pos: "14:44"},
		{code: CodeDupAddress,
			pass: haNet + `workers: nodes: w1: address: "10.0.0.14"`,
			fail: haNet + `workers: nodes: w1: address: "10.0.0.11"`,
			path: "workers.nodes.w1.address", pos: "14:30"},
		{code: CodeDupMAC,
			pass: haNet + `workers: nodes: {
	w1: {address: "10.0.1.1", mac: "02:00:00:00:00:01"}
	w2: {address: "10.0.1.2", mac: "02:00:00:00:00:02"}
}`,
			fail: haNet + `workers: nodes: {
	w1: {address: "10.0.1.1", mac: "02:00:00:00:00:01"}
	w2: {address: "10.0.1.2", mac: "02:00:00:00:00:01"}
}`,
			path: "workers.nodes.w2.mac", pos: "16:33"},
		{code: CodePoolPattern,
			pass: haNet + `workers: pools: w: {count: 2, namePattern: "w%02d", firstAddress: "10.0.1.1"}`,
			fail: haNet + `workers: pools: w: {count: 2, namePattern: "w", firstAddress: "10.0.1.1"}`,
			path: "workers.pools.w.namePattern", pos: "14:44"},
		{code: CodePoolMACs,
			pass: haNet + `workers: pools: w: {count: 2, firstAddress: "10.0.1.1", macs: ["02:00:00:00:00:01", "02:00:00:00:00:02"]}`,
			fail: haNet + `workers: pools: w: {count: 2, firstAddress: "10.0.1.1", macs: ["02:00:00:00:00:01"]}`,
			path: "workers.pools.w.macs", pos: "14:63"},
		{code: CodeLabelInvalid,
			pass: haNet + `workers: nodes: w1: {address: "10.0.1.1", labels: tier: "db"}`,
			fail: haNet + `workers: nodes: w1: {address: "10.0.1.1", labels: "tier!": "db"}`,
			path: `workers.nodes.w1.labels."tier!"`, pos: "14:51"},
		{code: CodeLabelInvalid, // reported at the taint
			pass: haNet + `workers: nodes: w1: {address: "10.0.1.1", taints: [{key: "dedicated", effect: "NoSchedule"}]}`,
			fail: haNet + `workers: nodes: w1: {address: "10.0.1.1", taints: [{key: "dedicated!", effect: "NoSchedule"}]}`,
			path: "workers.nodes.w1.taints[0].key", pos: "14:58"},

		// addresses
		{code: CodeAddressParse,
			pass: haNet + `workers: nodes: w1: address: "10.0.1.1"`,
			fail: haNet + `workers: nodes: w1: address: "10.0.1.1/16"`,
			path: "workers.nodes.w1.address", pos: "14:30"},
		{code: CodeAddressNetwork,
			pass: haNet + `workers: nodes: w1: address: "10.0.255.254"`,
			fail: haNet + `workers: nodes: w1: address: "10.1.0.1"`,
			path: "workers.nodes.w1.address", pos: "14:30"},
		{code: CodeAddressFamily,
			pass: dual + `workers: nodes: w1: {address: "10.0.1.1", secondaryAddress: "fd00::1:1"}`,
			fail: dual + `workers: nodes: w1: {address: "10.0.1.1", secondaryAddress: "10.0.1.2"}`,
			path: "workers.nodes.w1.secondaryAddress", pos: "9:61"},
		{code: CodeAddressReserved,
			pass: haNet + `workers: nodes: w1: address: "10.0.255.254"`,
			fail: haNet + `workers: nodes: w1: address: "10.0.255.255"`,
			path: "workers.nodes.w1.address", pos: "14:30"},
		{code: CodeAddressDualStack,
			pass: dual + `network: {secondaryPodCIDR: "fd01::/48", secondaryServiceCIDR: "fd02::/112"}`,
			fail: strings.Replace(dual, `, secondaryAddress: "fd00::11"`, "", 1) +
				`network: {secondaryPodCIDR: "fd01::/48", secondaryServiceCIDR: "fd02::/112"}`,
			path: "controlPlane.nodes.cp1.address", pos: "7:37"},
		{code: CodeAddressUnassigned,
			pass: haNet + `workers: nodes: w1: address: "10.0.1.1"`,
			fail: haNet + `workers: nodes: w1: address: "169.254.1.1"`,
			path: "workers.nodes.w1.address", pos: "14:30"},

		// networks
		{code: CodeCIDRParse,
			pass: haNet + `network: podCIDR: "10.244.0.0/16"`,
			fail: haNet + `network: podCIDR: "10.244.0.1/16"`,
			path: "network.podCIDR", pos: "14:19"},
		{code: CodeCIDROverlap,
			pass: ha + `network: {nodes: ["10.0.0.0/16"], podCIDR: "10.1.0.0/16"}`,
			fail: ha + `network: {nodes: ["10.0.0.0/16"], podCIDR: "10.0.128.0/17"}`,
			path: "network.podCIDR", pos: "13:44"},
		{code: CodeFamilyMismatch,
			pass: haNet + `network: serviceCIDR: "10.96.0.0/12"`,
			fail: haNet + `network: serviceCIDR: "fd02::/112"`,
			path: "network.serviceCIDR", pos: "14:23"},
		{code: CodeDualStackPair,
			pass: dual + `network: {secondaryPodCIDR: "fd01::/48", secondaryServiceCIDR: "fd02::/112"}`,
			fail: dual + `network: {secondaryPodCIDR: "fd01::/48"}`,
			path: "network.secondaryPodCIDR", pos: "9:29"},
		{code: CodeDualStackPair, // a secondary range of the primary's family
			pass: dual + `network: {secondaryPodCIDR: "fd01::/48", secondaryServiceCIDR: "fd02::/112"}`,
			fail: dual + `network: {secondaryPodCIDR: "10.245.0.0/16", secondaryServiceCIDR: "fd02::/112"}`,
			path: "network.secondaryPodCIDR", pos: "9:29"},
		{code: CodePodCIDRFull, // 3 nodes in 4 node ranges, then in 2
			pass: haNet + `network: podCIDR: "10.244.0.0/22"`,
			fail: haNet + `network: podCIDR: "10.244.0.0/23"`,
			path: "network.podCIDR", pos: "14:19"},
		{code: CodePodCIDRHeadroom, // 32 node ranges: 25 nodes leave 21 %, 26 leave 18 %
			pass: haNet + `network: podCIDR: "10.244.0.0/19"
workers: pools: w: {count: 22, firstAddress: "10.0.1.1"}`,
			fail: haNet + `network: podCIDR: "10.244.0.0/19"
workers: pools: w: {count: 23, firstAddress: "10.0.1.1"}`,
			path: "network.podCIDR", pos: "14:19"},
		{code: CodeServiceCIDRSize,
			pass: haNet + `network: serviceCIDR: "10.96.0.0/12"`,
			fail: haNet + `network: serviceCIDR: "10.96.0.0/11"`,
			path: "network.serviceCIDR", pos: "14:23"},
		{code: CodeDNSIPOutside,
			pass: haNet + `network: dnsServiceIP: "10.96.0.10"`,
			fail: haNet + `network: dnsServiceIP: "10.112.0.10"`,
			path: "network.dnsServiceIP", pos: "14:24"},
		{code: CodeDNSIPOutside, // the broadcast address of an IPv4 service CIDR is never allocated
			pass: haNet + `network: dnsServiceIP: "10.111.255.254"`,
			fail: haNet + `network: dnsServiceIP: "10.111.255.255"`,
			path: "network.dnsServiceIP", pos: "14:24"},
		{code: CodeDNSIPFirst,
			pass: haNet + `network: dnsServiceIP: "10.96.0.10"`,
			fail: haNet + `network: dnsServiceIP: "10.96.0.1"`,
			path: "network.dnsServiceIP", pos: "14:24"},
		{code: CodeNodeMask, // the default pod CIDR is a /16
			pass: haNet + `network: nodeCIDRMaskSize: ipv4: 18`,
			fail: haNet + `network: nodeCIDRMaskSize: ipv4: 16`,
			path: "network.nodeCIDRMaskSize.ipv4", pos: "14:34"},
		{code: CodeMaxPodsRange, // a /24 node range has 254 usable addresses
			pass: haNet + `workers: nodes: w1: {address: "10.0.1.1", capacity: maxPods: 254}`,
			fail: haNet + `workers: nodes: w1: {address: "10.0.1.1", capacity: maxPods: 255}`,
			path: "workers.nodes.w1.capacity.maxPods", pos: "14:62"},
		{code: CodeDomain,
			pass: haNet + `network: domain: "cluster.local"`,
			fail: haNet + `network: domain: "cluster_local"`,
			path: "network.domain", pos: "14:18"},
		{code: CodeNodeNetworkFamily, // IPv6 nodes, default IPv4 pod and service CIDRs
			pass: v6 + `network: {podCIDR: "fd01::/48", serviceCIDR: "fd02::/112"}`,
			fail: v6,
			path: "network.nodes", pos: "8:17"},

		// etcd
		{code: CodeEtcdEven, // 3 stacked members, then 4
			pass: haNet,
			fail: haNet + `controlPlane: nodes: cp4: {address: "10.0.0.14", zone: "d"}`,
			path: "controlPlane.nodes", pos: "8:22"},
		{code: CodeEtcdSingle, // 3 stacked members, then 1
			pass: haNet,
			fail: one,
			path: "controlPlane.nodes", pos: "7:22"},
		{code: CodeEtcdStackedNode,
			pass: haNet + `etcd: members: {cp1: {}, cp2: {}, cp3: {}}`,
			fail: haNet + `etcd: members: {cp1: {}, cp2: {}, cp4: {}}`,
			path: "etcd.members.cp4", pos: "14:40"},
		{code: CodeEtcdNoAddress,
			pass: haNet + `etcd: {topology: "external", members: {e1: address: "10.0.0.21", e2: address: "10.0.0.22", e3: address: "10.0.0.23"}}`,
			fail: haNet + `etcd: {topology: "external", members: {e1: address: "10.0.0.21", e2: address: "10.0.0.22", e3: {}}}`,
			path: "etcd.members.e3", pos: "14:96"},
		{code: CodeEtcdZone, // zones a, b, c, then a, b, a
			pass: haNet,
			fail: strings.Replace(haNet, `zone: "c"`, `zone: "a"`, 1),
			path: "controlPlane.nodes.cp1.zone", pos: "9:36"},
		{code: CodeEtcdZone, // listed stacked members take their zones from their nodes
			pass: haNet + `etcd: members: {cp1: {}, cp2: {}, cp3: {}}`,
			fail: strings.Replace(haNet, `zone: "c"`, `zone: "a"`, 1) + `etcd: members: {cp1: {}, cp2: {}, cp3: {}}`,
			path: "controlPlane.nodes.cp1.zone", pos: "9:36"},
		{code: CodeEtcdRack,
			pass: haNet + `controlPlane: nodes: {cp1: rack: "r1", cp2: rack: "r2", cp3: rack: "r3"}`,
			fail: haNet + `controlPlane: nodes: {cp1: rack: "r1", cp2: rack: "r1", cp3: rack: "r3"}`,
			path: "controlPlane.nodes.cp1.rack", pos: "14:34"},
		{code: CodeEtcdNoMembers,
			pass: haNet + externalEtcd(3),
			fail: haNet + `etcd: topology: "external"`,
			path: "etcd.topology", pos: "14:17"},
		{code: CodeEtcdTooMany, // 7 members, then 9
			pass: haNet + externalEtcd(7),
			fail: haNet + externalEtcd(9),
			path: "etcd.members", pos: "14:39"},
		{code: CodeEtcdStackedAddr, // reported at the first value that belongs on the node
			pass: haNet + `etcd: members: {cp1: {}, cp2: {}, cp3: {}}`,
			fail: haNet + `etcd: members: {cp1: {zone: "a"}, cp2: {}, cp3: {}}`,
			path: "etcd.members.cp1.zone", pos: "14:29"},
		{code: CodeEtcdJoining, // a name that is no member, then every member
			pass: haNet + `etcd: joining: ["cp3"]`,
			fail: haNet + `etcd: joining: ["cp3", "cp9"]`,
			path: "etcd.joining[1]", pos: "14:24"},
		{code: CodeEtcdJoining,
			pass: haNet + `etcd: joining: ["cp2", "cp3"]`,
			fail: haNet + `etcd: joining: ["cp1", "cp2", "cp3"]`,
			path: "etcd.joining", pos: "14:16"},
		{code: CodeBackupSchedule, // a time zone that depends on the node's database
			pass: haNet + `etcd: backup: schedule: "daily UTC"`,
			fail: haNet + `etcd: backup: schedule: "daily Europe/Paris"`,
			path: "etcd.backup.schedule", pos: "14:25"},
		{code: CodeBackupSchedule, // systemd reads it, and it never elapses
			pass: haNet + `etcd: backup: {schedule: "*-02-28", retention: 2}`,
			fail: haNet + `etcd: backup: {schedule: "*-02-30", retention: 2}`,
			path: "etcd.backup.schedule", pos: "14:26"},
		{code: CodeBackupDirectory, // etcd's own data
			pass: haNet + `etcd: backup: directory: "/var/lib/etcd-backup"`,
			fail: haNet + `etcd: backup: directory: "/var/lib/etcd/backup"`,
			path: "etcd.backup.directory", pos: "14:26"},
		{code: CodeBackupDirectory, // a directory of others' files
			pass: haNet + `etcd: backup: directory: "/srv/etcd"`,
			fail: haNet + `etcd: backup: directory: "/srv"`,
			path: "etcd.backup.directory", pos: "14:26"},
		{code: CodeBackupDirectory,
			pass: haNet + `etcd: backup: directory: "/backup/etcd"`,
			fail: haNet + `etcd: backup: directory: "/backup/../etc"`,
			path: "etcd.backup.directory", pos: "14:26"},
		{code: CodeBackupUpload, // a program found on no PATH
			pass: haNet + `etcd: backup: upload: ["/usr/bin/rclone", "copy", "--", "remote:etcd"]`,
			fail: haNet + `etcd: backup: upload: ["rclone", "copy", "--", "remote:etcd"]`,
			path: "etcd.backup.upload[0]", pos: "14:24"},
		{code: CodeBackupUpload,
			pass: haNet + `etcd: backup: upload: ["/usr/bin/rclone", "copy", "remote:etcd"]`,
			fail: haNet + `etcd: backup: upload: ["/usr/bin/rclone", "copy", "remote:etcd\n"]`,
			path: "etcd.backup.upload[2]", pos: "14:51"},
		{code: CodeBackupReach, // 5 hourly snapshots reach 4 hours
			pass: haNet + `etcd: backup: {schedule: "hourly", retention: 25}`,
			fail: haNet + `etcd: backup: {schedule: "hourly", retention: 5}`,
			path: "etcd.backup.retention", pos: "14:47"},
		{code: CodeBackupNone,
			pass: haNet + `labels: environment: "production"
etcd: backup: {}`,
			fail: haNet + `labels: environment: "production"`,
			path: "labels.environment", pos: "14:22"},
		{code: CodeBackupTimeout, // the schema's pattern takes 0s
			pass: haNet + `etcd: backup: timeout: "2h30m"`,
			fail: haNet + `etcd: backup: timeout: "0s"`,
			path: "etcd.backup.timeout", pos: "14:24"},

		// control plane
		{code: CodeNoControlPlane, // nothing is written under controlPlane: reported at the package clause
			pass: one + `workers: nodes: w1: address: "10.0.1.1"`,
			fail: strings.Replace(one, `controlPlane: nodes: cp1: address: "10.0.0.11"`, `workers: nodes: w1: address: "10.0.1.1"`, 1),
			path: "controlPlane.nodes", pos: "1:1"},
		{code: CodeEndpointRequired,
			pass: haNet,
			fail: strings.Replace(haNet, `controlPlane: endpoint: address: "10.0.0.10"`, `// no endpoint`, 1),
			path: "controlPlane.nodes", pos: "8:22"},
		{code: CodeEndpointIsNode,
			pass: haNet,
			fail: strings.Replace(haNet, `"10.0.0.10"`, `"10.0.0.11"`, 1),
			path: "controlPlane.endpoint.address", pos: "7:34"},
		{code: CodeEndpointShape, // both, reported at the first of the endpoint's two values
			pass: haNet,
			fail: haNet + `controlPlane: endpoint: host: "api.example.com"`,
			path: "controlPlane.endpoint", pos: "7:25"},
		{code: CodeEndpointShape, // neither address nor host
			pass: haNet + `controlPlane: endpoint: port: 443`,
			fail: strings.Replace(haNet, `address: "10.0.0.10"`, `port: 443`, 1),
			path: "controlPlane.endpoint", pos: "7:25"},
		{code: CodeEndpointInvalid, // a port does not belong in the address
			pass: haNet,
			fail: strings.Replace(haNet, `"10.0.0.10"`, `"10.0.0.10:6443"`, 1),
			path: "controlPlane.endpoint.address", pos: "7:34"},
		{code: CodeEndpointInvalid,
			pass: strings.Replace(haNet, `address: "10.0.0.10"`, `host: "api.example.com"`, 1),
			fail: strings.Replace(haNet, `address: "10.0.0.10"`, `host: "api_example.com"`, 1),
			path: "controlPlane.endpoint.host", pos: "7:31"},
		{code: CodeExtraSAN,
			pass: haNet + `controlPlane: apiServer: extraSANs: ["lb.example.com"]`,
			fail: haNet + `controlPlane: apiServer: extraSANs: ["https://lb.example.com"]`,
			path: "controlPlane.apiServer.extraSANs[0]", pos: "14:38"},

		// versions
		{code: CodeK8sUnsupported, ownVersion: true,
			pass: haNet + `kubernetes: version: "1.37.2"`,
			fail: haNet + `kubernetes: version: "1.38.0"`,
			path: "kubernetes.version", pos: "14:22"},
		{code: CodeKubeletNewer, // a newer patch of the API server's minor is within the skew policy
			pass: haNet + `workers: nodes: w1: {address: "10.0.1.1", kubeletVersion: "1.37.3"}`,
			fail: haNet + `workers: nodes: w1: {address: "10.0.1.1", kubeletVersion: "1.38.0"}`,
			path: "workers.nodes.w1.kubeletVersion", pos: "14:59"},
		{code: CodeKubeletOld, // 3 minors older than the API server, then 4
			pass: haNet + `kubernetes: components: kubelet: "1.34.0"`,
			fail: haNet + `kubernetes: components: kubelet: "1.33.9"`,
			path: "kubernetes.components.kubelet", pos: "14:34"},
		{code: CodeKubeProxyNewer,
			pass: haNet + `kubernetes: components: kubeProxy: "1.37.3"`,
			fail: haNet + `kubernetes: components: kubeProxy: "1.38.0"`,
			path: "kubernetes.components.kubeProxy", pos: "14:36"},
		{code: CodeKubeProxyOld,
			pass: haNet + `kubernetes: components: kubeProxy: "1.34.0"`,
			fail: haNet + `kubernetes: components: kubeProxy: "1.33.9"`,
			path: "kubernetes.components.kubeProxy", pos: "14:36"},
		{code: CodeControlPlaneMix, // another patch release is fine, another minor is not
			pass: haNet + `kubernetes: components: controllerManager: "1.37.0"`,
			fail: haNet + `kubernetes: components: controllerManager: "1.36.5"`,
			path: "kubernetes.components.controllerManager", pos: "14:44"},
		{code: CodeControlPlaneMix, // the API server off kubernetes.version's minor
			pass: haNet + `kubernetes: components: apiServer: "1.37.0"`,
			fail: haNet + `kubernetes: components: apiServer: "1.36.9"`,
			path: "kubernetes.components.apiServer", pos: "14:36"},
		{code: CodeAPIServerSkew, // a rolling upgrade's state: one minor apart, then two
			pass: haNet + `controlPlane: nodes: cp2: apiServerVersion: "1.36.4"`,
			fail: haNet + `controlPlane: nodes: cp2: apiServerVersion: "1.35.0"`,
			path: "controlPlane.nodes.cp2.apiServerVersion", pos: "14:45"},
		{code: CodeKubeletNewer, // kubernetes.version's kubelets are newer than cp2's own API server
			pass: haNet + `controlPlane: nodes: cp2: apiServerVersion: "1.37.0"`,
			fail: haNet + `controlPlane: nodes: cp2: apiServerVersion: "1.36.4"`,
			path: "kubernetes.version", pos: "4:22"},
		{code: CodeKubeProxyNewer, // a pool node's own kube-proxy
			pass: haNet + `workers: pools: p: {count: 2, firstAddress: "10.0.1.1", nodes: "p-2": kubeProxyVersion: "1.36.0"}`,
			fail: haNet + `workers: pools: p: {count: 2, firstAddress: "10.0.1.1", nodes: "p-2": kubeProxyVersion: "1.38.0"}`,
			path: `workers.pools.p.nodes."p-2".kubeProxyVersion`, pos: "14:89"},
		{code: CodeControlPlaneMix, // a controller-manager older than the newest API server by two minors
			pass: haNet + `controlPlane: nodes: cp1: controllerManagerVersion: "1.36.0"`,
			fail: haNet + `controlPlane: nodes: cp1: controllerManagerVersion: "1.35.0"`,
			path: "controlPlane.nodes.cp1.controllerManagerVersion", pos: "14:53"},
		{code: CodeK8sUnsupported, // a node's own version outside what kcompile compiles for
			pass: haNet + `controlPlane: nodes: cp1: apiServerVersion: "1.36.0"`,
			fail: haNet + `controlPlane: nodes: cp1: apiServerVersion: "1.38.0"`,
			path: "controlPlane.nodes.cp1.apiServerVersion", pos: "14:45"},

		// rollout
		{code: CodeRolloutOrder,
			pass: haNet + `workers: {pools: p: {count: 1, firstAddress: "10.0.1.1"}, order: ["p"]}`,
			fail: haNet + `workers: {pools: p: {count: 1, firstAddress: "10.0.1.1"}, order: ["q"]}`,
			path: "workers.order[0]", pos: "14:67"},
		{code: CodeRolloutBudget,
			pass: haNet + `workers: rollout: maxUnavailable: "100%"`,
			fail: haNet + `workers: rollout: maxUnavailable: "101%"`,
			path: "workers.rollout.maxUnavailable", pos: "14:35"},
		{code: CodeRolloutTimeout,
			pass: haNet + `workers: rollout: drainTimeout: "1h30m"`,
			fail: haNet + `workers: rollout: drainTimeout: ""`,
			path: "workers.rollout.drainTimeout", pos: "14:33"},
		{code: CodePoolNodeOverride,
			pass: haNet + `workers: pools: p: {count: 2, firstAddress: "10.0.1.1", nodes: "p-2": kubeletVersion: "1.37.0"}`,
			fail: haNet + `workers: pools: p: {count: 2, firstAddress: "10.0.1.1", nodes: "p-3": kubeletVersion: "1.37.0"}`,
			path: `workers.pools.p.nodes."p-3"`, pos: "14:71"},
		{code: CodeEtcdVersion, // Kubernetes 1.37 needs etcd 3.6 or 3.7
			pass: haNet + `etcd: version: "3.6.0"`,
			fail: haNet + `etcd: version: "3.5.21"`,
			path: "etcd.version", pos: "14:16"},

		// runtime
		{code: CodeDockerEngine,
			pass: haNet + `runtime: engine: "containerd"`,
			fail: haNet + `runtime: engine: "docker"`,
			path: "runtime.engine", pos: "14:18"},
		{code: CodeCgroupDriver, // the runtime defaults to systemd
			pass: haNet + `kubelet: cgroupDriver: "systemd"`,
			fail: haNet + `kubelet: cgroupDriver: "cgroupfs"`,
			path: "kubelet.cgroupDriver", pos: "14:24"},
		{code: CodeOOMScoreAdj, // CRI-O has no restrict_oom_score_adj
			pass: haNet + `runtime: restrictOOMScoreAdj: true`,
			fail: haNet + `runtime: {engine: "cri-o", restrictOOMScoreAdj: true}`,
			path: "runtime.restrictOOMScoreAdj", pos: "14:49"},

		// CNI and kube-proxy
		{code: CodeFlannelPolicy, // flannel is the default plugin
			pass: haNet + `network: {networkPolicy: true, cni: plugin: "calico"}`,
			fail: haNet + `network: {networkPolicy: true}`,
			path: "network.networkPolicy", pos: "14:26"},
		{code: CodeKPRNeedsNone,
			pass: haNet + `network: {cni: {plugin: "cilium", kubeProxyReplacement: true}, kubeProxy: mode: "none"}`,
			fail: haNet + `network: {cni: {plugin: "cilium", kubeProxyReplacement: true}}`,
			path: "network.cni.kubeProxyReplacement", pos: "14:57"},
		{code: CodeNoneNeedsKPR,
			pass: haNet + `network: {cni: {plugin: "cilium", kubeProxyReplacement: true}, kubeProxy: mode: "none"}`,
			fail: haNet + `network: {cni: {plugin: "cilium"}, kubeProxy: mode: "none"}`,
			path: "network.kubeProxy.mode", pos: "14:53"},
		{code: CodePodMTU, // 1500 minus 50 bytes of VXLAN
			pass: haNet + `network: cni: mtu: 1450`,
			fail: haNet + `network: cni: mtu: 1451`,
			path: "network.cni.mtu", pos: "14:20"},
		{code: CodeKPRNotCilium,
			pass: haNet + `network: cni: {plugin: "calico", kubeProxyReplacement: false}`,
			fail: haNet + `network: cni: {plugin: "calico", kubeProxyReplacement: true}`,
			path: "network.cni.kubeProxyReplacement", pos: "14:56"},
		{code: CodeFlannelWireGuard,
			pass: haNet + `network: cni: mode: "wireguard"`,
			fail: haNet + `network: cni: wireguard: true`,
			path: "network.cni.wireguard", pos: "14:26"},
		{code: CodeL2Mode,
			pass: ha + `network: {nodes: ["10.0.0.0/16", "10.1.0.0/16"], cni: mode: "vxlan"}
workers: nodes: w1: address: "10.1.0.1"`,
			fail: ha + `network: {nodes: ["10.0.0.0/16", "10.1.0.0/16"], cni: mode: "host-gw"}
workers: nodes: w1: address: "10.1.0.1"`,
			path: "network.cni.mode", pos: "13:61"},
		{code: CodeL2Mode, // one network per family is one segment; a second IPv4 one is not
			pass: dual + `network: cni: {plugin: "cilium", mode: "native"}`,
			fail: strings.Replace(dual, `"fd00::/64"`, `"fd00::/64", "10.1.0.0/16"`, 1) + `network: cni: {plugin: "cilium", mode: "native"}
workers: nodes: w1: address: "10.1.0.1"`,
			path: "network.cni.mode", pos: "9:40"},

		// storage
		{code: CodeNoDefaultClass,
			pass: haNet + rbd + `storage: classes: fast: {driver: "rbd.csi.ceph.com", default: true}`,
			fail: haNet + rbd + `storage: classes: fast: {driver: "rbd.csi.ceph.com"}`,
			path: "storage.classes", pos: "15:19"},
		{code: CodeManyDefaults,
			pass: haNet + rbd + `storage: classes: {
	fast: {driver: "rbd.csi.ceph.com", default: true}
	slow: {driver: "rbd.csi.ceph.com", default: false}
}`,
			fail: haNet + rbd + `storage: classes: {
	fast: {driver: "rbd.csi.ceph.com", default: true}
	slow: {driver: "rbd.csi.ceph.com", default: true}
}`,
			path: "storage.classes.fast.default", pos: "16:46"},
		{code: CodeUnknownDriver,
			pass: haNet + rbd + `storage: classes: fast: {driver: "rbd.csi.ceph.com", default: true}`,
			fail: haNet + rbd + `storage: classes: fast: {driver: "rbd.csi.ceph.io", default: true}`,
			path: "storage.classes.fast.driver", pos: "15:34"},
		{code: CodeTopologyBinding, // volumeBindingMode defaults to Immediate: reported at the class
			pass: haNet + `storage: {
	drivers: "ebs.csi.aws.com": topologyAware: true
	classes: gp3: {driver: "ebs.csi.aws.com", default: true, volumeBindingMode: "WaitForFirstConsumer"}
}`,
			fail: haNet + `storage: {
	drivers: "ebs.csi.aws.com": topologyAware: true
	classes: gp3: {driver: "ebs.csi.aws.com", default: true}
}`,
			path: "storage.classes.gp3.volumeBindingMode", pos: "16:16"},
		{code: CodeDriverName,
			pass: haNet + `storage: drivers: "rbd.csi.ceph.com": {}`,
			fail: haNet + `storage: drivers: "RBD.csi.ceph.com": {}`,
			path: `storage.drivers."RBD.csi.ceph.com"`, pos: "14:19"},
		{code: CodeStorageClassName,
			pass: haNet + rbd + `storage: classes: fast: {driver: "rbd.csi.ceph.com", default: true}`,
			fail: haNet + rbd + `storage: classes: Fast: {driver: "rbd.csi.ceph.com", default: true}`,
			path: "storage.classes.Fast", pos: "15:19"},

		// PKI
		{code: CodeRSAWeak,
			pass: haNet + `pki: keyAlgorithm: "RSA-2048"`,
			fail: haNet + `pki: keyAlgorithm: "RSA-1024"`,
			path: "pki.keyAlgorithm", pos: "14:20"},
		{code: CodeRSASize,
			pass: haNet + `pki: keyAlgorithm: "RSA-4096"`,
			fail: haNet + `pki: keyAlgorithm: "RSA-8192"`,
			path: "pki.keyAlgorithm", pos: "14:20"},
		{code: CodeLeafOutlivesCA, // the CA is valid 10y, 3650 days
			pass: haNet + `pki: leafValidity: "3650d"`,
			fail: haNet + `pki: leafValidity: "3651d"`,
			path: "pki.leafValidity", pos: "14:20"},
		{code: CodeZeroValidity,
			pass: haNet + `pki: leafValidity: "1d"`,
			fail: haNet + `pki: leafValidity: "0d"`,
			path: "pki.leafValidity", pos: "14:20"},

		// the CIS profile
		{code: CodeCISBroken, profile: ProfileCIS,
			pass: haNet + `security: anonymousAuth: false`,
			fail: haNet + `security: anonymousAuth: true`,
			path: "security.anonymousAuth", pos: "14:26"},
		{code: CodeCISWaived,
			pass: haNet + `security: audit: maxAgeDays: 30`,
			fail: haNet + `security: {audit: maxAgeDays: 7, cis: waivers: "1.2.17": reason: "disk"}`,
			path: `security.cis.waivers."1.2.17"`, pos: "14:58"},
		{code: CodeCISWaiverUnused,
			pass: haNet + `security: {audit: maxAgeDays: 7, cis: waivers: "1.2.17": reason: "disk"}`,
			fail: haNet + `security: {audit: maxAgeDays: 30, cis: waivers: "1.2.17": reason: "disk"}`,
			path: `security.cis.waivers."1.2.17"`, pos: "14:49"},
	}...)
}

func TestChecks(t *testing.T) {
	for i, c := range checkCases() {
		t.Run(fmt.Sprintf("%s_%d", c.code, i), func(t *testing.T) {
			h := header
			if c.ownVersion {
				h = ownVersionHeader
			}
			pass := compileProfile(t, map[string]string{"spec.cue": h + c.pass}, c.profile)
			for _, d := range pass {
				if d.Code == c.code {
					t.Errorf("passing spec raised %s", line(d))
				}
			}
			fail := compileProfile(t, map[string]string{"spec.cue": h + c.fail}, c.profile)
			found := false
			for _, d := range fail {
				if d.Code == c.code && d.Path == c.path && d.Primary().String() == "spec.cue:"+c.pos {
					found = true
				}
			}
			if !found {
				t.Errorf("failing spec did not raise %s at %s spec.cue:%s; got:\n%s", c.code, c.path, c.pos, lines(fail))
			}
		})
	}
}

// TestEveryRuleIsTested keeps the table complete: every semantic rule has
// a passing and a failing spec.
func TestEveryRuleIsTested(t *testing.T) {
	tested := map[string]bool{}
	for _, c := range checkCases() {
		tested[c.code] = true
	}
	for _, r := range Rules() {
		// Scenario rules have their own table, scenarioCases, and policy
		// rules theirs, in TestPolicyRules.
		if r.Family == "load" || r.Family == "schema" || r.Family == "internal" || r.Family == "scenario" || r.Family == "policies" {
			continue
		}
		if !tested[r.Code] {
			t.Errorf("rule %s (%s) has no case in checkCases", r.Code, r.Summary)
		}
	}
}

// sum is a well-formed sha256 for artifacts whose content no test fetches.
const sum = "0000000000000000000000000000000000000000000000000000000000000000"

// allArtifacts installs every binary the node of `one` needs (flannel,
// containerd, kube-proxy), one artifact a line.
func allArtifacts() string {
	var b strings.Builder
	for _, p := range []string{"/usr/local/bin/etcd", "/usr/local/bin/kube-apiserver", "/usr/local/bin/kube-controller-manager",
		"/usr/local/bin/kube-scheduler", "/usr/local/bin/kubelet", "/usr/local/bin/kube-proxy", "/usr/local/bin/runc"} {
		name := p[strings.LastIndex(p, "/")+1:]
		fmt.Fprintf(&b, "install: artifacts: %q: {url: \"https://mirror.example.com/%s\", sha256: %q, path: %q}\n", name, name, sum, p)
	}
	fmt.Fprintf(&b, "install: artifacts: containerd: {url: \"https://mirror.example.com/containerd.tar.gz\", sha256: %q, extract: {\"bin/containerd\": \"/usr/local/bin/containerd\", \"bin/containerd-shim-runc-v2\": \"/usr/local/bin/containerd-shim-runc-v2\"}}\n", sum)
	fmt.Fprintf(&b, "install: artifacts: cni: {url: \"https://mirror.example.com/cni.tgz\", sha256: %q, extract: {\"./loopback\": \"/opt/cni/bin/loopback\", \"./bridge\": \"/opt/cni/bin/bridge\", \"./host-local\": \"/opt/cni/bin/host-local\", \"./portmap\": \"/opt/cni/bin/portmap\"}}\n", sum)
	return b.String()
}

func gatewayCases() []checkCase {
	return []checkCase{
		{code: CodeGatewayNetwork,
			pass: one + `network: gateways: ["10.0.0.1"]`,
			fail: one + `network: gateways: ["10.1.0.1"]`,
			path: "network.gateways[0]", pos: "9:21"},
		{code: CodeGatewayFamily,
			pass: one + `network: gateways: ["10.0.0.1", "fd00::1"]`,
			fail: one + `network: gateways: ["10.0.0.1", "10.0.0.2"]`,
			path: "network.gateways[1]", pos: "9:33"},
	}
}

func installCases() []checkCase {
	download := one + `install: source: "download"` + "\n"
	return []checkCase{
		{code: CodeArtifactShape,
			pass: one + `install: artifacts: x: {url: "https://example.com/x", sha256: "` + sum + `", path: "/usr/local/bin/x"}`,
			fail: one + `install: artifacts: x: {url: "https://example.com/x", sha256: "` + sum + `", path: "/usr/local/bin/x", extract: {a: "/b"}}`,
			path: "install.artifacts.x", pos: "9:24"},
		{code: CodeBinaryMissing,
			pass: download + allArtifacts(),
			fail: download + strings.Replace(allArtifacts(), "/usr/local/bin/runc", "/usr/local/sbin/runc", 1),
			path: "install.source", pos: "9:18"},
		{code: CodeArtifactUnused,
			pass: download + allArtifacts(),
			fail: download + `install: artifacts: kubectl: {url: "https://example.com/kubectl", sha256: "` + sum + `", path: "/usr/local/bin/kubectl"}` + "\n" + allArtifacts(),
			path: "install.artifacts.kubectl.path", pos: "10:149"},
		{code: CodeArtifactClash,
			pass: download + allArtifacts(),
			fail: download + `install: artifacts: kubelet2: {url: "https://example.com/kubelet", sha256: "` + sum + `", path: "/usr/local/bin/kubelet"}` + "\n" + allArtifacts(),
			path: "install.artifacts.kubelet2.path", pos: "10:150"},
		{code: CodeArtifactsUnused,
			pass: download + allArtifacts(),
			fail: one + allArtifacts(),
			path: "install.artifacts", pos: "9:21"},
		{code: CodeBinaryMissing, // Flatcar: the binaries go to /opt/bin
			pass: download + strings.ReplaceAll(allArtifacts(), "/usr/local/bin/", "/opt/bin/") + `os: "flatcar"`,
			fail: download + allArtifacts() + `os: "flatcar"`,
			path: "install.source", pos: "9:18"},
	}
}

// sshKey is a well-formed public key.
const sshKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICBPJLtN0OW1tWrsYbsc7QGZG5UW3m3SHqYd/C30E0i0 ops@example.com"

// designCases are mistakes of the cluster's design that every value
// passes on its own.
func designCases() []checkCase {
	return []checkCase{
		{code: CodeAddressGateway,
			pass: one + `network: gateways: ["10.0.0.1"]`,
			fail: one + `network: gateways: ["10.0.0.11"]`,
			path: "controlPlane.nodes.cp1.address", pos: "7:36"},
		{code: CodeAddressReserved, // an IPv6 network's subnet-router anycast address
			pass: v6 + `workers: nodes: w1: address: "fd00::1"`,
			fail: v6 + `workers: nodes: w1: address: "fd00::"`,
			path: "workers.nodes.w1.address", pos: "9:30"},
		{code: CodeServiceCIDRSmall, // a /29 has no tenth address for the DNS Service
			pass: haNet + `network: serviceCIDR: "10.96.0.0/28"`,
			fail: haNet + `network: serviceCIDR: "10.96.0.0/29"`,
			path: "network.serviceCIDR", pos: "14:23"},
		{code: CodeServiceCIDRSmall, // a /32 has no address for the kubernetes Service
			pass: haNet + `network: {serviceCIDR: "10.96.0.0/30", dnsServiceIP: "10.96.0.2"}`,
			fail: haNet + `network: {serviceCIDR: "10.96.0.0/32"}`,
			path: "network.serviceCIDR", pos: "14:24"},
		{code: CodeEndpointReserved,
			pass: haNet,
			fail: strings.Replace(haNet, `address: "10.0.0.10"`, `address: "10.0.255.255"`, 1),
			path: "controlPlane.endpoint.address", pos: "7:34"},
		{code: CodeEndpointReserved, // the router's address
			pass: haNet + `network: gateways: ["10.0.0.1"]`,
			fail: strings.Replace(haNet, `address: "10.0.0.10"`, `address: "10.0.0.1"`, 1) + `network: gateways: ["10.0.0.1"]`,
			path: "controlPlane.endpoint.address", pos: "7:34"},
		{code: CodeVIPAddress,
			pass: haNet + `controlPlane: endpoint: mode: "vip"`,
			fail: strings.Replace(haNet, `endpoint: address: "10.0.0.10"`, `endpoint: host: "api.example.com"`, 1) + `controlPlane: endpoint: mode: "vip"`,
			path: "controlPlane.endpoint.mode", pos: "14:31"},
		{code: CodeVIPNetwork, // the VIP off every node network
			pass: haNet + `controlPlane: endpoint: mode: "vip"`,
			fail: strings.Replace(haNet, `"10.0.0.10"`, `"10.9.0.10"`, 1) + `controlPlane: endpoint: mode: "vip"`,
			path: "controlPlane.endpoint.address", pos: "7:34"},
		{code: CodeVIPNetwork, // a control-plane node off the VIP's network
			pass: strings.Replace(haNet, `["10.0.0.0/16"]`, `["10.0.0.0/16", "10.9.0.0/24"]`, 1) + `controlPlane: endpoint: mode: "vip"`,
			fail: strings.Replace(strings.Replace(haNet, `"10.0.0.13"`, `"10.9.0.13"`, 1), `["10.0.0.0/16"]`, `["10.0.0.0/16", "10.9.0.0/24"]`, 1) + `controlPlane: endpoint: mode: "vip"`,
			path: "controlPlane.nodes.cp3.address", pos: "11:17"},
		{code: CodeVIPSingle,
			pass: one + `controlPlane: endpoint: {address: "10.0.0.10", mode: "external"}`,
			fail: one + `controlPlane: endpoint: {address: "10.0.0.10", mode: "vip"}`,
			path: "controlPlane.endpoint.mode", pos: "9:54"},
		// Each operating system family × install source × runtime that
		// cannot work: Ignition systems ship none of the binaries, and
		// have no CRI-O; Debian takes either source and either engine.
		{code: CodeOSBinaries, // Flatcar, preinstalled, containerd: at the cluster's os
			pass: one + "os: \"flatcar\"\ninstall: source: \"download\"",
			fail: one + "os: \"flatcar\"",
			path: "os", pos: "9:5"},
		{code: CodeOSBinaries, // Fedora CoreOS, preinstalled, containerd: at the node's os
			pass: one + fcosWorker + "\ninstall: source: \"download\"",
			fail: one + fcosWorker,
			path: "workers.nodes.w1.os", pos: "9:47"},
		{code: CodeOSBinaries, // Fedora CoreOS, preinstalled, cri-o
			pass: one + "runtime: engine: \"cri-o\"",
			fail: one + fcosWorker + "\nruntime: engine: \"cri-o\"",
			path: "workers.nodes.w1.os", pos: "9:47"},
		{code: CodeOSEngine, // Flatcar, download, cri-o; Debian with cri-o passes
			pass: one + "install: source: \"download\"\nruntime: engine: \"cri-o\"",
			fail: one + "os: \"flatcar\"\ninstall: source: \"download\"\nruntime: engine: \"cri-o\"",
			path: "os", pos: "9:5"},
		{code: CodeOSEngine, // Fedora CoreOS, download, cri-o; containerd passes
			pass: one + fcosWorker + "\ninstall: source: \"download\"",
			fail: one + fcosWorker + "\ninstall: source: \"download\"\nruntime: engine: \"cri-o\"",
			path: "workers.nodes.w1.os", pos: "9:47"},
		{code: CodeOSEngine, // Flatcar, preinstalled, cri-o
			pass: one + "os: \"flatcar\"",
			fail: one + "os: \"flatcar\"\nruntime: engine: \"cri-o\"",
			path: "os", pos: "9:5"},
		{code: CodeOSPackages, // keepalived and HAProxy on Flatcar: at the cluster's os
			pass: haNet + `controlPlane: endpoint: mode: "external"` + "\nos: \"flatcar\"",
			fail: haNet + `controlPlane: endpoint: mode: "vip"` + "\nos: \"flatcar\"",
			path: "os", pos: "15:5"},
		{code: CodeOSPackages, // HAProxy on a Fedora CoreOS pool's nodes: at the pool's os
			pass: haNet + `controlPlane: endpoint: mode: "vip"` + "\nworkers: pools: w: {count: 2, firstAddress: \"10.0.1.1\", os: \"fedora-coreos\"}",
			fail: haNet + `controlPlane: endpoint: mode: "nodeLocal"` + "\nworkers: pools: w: {count: 2, firstAddress: \"10.0.1.1\", os: \"fedora-coreos\"}",
			path: "workers.pools.w.os", pos: "15:61"},
		{code: CodeEndpointPort, // the node-local proxy on the API servers' port
			pass: haNet + `controlPlane: endpoint: {mode: "nodeLocal", nodeLocal: port: 6444}`,
			fail: haNet + `controlPlane: endpoint: {mode: "nodeLocal", nodeLocal: port: 6443}`,
			path: "controlPlane.endpoint.nodeLocal.port", pos: "14:62"},
		{code: CodeEndpointPort, // the VIP on a kubelet's port
			pass: haNet + `controlPlane: endpoint: {mode: "vip", port: 8443}`,
			fail: haNet + `controlPlane: endpoint: {mode: "vip", port: 10250}`,
			path: "controlPlane.endpoint.port", pos: "14:45"},
		{code: CodeEndpointPort, // the VIP on sshd's port
			pass: haNet + `controlPlane: endpoint: {mode: "vip", port: 8443}`,
			fail: haNet + `controlPlane: endpoint: {mode: "vip", port: 22}`,
			path: "controlPlane.endpoint.port", pos: "14:45"},
		{code: CodeEndpointPort, // the node-local proxy on sshd's port
			pass: haNet + `controlPlane: endpoint: {mode: "nodeLocal", nodeLocal: port: 6444}`,
			fail: haNet + `controlPlane: endpoint: {mode: "nodeLocal", nodeLocal: port: 22}`,
			path: "controlPlane.endpoint.nodeLocal.port", pos: "14:62"},
		{code: CodeEndpointLoopback, // a loopback address
			pass: haNet + `controlPlane: endpoint: mode: "nodeLocal"`,
			fail: strings.Replace(haNet, `"10.0.0.10"`, `"127.0.0.1"`, 1) + `controlPlane: endpoint: mode: "nodeLocal"`,
			path: "controlPlane.endpoint.address", pos: "7:34"},
		{code: CodeEndpointLoopback, // IPv6's loopback
			pass: strings.Replace(haNet, `"10.0.0.10"`, `"127.0.0.1"`, 1) + `controlPlane: endpoint: mode: "external"`,
			fail: strings.Replace(haNet, `"10.0.0.10"`, `"::1"`, 1) + `controlPlane: endpoint: mode: "nodeLocal"`,
			path: "controlPlane.endpoint.address", pos: "7:34"},
		{code: CodeEndpointLoopback, // localhost
			pass: one + `controlPlane: endpoint: {host: "api.example.com", mode: "nodeLocal"}`,
			fail: one + `controlPlane: endpoint: {host: "localhost", mode: "nodeLocal"}`,
			path: "controlPlane.endpoint.host", pos: "9:32"},
		{code: CodeEndpointUnused, // VRRP settings beside the default mode
			pass: haNet + `controlPlane: endpoint: {mode: "vip", vip: routerID: 7}`,
			fail: haNet + `controlPlane: endpoint: vip: routerID: 7`,
			path: "controlPlane.endpoint.vip.routerID", pos: "14:40"},
		{code: CodeEndpointUnused, // the node-local proxy's port beside mode vip
			pass: haNet + `controlPlane: endpoint: {mode: "nodeLocal", nodeLocal: port: 6445}`,
			fail: haNet + `controlPlane: endpoint: {mode: "vip", nodeLocal: port: 6445}`,
			path: "controlPlane.endpoint.nodeLocal.port", pos: "14:56"},
		{code: CodePortClash, // stacked etcd's client port
			pass: haNet + `controlPlane: apiServer: port: 6444`,
			fail: haNet + `controlPlane: apiServer: port: 2379`,
			path: "controlPlane.apiServer.port", pos: "14:32"},
		{code: CodePortClash, // the NodePort range
			pass: haNet + `controlPlane: apiServer: port: 29999`,
			fail: haNet + `controlPlane: apiServer: port: 30443`,
			path: "controlPlane.apiServer.port", pos: "14:32"},
		{code: CodeNoPodNode,
			pass: one + `controlPlane: schedulable: true`,
			fail: one + `workers: nodes: w1: {address: "10.0.0.21", taints: [{key: "dedicated", effect: "NoExecute"}]}`,
			path: "workers", pos: "9:10"},
	}
}

// valueCases hold free-form strings to the rules of their consumers.
func valueCases() []checkCase {
	worker := func(fields string) string { return one + `workers: nodes: w1: {address: "10.0.0.21", ` + fields + "}" }
	storage := one + `storage: drivers: "d.example.com": {}` + "\n"
	return []checkCase{
		{code: CodeLabelValue, // a space would end --node-labels' value
			pass: worker(`labels: tier: "web-tier"`),
			fail: worker(`labels: tier: "web tier"`),
			path: "workers.nodes.w1.labels.tier", pos: "9:58"},
		{code: CodeLabelValue, // a line break would add a directive to kubelet.service
			pass: worker(`labels: tier: "web"`),
			fail: worker(`labels: tier: "web\nExecStartPre=/bin/sh -c id"`),
			path: "workers.nodes.w1.labels.tier", pos: "9:58"},
		{code: CodeTaintValue,
			pass: worker(`taints: [{key: "gpu", value: "a100", effect: "NoSchedule"}]`),
			fail: worker(`taints: [{key: "gpu", value: "a100 --anonymous-auth=true", effect: "NoSchedule"}]`),
			path: "workers.nodes.w1.taints[0].value", pos: "9:73"},
		{code: CodeFailureDomain,
			pass: worker(`zone: "eu-1a"`),
			fail: worker(`zone: "eu 1a"`),
			path: "workers.nodes.w1.zone", pos: "9:50"},
		{code: CodeFailureDomain, // a pool's zone list
			pass: one + `workers: pools: p: {count: 2, namePattern: "p%d", firstAddress: "10.0.0.21", zones: ["a", "b"]}`,
			fail: one + `workers: pools: p: {count: 2, namePattern: "p%d", firstAddress: "10.0.0.21", zones: ["a", "b;c"]}`,
			path: "workers.pools.p.zones[1]", pos: "9:91"},
		{code: CodeImage,
			pass: one + `network: cni: images: flannel: "ghcr.io/flannel-io/flannel:v0.27.4"`,
			fail: one + `network: cni: images: flannel: "flannel"`,
			path: "network.cni.images.flannel", pos: "9:32"},
		{code: CodeImage, // without tag or digest it pulls :latest
			pass: one + `network: cni: images: flannel: "ghcr.io/flannel-io/flannel@sha256:` + sum + `"`,
			fail: one + `network: cni: images: flannel: "ghcr.io/flannel-io/flannel"`,
			path: "network.cni.images.flannel", pos: "9:32"},
		{code: CodeImageComponent,
			pass: one + `network: cni: images: "flannel-cni-plugin": "ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1"`,
			fail: one + `network: cni: images: "calico-node": "quay.io/calico/node:v3.30.3"`,
			path: `network.cni.images."calico-node"`, pos: "9:23"},
		{code: CodeUserName,
			pass: one + `access: users: alice: sshAuthorizedKeys: ["` + sshKey + `"]`,
			fail: one + `access: users: etcd: sshAuthorizedKeys: ["` + sshKey + `"]`,
			path: "access.users.etcd", pos: "9:16"},
		{code: CodeSSHKey,
			pass: one + `access: users: alice: sshAuthorizedKeys: ["` + sshKey + `"]`,
			fail: one + `access: users: alice: sshAuthorizedKeys: ["` + sshKey + `\n` + sshKey + `"]`,
			path: "access.users.alice.sshAuthorizedKeys[0]", pos: "9:43"},
		{code: CodeURL,
			pass: one + `install: artifacts: k: {url: "https://example.com/kubelet", sha256: "` + sum + `", path: "/usr/local/bin/kubelet"}`,
			fail: one + `install: artifacts: k: {url: "https://user:secret@example.com/kubelet", sha256: "` + sum + `", path: "/usr/local/bin/kubelet"}`,
			path: "install.artifacts.k.url", pos: "9:30"},
		{code: CodeFilePath,
			pass: one + `install: artifacts: k: {url: "https://example.com/kubelet", sha256: "` + sum + `", path: "/usr/local/bin/kubelet"}`,
			fail: one + `install: artifacts: k: {url: "https://example.com/kubelet", sha256: "` + sum + `", path: "/usr/local/bin/kube let"}`,
			path: "install.artifacts.k.path", pos: "9:143"},
		{code: CodeArchiveMember,
			pass: one + `install: artifacts: k: {url: "https://example.com/k.tgz", sha256: "` + sum + `", extract: "./kubelet": "/usr/local/bin/kubelet"}`,
			fail: one + `install: artifacts: k: {url: "https://example.com/k.tgz", sha256: "` + sum + `", extract: "--to-command=sh": "/usr/local/bin/kubelet"}`,
			path: `install.artifacts.k.extract."--to-command=sh"`, pos: "9:144"},
		{code: CodeKernelArg,
			pass: one + `boot: {matchboxURL: "http://mb.example.com:8080", kernel: "/assets/k", initrd: [], args: ["console=ttyS0"]}`,
			fail: one + `boot: {matchboxURL: "http://mb.example.com:8080", kernel: "/assets/k", initrd: [], args: ["root=${root}"]}`,
			path: "boot.args[0]", pos: "9:91"},
		{code: CodeKernelArgOwned, // Ignition's URL, in a family's arguments
			pass: one + `boot: {matchboxURL: "http://mb.example.com:8080", kernel: "/assets/k", initrd: [], os: flatcar: args: ["console=ttyS0"]}`,
			fail: one + `boot: {matchboxURL: "http://mb.example.com:8080", kernel: "/assets/k", initrd: [], os: flatcar: args: ["ignition.config.url=http://x.example.com/c.ign"]}`,
			path: "boot.os.flatcar.args[0]", pos: "9:104"},
		{code: CodeKernelArgOwned, // cloud-init's data source
			pass: one + `boot: {matchboxURL: "http://mb.example.com:8080", kernel: "/assets/k", initrd: [], args: ["console=ttyS0"]}`,
			fail: one + `boot: {matchboxURL: "http://mb.example.com:8080", kernel: "/assets/k", initrd: [], args: ["ds=nocloud"]}`,
			path: "boot.args[0]", pos: "9:91"},
		{code: CodeAdmission,
			pass: one + `security: admission: plugins: ["NodeRestriction", "DenyServiceExternalIPs", "AlwaysPullImages"]`,
			fail: one + `security: admission: plugins: ["NodeRestriction", "DenyServiceExternalIPs", "NodeRestriction,AlwaysAdmit"]`,
			path: "security.admission.plugins[2]", pos: "9:77"},
		{code: CodeParameters,
			pass: storage + `storage: classes: c: {driver: "d.example.com", default: true, parameters: pool: "rbd"}`,
			fail: storage + `storage: classes: c: {driver: "d.example.com", default: true, parameters: "": "rbd"}`,
			path: `storage.classes.c.parameters.""`, pos: "10:75"},
		{code: CodeRegistryHost, // an image naming "registry/x" is pulled from docker.io
			pass: one + `runtime: mirrors: "registry.example.com:5000": ["https://mirror.example.com"]`,
			fail: one + `runtime: mirrors: registry: ["https://mirror.example.com"]`,
			path: "runtime.mirrors.registry", pos: "9:19"},
		{code: CodeMirrorURL, // containerd and CRI-O read a path differently
			pass: one + `runtime: mirrors: "registry.k8s.io": ["https://mirror.example.com:5000", "http://10.0.0.5"]`,
			fail: one + `runtime: mirrors: "registry.k8s.io": ["https://mirror.example.com:5000", "http://10.0.0.5/k8s"]`,
			path: `runtime.mirrors."registry.k8s.io"[1]`, pos: "9:74"},
		{code: CodeMirrorURL, // tried in order: twice is a mistake
			pass: one + `runtime: mirrors: "docker.io": ["https://a.example.com", "https://b.example.com"]`,
			fail: one + `runtime: mirrors: "docker.io": ["https://a.example.com", "https://a.example.com"]`,
			path: `runtime.mirrors."docker.io"[1]`, pos: "9:58"},
		{code: CodeMAC,
			pass: strings.Replace(one, `address: "10.0.0.11"`, `{address: "10.0.0.11", mac: "52:54:00:00:00:11"}`, 1),
			fail: strings.Replace(one, `address: "10.0.0.11"`, `{address: "10.0.0.11", mac: "01:00:5e:00:00:11"}`, 1),
			path: "controlPlane.nodes.cp1.mac", pos: "7:55"},
	}
}
