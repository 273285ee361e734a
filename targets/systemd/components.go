package systemd

import (
	"github.com/kcompile/kcompile/internal/unitfile"
	"github.com/kcompile/kcompile/layout"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
)

// apiServerWatchTermination bounds how long a stopping API server lets
// its watches drain: far less than systemd's stop timeout, so that the
// halt of a control-plane node never waits out a watch.
const apiServerWatchTermination = 10 * time.Second

// apiServerShutdownDelay is how long a stopping API server of several
// serves on after it fails /readyz: HAProxy's checks find it down
// within haproxyFall of them, one a haproxyCheckInterval.
const apiServerShutdownDelay = (haproxyFall + 1) * haproxyCheckInterval

// flag renders --name=value.
func flag(name, value string) string { return "--" + name + "=" + value }

// service builds the unit of a long-running component, started after
// the units of after and pulling in those of wants.
func service(description, doc string, after, wants, requires []string, program string, args []string) unitfile.File {
	unit := unitfile.Section{Name: "Unit", Directives: []unitfile.Directive{{Key: "Description", Value: description}, {Key: "Documentation", Value: doc}}}
	if len(after) > 0 {
		unit.Directives = append(unit.Directives, unitfile.Directive{Key: "After", Value: strings.Join(after, " ")})
	}
	if len(wants) > 0 {
		unit.Directives = append(unit.Directives, unitfile.Directive{Key: "Wants", Value: strings.Join(wants, " ")})
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
func etcdArgs(c *ir.Cluster, m ir.EtcdMember, l placement) []string {
	listen := m.ClientURL()
	if l.loopback != m.Address {
		listen = "https://" + net.JoinHostPort(l.loopback.String(), "2379") + "," + listen
	}
	return []string{
		flag("name", m.Name),
		flag("data-dir", l.at(layout.EtcdDataDir)),
		flag("listen-client-urls", listen),
		flag("advertise-client-urls", m.ClientURL()),
		flag("listen-peer-urls", m.PeerURL()),
		flag("initial-advertise-peer-urls", m.PeerURL()),
		flag("initial-cluster", c.Etcd.InitialCluster()),
		flag("initial-cluster-state", initialState(m)),
		flag("initial-cluster-token", c.Name),
		flag("listen-metrics-urls", "http://"+net.JoinHostPort(l.loopback.String(), "2381")),
		flag("cert-file", l.at(layout.CertFile(layout.EtcdServerStem))),
		flag("key-file", l.at(layout.KeyFile(layout.EtcdServerStem))),
		flag("trusted-ca-file", l.at(layout.EtcdCACert)),
		flag("client-cert-auth", "true"),
		flag("peer-cert-file", l.at(layout.CertFile(layout.EtcdPeerStem))),
		flag("peer-key-file", l.at(layout.KeyFile(layout.EtcdPeerStem))),
		flag("peer-trusted-ca-file", l.at(layout.EtcdCACert)),
		flag("peer-client-cert-auth", "true"),
		flag("quota-backend-bytes", strconv.FormatInt(c.Etcd.QuotaBackendBytes, 10)),
		flag("snapshot-count", strconv.Itoa(c.Etcd.SnapshotCount)),
		flag("cipher-suites", tlsCipherSuites),
		flag("tls-min-version", "TLS1.2"),
	}
}

// tlsCipherSuites are the TLS 1.2 suites every component accepts: AEAD
// with forward secrecy only.
const tlsCipherSuites = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256," +
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384," +
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"

// apiServerArgs are kube-apiserver's flags for a control-plane node.
func apiServerArgs(c *ir.Cluster, n ir.Node, l placement) []string {
	plugins := append([]string(nil), c.Security.AdmissionPlugins...)
	sort.Strings(plugins)
	args := []string{
		flag("advertise-address", n.Address().String()),
		flag("allow-privileged", "true"),
	}
	// The VIP's HAProxy listens on the API servers' port at the VIP,
	// which a listener on every address would hold.
	if c.Endpoint.Mode == ir.EndpointVIP && c.Endpoint.Port == c.Kubernetes.APIServerPort {
		args = append(args, flag("bind-address", n.Address().String()))
	}
	args = append(args,
		// Off unless the spec waives CIS 1.2.1.
		flag("anonymous-auth", strconv.FormatBool(c.Security.AnonymousAuth)),
		flag("authorization-mode", "Node,RBAC"),
		flag("client-ca-file", l.at(layout.ClusterCACert)),
		flag("enable-admission-plugins", strings.Join(plugins, ",")),
		flag("enable-bootstrap-token-auth", "true"),
		flag("etcd-cafile", l.at(layout.EtcdCACert)),
		flag("etcd-certfile", l.at(layout.CertFile(layout.APIServerEtcdClientStem))),
		flag("etcd-keyfile", l.at(layout.KeyFile(layout.APIServerEtcdClientStem))),
		flag("etcd-servers", strings.Join(etcdServers(c, n), ",")),
		flag("kubelet-certificate-authority", l.at(layout.ClusterCACert)),
		flag("kubelet-client-certificate", l.at(layout.CertFile(layout.APIServerKubeletClientStem))),
		flag("kubelet-client-key", l.at(layout.KeyFile(layout.APIServerKubeletClientStem))),
		flag("kubelet-preferred-address-types", "InternalIP,ExternalIP,Hostname"),
		flag("profiling", "false"),
		flag("proxy-client-cert-file", l.at(layout.CertFile(layout.FrontProxyClientStem))),
		flag("proxy-client-key-file", l.at(layout.KeyFile(layout.FrontProxyClientStem))),
		flag("requestheader-allowed-names", "front-proxy-client"),
		flag("requestheader-client-ca-file", l.at(layout.FrontProxyCACert)),
		flag("requestheader-extra-headers-prefix", "X-Remote-Extra-"),
		flag("requestheader-group-headers", "X-Remote-Group"),
		flag("requestheader-username-headers", "X-Remote-User"),
		flag("secure-port", strconv.Itoa(c.Kubernetes.APIServerPort)),
		flag("service-account-issuer", "https://kubernetes.default.svc."+c.Network.Domain),
		// CIS 1.2.30: tokens live as long as they say.
		flag("service-account-extend-token-expiration", "false"),
		flag("service-account-key-file", l.at(layout.ServiceAccountPubKey)),
		flag("service-account-signing-key-file", l.at(layout.ServiceAccountKey)),
		flag("service-cluster-ip-range", ir.Join(c.Network.ServiceCIDRs, ",")),
		// A stopping API server ends its watches (at 200 a second at
		// least), so that their clients move to another API server and
		// the HTTP server's shutdown finds its connections idle. Unset,
		// it waits for the watches' clients to hang up, up to
		// --request-timeout (60 s): every halt of a control-plane node
		// whose API server others' clients watch through the endpoint
		// would outlast systemd's and up's stop timeouts.
		flag("shutdown-watch-termination-grace-period", apiServerWatchTermination.String()),
		flag("tls-cert-file", l.at(layout.CertFile(layout.APIServerStem))),
		flag("tls-cipher-suites", tlsCipherSuites),
		flag("tls-min-version", "VersionTLS12"),
		flag("tls-private-key-file", l.at(layout.KeyFile(layout.APIServerStem))),
	)
	if len(apiServers(c)) > 1 {
		// A stopping API server fails /readyz and takes its address
		// out of the kubernetes Service at once, but serves on for this
		// long: the endpoint's balancers find it down (HAProxy after
		// haproxyFall checks) and kube-proxy drops it before it stops
		// listening, and they hold a restarted one out until it is ready.
		// Without it, connections are refused while it restarts, and
		// balanced to it once it listens, before its authorizer has
		// synced (an admin's exec refused with 403).
		args = append(args, flag("shutdown-delay-duration", apiServerShutdownDelay.String()))
	}
	if c.Security.EncryptionAtRest {
		args = append(args, flag("encryption-provider-config", l.at(layout.EncryptionConfig)))
	}
	if a := c.Security.Audit; a.Enabled {
		args = append(args,
			flag("audit-log-maxage", strconv.Itoa(a.MaxAgeDays)),
			flag("audit-log-maxbackup", strconv.Itoa(a.MaxBackups)),
			flag("audit-log-maxsize", strconv.Itoa(a.MaxSizeMB)),
			flag("audit-log-path", l.at(layout.AuditLog)),
			flag("audit-policy-file", l.at(layout.AuditPolicy)))
	}
	sort.Strings(args)
	return args
}

// etcdServers are the etcd members an API server talks to. A stacked
// API server talks to its own node's member only, as kubeadm's stacked
// topology does: a member that dies takes its API server out of the
// endpoint's rotation (its /readyz fails) instead of stalling every API
// server's etcd client on the dead member until gRPC's keepalive gives
// it up (10 s), which a VIP's failover would wait for.
func etcdServers(c *ir.Cluster, n ir.Node) []string {
	if n.Runs(ir.ComponentEtcd) {
		for _, m := range c.Etcd.Members {
			if m.Node == n.Name {
				return []string{m.ClientURL()}
			}
		}
	}
	return c.Etcd.ClientURLs()
}

// controllerManagerArgs are kube-controller-manager's flags: node CIDR
// allocation from the pod CIDR, per-controller service-account
// credentials, CSR signing with the cluster CA.
func controllerManagerArgs(c *ir.Cluster, l placement) []string {
	kubeconfig := l.at(layout.ControllerManagerKubeconfig)
	args := []string{
		flag("allocate-node-cidrs", "true"),
		flag("authentication-kubeconfig", kubeconfig),
		flag("authorization-kubeconfig", kubeconfig),
		flag("bind-address", l.loopback.String()),
		flag("client-ca-file", l.at(layout.ClusterCACert)),
		flag("cluster-cidr", ir.Join(c.Network.PodCIDRs, ",")),
		flag("cluster-name", c.Name),
		flag("cluster-signing-cert-file", l.at(layout.ClusterSigningCACert)),
		flag("cluster-signing-key-file", l.at(layout.ClusterCAKey)),
		flag("controllers", "*,bootstrapsigner,tokencleaner"),
		flag("kubeconfig", kubeconfig),
		flag("leader-elect", "true"),
		flag("profiling", "false"),
		flag("requestheader-client-ca-file", l.at(layout.FrontProxyCACert)),
		flag("root-ca-file", l.at(layout.ClusterCACert)),
		flag("service-account-private-key-file", l.at(layout.ServiceAccountKey)),
		flag("service-cluster-ip-range", ir.Join(c.Network.ServiceCIDRs, ",")),
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
func schedulerArgs(l placement) []string {
	return []string{
		flag("authentication-kubeconfig", l.at(layout.SchedulerKubeconfig)),
		flag("authorization-kubeconfig", l.at(layout.SchedulerKubeconfig)),
		flag("bind-address", l.loopback.String()),
		flag("config", l.at(layout.SchedulerConfig)),
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
func kubeletArgs(n ir.Node, l placement) []string {
	args := []string{
		flag("config", l.at(layout.KubeletConfig)),
		flag("kubeconfig", l.at(layout.KubeletKubeconfig)),
		flag("hostname-override", n.Name),
		flag("node-ip", ir.Join(n.Addresses, ",")),
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

// initialState is etcd's --initial-cluster-state: new for the members
// that bootstrap the cluster, existing for one that joins it.
func initialState(m ir.EtcdMember) string {
	if m.Joining {
		return "existing"
	}
	return "new"
}
