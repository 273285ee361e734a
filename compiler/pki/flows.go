package pki

import "github.com/kcompile/kcompile/compiler/ir"

// Flow is one TLS connection the cluster depends on: who dials whom, by
// which name, with which certificates, and which identity the server must
// see. The catalogue is checked against the flows, and the tests make a
// real handshake for each.
type Flow struct {
	// Kind names the flow, e.g. "kubelet→apiserver".
	Kind string
	// Client is the client certificate's ID; empty for clients that
	// authenticate otherwise (service-account tokens).
	Client string
	// Server is the server certificate's ID; empty for servers outside the
	// catalogue (aggregated API servers).
	Server string
	// ServerName is the host the client dials and verifies the server
	// certificate against.
	ServerName string
	// ServerCA verifies the server; ClientCA verifies the client.
	ServerCA, ClientCA Authority
	// User and Groups are the identity the server must derive from the
	// client certificate (CN and O) for authorization to work.
	User   string
	Groups []string
	// Setting is the spec path a broken flow is blamed on.
	Setting string
}

// Flows lists every TLS flow of a cluster in a stable order.
func Flows(c *ir.Cluster) []Flow {
	var out []Flow
	endpoint := c.Endpoint.Host
	// Node-level clients dial the node-local proxy in mode nodeLocal.
	nodeHost := endpoint
	if c.Endpoint.Mode == ir.EndpointNodeLocal {
		nodeHost = "127.0.0.1"
	}
	var apiservers, etcds []ir.Node
	members := map[string]ir.EtcdMember{}
	for _, m := range c.Etcd.Members {
		members[m.Node] = m
	}
	for _, n := range c.Nodes {
		if n.Runs(ir.ComponentAPIServer) {
			apiservers = append(apiservers, n)
		}
		if _, ok := members[n.Name]; ok && n.Runs(ir.ComponentEtcd) {
			etcds = append(etcds, n)
		}
	}
	for _, a := range apiservers {
		srv := "apiserver@" + a.Name
		// The endpoint may send any client to any API server.
		for _, n := range c.Nodes {
			if !n.RunsPods() {
				continue
			}
			out = append(out, Flow{Kind: "kubelet→apiserver", Client: "kubelet-client@" + n.Name, Server: srv, ServerName: nodeHost,
				ServerCA: ClusterCA, ClientCA: ClusterCA, User: nodeUserPrefix + n.Name, Groups: []string{groupNodes}, Setting: "controlPlane.endpoint"})
			if n.Runs(ir.ComponentKubeProxy) {
				out = append(out, Flow{Kind: "kube-proxy→apiserver", Client: "kube-proxy@" + n.Name, Server: srv, ServerName: nodeHost,
					ServerCA: ClusterCA, ClientCA: ClusterCA, User: userKubeProxy, Setting: "controlPlane.endpoint"})
			}
			if c.Network.CNI.Plugin == "calico" {
				out = append(out, Flow{Kind: "calico-cni→apiserver", Client: "calico-cni@" + n.Name, Server: srv, ServerName: nodeHost,
					ServerCA: ClusterCA, ClientCA: ClusterCA, User: userCalicoCNI, Setting: "controlPlane.endpoint"})
			}
			// The API server dials kubelets by their InternalIP.
			out = append(out, Flow{Kind: "apiserver→kubelet", Client: "apiserver-kubelet-client@" + a.Name, Server: "kubelet-serving@" + n.Name,
				ServerName: n.Address().String(), ServerCA: ClusterCA, ClientCA: ClusterCA,
				User: APIServerKubeletClientUser, Setting: "nodes." + n.Name + ".address"})
		}
		// The endpoint's HAProxy checks every API server's /readyz, and
		// verifies the certificate's DNS name "kubernetes" (HAProxy
		// matches no IP SAN).
		for _, n := range c.Nodes {
			if c.Endpoint.ProxiedOn(n) {
				out = append(out, Flow{Kind: "endpoint-health→apiserver", Client: "endpoint-health@" + n.Name, Server: srv, ServerName: "kubernetes",
					ServerCA: ClusterCA, ClientCA: ClusterCA, User: userEndpointHealth, Setting: "controlPlane.endpoint.mode"})
			}
		}
		local := a.Address().String()
		out = append(out,
			Flow{Kind: "controller-manager→apiserver", Client: "controller-manager@" + a.Name, Server: srv, ServerName: local,
				ServerCA: ClusterCA, ClientCA: ClusterCA, User: userControllerManager, Setting: "nodes." + a.Name + ".address"},
			Flow{Kind: "scheduler→apiserver", Client: "scheduler@" + a.Name, Server: srv, ServerName: local,
				ServerCA: ClusterCA, ClientCA: ClusterCA, User: userScheduler, Setting: "nodes." + a.Name + ".address"},
			Flow{Kind: "admin→apiserver", Client: "admin", Server: srv, ServerName: endpoint,
				ServerCA: ClusterCA, ClientCA: ClusterCA, User: userAdmin, Groups: []string{groupClusterAdmins}, Setting: "controlPlane.endpoint"},
			Flow{Kind: "super-admin→apiserver", Client: "super-admin", Server: srv, ServerName: endpoint,
				ServerCA: ClusterCA, ClientCA: ClusterCA, User: userSuperAdmin, Groups: []string{groupMasters}, Setting: "controlPlane.endpoint"},
			Flow{Kind: "front-proxy→aggregated-apiserver", Client: "front-proxy-client@" + a.Name,
				ClientCA: FrontProxyCA, User: frontProxyClientName, Setting: "controlPlane.nodes"},
		)
		// In-cluster clients reach the API through the kubernetes
		// Service, by name or by address, with service-account tokens.
		for _, name := range []string{"kubernetes.default.svc", "kubernetes.default.svc." + c.Network.Domain} {
			out = append(out, Flow{Kind: "pod→apiserver", Server: srv, ServerName: name, ServerCA: ClusterCA, Setting: "network.domain"})
		}
		for _, ip := range c.Network.FirstServiceIPs {
			out = append(out, Flow{Kind: "pod→apiserver", Server: srv, ServerName: ip.String(), ServerCA: ClusterCA, Setting: "network.serviceCIDR"})
		}
		for _, e := range etcds {
			m := members[e.Name]
			out = append(out, Flow{Kind: "apiserver→etcd", Client: "apiserver-etcd-client@" + a.Name, Server: "etcd-server@" + e.Name,
				ServerName: m.Address.String(), ServerCA: EtcdCA, ClientCA: EtcdCA, User: "kube-apiserver-etcd-client", Setting: "etcd.members"})
		}
	}
	for _, a := range etcds {
		out = append(out, Flow{Kind: "etcd-healthcheck→etcd", Client: "etcd-healthcheck-client@" + a.Name, Server: "etcd-server@" + a.Name,
			ServerName: "127.0.0.1", ServerCA: EtcdCA, ClientCA: EtcdCA, User: "kube-etcd-healthcheck-client", Setting: "etcd.members"})
		for _, b := range etcds {
			if a.Name == b.Name {
				continue
			}
			out = append(out, Flow{Kind: "etcd-peer→etcd-peer", Client: "etcd-peer@" + a.Name, Server: "etcd-peer@" + b.Name,
				ServerName: members[b.Name].Address.String(), ServerCA: EtcdCA, ClientCA: EtcdCA, User: members[a.Name].Name, Setting: "etcd.members"})
		}
	}
	return out
}
