package systemd

import (
	"fmt"
	"github.com/kcompile/kcompile/targets/unitfile"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
)

// binDir is where the install unit puts the binaries of the spec's
// versions.
const binDir = "/usr/local/bin"

// flag renders --name=value.
func flag(name, value string) string { return "--" + name + "=" + value }

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// service builds the unit of a long-running component.
func service(description, doc string, after, requires []string, program string, args []string) unitfile.File {
	unit := unitfile.Section{Name: "Unit", Directives: []unitfile.Directive{{Key: "Description", Value: description}, {Key: "Documentation", Value: doc}}}
	if len(after) > 0 {
		unit.Directives = append(unit.Directives, unitfile.Directive{Key: "After", Value: strings.Join(after, " ")}, unitfile.Directive{Key: "Wants", Value: strings.Join(after, " ")})
	}
	if len(requires) > 0 {
		unit.Directives = append(unit.Directives, unitfile.Directive{Key: "Requires", Value: strings.Join(requires, " ")})
	}
	return unitfile.File{Sections: []unitfile.Section{
		unit,
		{Name: "Service", Directives: []unitfile.Directive{
			{Key: "ExecStart", Command: &unitfile.Command{Argv: append([]string{program}, args...), OnePerLine: true}},
			{Key: "Restart", Value: "always"},
			{Key: "RestartSec", Value: "5"},
			{Key: "LimitNOFILE", Value: "1048576"},
		}},
		{Name: "Install", Directives: []unitfile.Directive{{Key: "WantedBy", Value: "multi-user.target"}}},
	}}
}

// etcdArgs are the flags of an etcd member: client and peer TLS with
// client-certificate authentication, the initial cluster of the topology.
func etcdArgs(c *ir.Cluster, m ir.EtcdMember) []string {
	local := "https://127.0.0.1:2379"
	if m.Address.Is6() {
		local = "https://[::1]:2379"
	}
	return []string{
		flag("name", m.Name),
		flag("data-dir", etcdDataDir),
		flag("listen-client-urls", local+","+m.ClientURL),
		flag("advertise-client-urls", m.ClientURL),
		flag("listen-peer-urls", m.PeerURL),
		flag("initial-advertise-peer-urls", m.PeerURL),
		flag("initial-cluster", c.Etcd.InitialCluster),
		flag("initial-cluster-state", "new"),
		flag("initial-cluster-token", c.Name),
		flag("listen-metrics-urls", "http://"+loopbackFor(m.Address)+":2381"),
		flag("cert-file", "/etc/kubernetes/pki/etcd/server.crt"),
		flag("key-file", "/etc/kubernetes/pki/etcd/server.key"),
		flag("trusted-ca-file", "/etc/kubernetes/pki/etcd/ca.crt"),
		flag("client-cert-auth", "true"),
		flag("peer-cert-file", "/etc/kubernetes/pki/etcd/peer.crt"),
		flag("peer-key-file", "/etc/kubernetes/pki/etcd/peer.key"),
		flag("peer-trusted-ca-file", "/etc/kubernetes/pki/etcd/ca.crt"),
		flag("peer-client-cert-auth", "true"),
		flag("quota-backend-bytes", strconv.FormatInt(c.Etcd.QuotaBackendBytes, 10)),
		flag("snapshot-count", strconv.Itoa(c.Etcd.SnapshotCount)),
		flag("cipher-suites", tlsCipherSuites),
		flag("tls-min-version", "TLS1.2"),
	}
}

func loopbackFor(a netip.Addr) string {
	if a.Is6() {
		return "[::1]"
	}
	return "127.0.0.1"
}

// tlsCipherSuites are the TLS 1.2 suites every component accepts: AEAD
// with forward secrecy only.
const tlsCipherSuites = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256," +
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384," +
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"

