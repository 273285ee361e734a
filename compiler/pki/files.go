package pki

import (
	"fmt"
	"github.com/kcompile/kcompile/layout"
	"io/fs"
	"path"
	"sort"

	"github.com/kcompile/kcompile/compiler/ir"
)

// File is one file of the issued PKI laid out for a node, in kubeadm's
// paths, or for the cluster tree when Node is empty.
type File struct {
	Node string
	// Path is relative to the node's root (or the cluster tree).
	Path string
	Data []byte
	Mode fs.FileMode
}

// Modes: private keys, and kubeconfigs that embed them, are readable by
// their owner only.
const (
	ModePublic  fs.FileMode = 0o644
	ModePrivate fs.FileMode = 0o600
)

// Files lays the material out: per node exactly what its components read,
// and nothing more (the etcd and front-proxy CA keys stay in the bundle;
// the cluster CA key goes to control-plane nodes, where the controller
// manager signs kubelet CSRs with it). The cluster tree holds the admin
// kubeconfigs and the CA certificate. Files are sorted by node, then path.
func Files(m *Material) ([]File, error) {
	c := m.Cluster
	b := m.Bundle
	// Each CA file is its authority's trust store: during a rotation it
	// holds the old and the new CA, the signer first. The
	// controller-manager signs with ca.key and cluster-signing-ca.crt,
	// the signer alone.
	caPEM := trustPEM(b, ClusterCA)
	etcdCAPEM := trustPEM(b, EtcdCA)
	frontProxyCAPEM := trustPEM(b, FrontProxyCA)
	caKey, err := encodeKey(b.Signer(ClusterCA).Key)
	if err != nil {
		return nil, err
	}
	saKey, err := encodeKey(b.ServiceAccountSigner())
	if err != nil {
		return nil, err
	}
	// The API servers verify tokens with every public key of the file.
	var saPub []byte
	for _, k := range b.ServiceAccountPublicKeys() {
		p, err := encodePublicKey(k)
		if err != nil {
			return nil, err
		}
		saPub = append(saPub, p...)
	}

	files := map[[2]string]File{}
	add := func(node, path string, data []byte, mode fs.FileMode) {
		files[[2]string{node, path}] = File{Node: node, Path: path, Data: data, Mode: mode}
	}
	for _, n := range c.Nodes {
		if n.RunsPods() || n.Runs(ir.ComponentAPIServer) {
			add(n.Name, layout.ClusterCACert, caPEM, ModePublic)
		}
		if n.Runs(ir.ComponentAPIServer) {
			add(n.Name, layout.ClusterCAKey, caKey, ModePrivate)
			add(n.Name, layout.ClusterSigningCACert, encodeCert(b.Signer(ClusterCA).Cert.Raw), ModePublic)
			add(n.Name, layout.FrontProxyCACert, frontProxyCAPEM, ModePublic)
			add(n.Name, layout.EtcdCACert, etcdCAPEM, ModePublic)
			add(n.Name, layout.ServiceAccountKey, saKey, ModePrivate)
			add(n.Name, layout.ServiceAccountPubKey, saPub, ModePublic)
		}
		if n.Runs(ir.ComponentEtcd) {
			add(n.Name, layout.EtcdCACert, etcdCAPEM, ModePublic)
		}
	}
	add("", "pki/ca.crt", caPEM, ModePublic)
	for _, l := range m.Leaves {
		if l.File != "" {
			add(l.Node, layout.CertFile(l.File), l.CertPEM, ModePublic)
			add(l.Node, layout.KeyFile(l.File), l.KeyPEM, ModePrivate)
		}
		if l.Kubeconfig == nil {
			continue
		}
		kc, err := kubeconfig(c.Name, caPEM, l)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig of %s: %w", l.ID, err)
		}
		switch l.Name {
		case "admin":
			// Every control-plane node has it, as kubeadm does, and so
			// does the cluster tree, for the operator.
			for _, n := range c.Nodes {
				if n.Runs(ir.ComponentAPIServer) {
					add(n.Name, l.Kubeconfig.Path, kc, ModePrivate)
				}
			}
			add("", path.Base(layout.AdminKubeconfig), kc, ModePrivate)
		case "super-admin":
			// A break-glass credential that bypasses RBAC: never on a
			// node.
			add("", path.Base(layout.SuperAdminKubeconfig), kc, ModePrivate)
		default:
			add(l.Node, l.Kubeconfig.Path, kc, ModePrivate)
		}
	}
	out := make([]File, 0, len(files))
	for _, f := range files {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].Path < out[j].Path
	})
	return out, nil
}

// keyFiles is where Files puts private keys, by node and path: the
// cluster CA and service-account keys on control-plane nodes, where the
// controller manager and the API server use them, and each leaf's key
// beside its certificate. The etcd and front-proxy CA keys are nowhere.
// `pki verify` holds a tree to it.
func keyFiles(c *ir.Cluster) map[[2]string]bool {
	out := map[[2]string]bool{}
	for _, n := range c.Nodes {
		if n.Runs(ir.ComponentAPIServer) {
			out[[2]string{n.Name, layout.ClusterCAKey}] = true
			out[[2]string{n.Name, layout.ServiceAccountKey}] = true
		}
	}
	for _, cert := range Catalogue(c) {
		if cert.File != "" {
			out[[2]string{cert.Node, layout.KeyFile(cert.File)}] = true
		}
	}
	return out
}