// apiServerArgs are kube-apiserver's flags for a control-plane node.
func apiServerArgs(c *ir.Cluster, n ir.Node) []string {
	plugins := append([]string(nil), c.Security.AdmissionPlugins...)
	sort.Strings(plugins)
	args := []string{
		flag("advertise-address", n.Address().String()),
		flag("allow-privileged", "true"),
		// Off unless the spec waives CIS 1.2.1.
		flag("anonymous-auth", strconv.FormatBool(c.Security.AnonymousAuth)),
		flag("authorization-mode", "Node,RBAC"),
		flag("client-ca-file", clusterCAPath),
		flag("enable-admission-plugins", strings.Join(plugins, ",")),
		flag("enable-bootstrap-token-auth", "true"),
		flag("etcd-cafile", "/etc/kubernetes/pki/etcd/ca.crt"),
		flag("etcd-certfile", "/etc/kubernetes/pki/apiserver-etcd-client.crt"),
		flag("etcd-keyfile", "/etc/kubernetes/pki/apiserver-etcd-client.key"),
		flag("etcd-servers", strings.Join(c.Etcd.ClientURLs, ",")),
		flag("kubelet-certificate-authority", clusterCAPath),
		flag("kubelet-client-certificate", "/etc/kubernetes/pki/apiserver-kubelet-client.crt"),
		flag("kubelet-client-key", "/etc/kubernetes/pki/apiserver-kubelet-client.key"),
		flag("kubelet-preferred-address-types", "InternalIP,ExternalIP,Hostname"),
		flag("profiling", "false"),
		flag("proxy-client-cert-file", "/etc/kubernetes/pki/front-proxy-client.crt"),
		flag("proxy-client-key-file", "/etc/kubernetes/pki/front-proxy-client.key"),
		flag("requestheader-allowed-names", "front-proxy-client"),
		flag("requestheader-client-ca-file", "/etc/kubernetes/pki/front-proxy-ca.crt"),
		flag("requestheader-extra-headers-prefix", "X-Remote-Extra-"),
		flag("requestheader-group-headers", "X-Remote-Group"),
		flag("requestheader-username-headers", "X-Remote-User"),
		flag("secure-port", strconv.Itoa(c.Kubernetes.APIServerPort)),
		flag("service-account-issuer", "https://kubernetes.default.svc."+c.Network.Domain),
		// CIS 1.2.30: tokens live as long as they say.
		flag("service-account-extend-token-expiration", "false"),
		flag("service-account-key-file", "/etc/kubernetes/pki/sa.pub"),
		flag("service-account-signing-key-file", "/etc/kubernetes/pki/sa.key"),
		flag("service-cluster-ip-range", joinPrefixes(c.Network.ServiceCIDRs)),
		flag("tls-cert-file", "/etc/kubernetes/pki/apiserver.crt"),
		flag("tls-cipher-suites", tlsCipherSuites),
		flag("tls-min-version", "VersionTLS12"),
		flag("tls-private-key-file", "/etc/kubernetes/pki/apiserver.key"),
	}
	if c.Security.EncryptionAtRest {
		args = append(args, flag("encryption-provider-config", encryptionConfigPath))
	}
	if a := c.Security.Audit; a.Enabled {
		args = append(args,
			flag("audit-log-maxage", strconv.Itoa(a.MaxAgeDays)),
			flag("audit-log-maxbackup", strconv.Itoa(a.MaxBackups)),
			flag("audit-log-maxsize", strconv.Itoa(a.MaxSizeMB)),
			flag("audit-log-path", auditLogPath),
			flag("audit-policy-file", auditPolicyPath))
	}
	sort.Strings(args)
	return args
}

// controllerManagerArgs are kube-controller-manager's flags: node CIDR
// allocation from the pod CIDR, per-controller service-account
// credentials, CSR signing with the cluster CA.
func controllerManagerArgs(c *ir.Cluster) []string {
	kubeconfig := "/etc/kubernetes/controller-manager.conf"
	args := []string{
		flag("allocate-node-cidrs", "true"),
		flag("authentication-kubeconfig", kubeconfig),
		flag("authorization-kubeconfig", kubeconfig),
		flag("bind-address", "127.0.0.1"),
		flag("client-ca-file", clusterCAPath),
		flag("cluster-cidr", joinPrefixes(c.Network.PodCIDRs)),
		flag("cluster-name", c.Name),
		flag("cluster-signing-cert-file", clusterCAPath),
		flag("cluster-signing-key-file", "/etc/kubernetes/pki/ca.key"),
		flag("controllers", "*,bootstrapsigner,tokencleaner"),
		flag("kubeconfig", kubeconfig),
		flag("leader-elect", "true"),
		flag("profiling", "false"),
		flag("requestheader-client-ca-file", "/etc/kubernetes/pki/front-proxy-ca.crt"),
		flag("root-ca-file", clusterCAPath),
		flag("service-account-private-key-file", "/etc/kubernetes/pki/sa.key"),
		flag("service-cluster-ip-range", joinPrefixes(c.Network.ServiceCIDRs)),
		// CIS 1.3.1 asks for the threshold to be chosen; this is
		// Kubernetes' default, written down.
		flag("terminated-pod-gc-threshold", "12500"),
		flag("tls-cipher-suites", tlsCipherSuites),
		flag("tls-min-version", "VersionTLS12"),
		flag("use-service-account-credentials", "true"),
	}
	// One mask flag per family the pod CIDRs have.
	for _, p := range c.Network.PodCIDRs {
		if p.Addr().Is4() {
			args = append(args, flag("node-cidr-mask-size-ipv4", strconv.Itoa(c.Network.NodeMaskIPv4)))
		} else {
			args = append(args, flag("node-cidr-mask-size-ipv6", strconv.Itoa(c.Network.NodeMaskIPv6)))
		}
	}
	sort.Strings(args)
	return args
}

// schedulerArgs are kube-scheduler's flags; the rest is in its config.
func schedulerArgs() []string {
	return []string{
		flag("authentication-kubeconfig", schedulerKubeconfig),
		flag("authorization-kubeconfig", schedulerKubeconfig),
		flag("bind-address", "127.0.0.1"),
		flag("config", schedulerConfigPath),
		// The configuration turns profiling off; with --config the
		// scheduler ignores this flag, but auditors (CIS 1.4.1) read
		// the command line.
		flag("profiling", "false"),
		flag("tls-cipher-suites", tlsCipherSuites),
		flag("tls-min-version", "VersionTLS12"),
	}
}

// selfLabels are the node's labels a kubelet may set on itself: the
// NodeRestriction admission plugin refuses kubernetes.io and k8s.io keys
// outside a few allowed ones (node-role.kubernetes.io among the refused),
// so those are applied to the Node object from the cluster tree instead.
func selfLabels(n ir.Node) (self, applied []ir.Label) {
	for _, l := range n.Labels {
		if kubeletMaySet(l.Key) {
			self = append(self, l)
		} else {
			applied = append(applied, l)
		}
	}
	return self, applied
}

func kubeletMaySet(key string) bool {
	prefix, _, found := strings.Cut(key, "/")
	if !found {
		return true
	}
	restricted := prefix == "kubernetes.io" || strings.HasSuffix(prefix, ".kubernetes.io") ||
		prefix == "k8s.io" || strings.HasSuffix(prefix, ".k8s.io")
	if !restricted {
		return true
	}
	switch key {
	case "kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os",
		"beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
		"failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
		"topology.kubernetes.io/region", "topology.kubernetes.io/zone":
		return true
	}
	return strings.HasPrefix(prefix, "kubelet.kubernetes.io") || strings.HasPrefix(prefix, "node.kubernetes.io") ||
		strings.HasSuffix(prefix, ".kubelet.kubernetes.io") || strings.HasSuffix(prefix, ".node.kubernetes.io")
}

// kubeletArgs are the kubelet's flags: what KubeletConfiguration cannot
// say about this node.
func kubeletArgs(n ir.Node) []string {
	args := []string{
		flag("config", kubeletConfigPath),
		flag("kubeconfig", kubeletKubeconfig),
		flag("hostname-override", n.Name),
		flag("node-ip", joinAddrs(n.Addresses)),
	}
	self, _ := selfLabels(n)
	if len(self) > 0 {
		var kv []string
		for _, l := range self {
			kv = append(kv, l.Key+"="+l.Value)
		}
		args = append(args, flag("node-labels", strings.Join(kv, ",")))
	}
	if len(n.Taints) > 0 {
		var ts []string
		for _, t := range n.Taints {
			s := t.Key
			if t.Value != "" {
				s += "=" + t.Value
			}
			ts = append(ts, s+":"+t.Effect)
		}
		args = append(args, flag("register-with-taints", strings.Join(ts, ",")))
	}
	return args
}

// program is the path of a component's binary.
func program(name string) string { return fmt.Sprintf("%s/%s", binDir, name) }
