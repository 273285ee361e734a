package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcompile/kcompile/compiler/ir"
)

// Problem is one finding of Verify, at a file of the tree.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (p Problem) String() string { return p.Path + ": " + p.Message }

// Verify checks a written tree (OUT/<target>, holding nodes/<node>/... and
// cluster/...): every certificate chains to the CA its consumers trust and
// is valid at now, every key belongs to its certificate, every kubeconfig
// loads with client-go and its credentials chain, private material is
// 0600, no private key lies where the catalogue puts none, and no node
// holds a certificate in another node's name. With a cluster it also
// checks that each node has exactly the certificates of the catalogue,
// with the subjects, SANs and server URLs of the topology. Messages never
// quote key material.
func Verify(root string, c *ir.Cluster, now time.Time) ([]Problem, error) {
	nodes, err := os.ReadDir(filepath.Join(root, "nodes"))
	if err != nil {
		return nil, fmt.Errorf("%s is not a kcompile tree: %w", root, err)
	}
	var problems []Problem
	add := func(p, format string, args ...any) {
		rel, _ := filepath.Rel(root, p)
		problems = append(problems, Problem{Path: filepath.ToSlash(rel), Message: fmt.Sprintf(format, args...)})
	}
	trees := []string{filepath.Join(root, "cluster")}
	names := map[string]bool{}
	for _, n := range nodes {
		if n.IsDir() {
			trees = append(trees, filepath.Join(root, "nodes", n.Name()))
			names[n.Name()] = true
		}
	}
	for _, dir := range trees {
		if err := verifyNode(dir, now, add); err != nil {
			return nil, err
		}
	}
	if err := verifyKeyPlacement(root, trees, c, add); err != nil {
		return nil, err
	}
	if c != nil {
		verifyTopology(root, c, add)
	} else if err := verifyNodeNames(root, names, add); err != nil {
		// Without the spec, the tree's own node directories say which
		// names are whose; with it, verifyTopology compares every
		// certificate with the catalogue and says the same.
		return nil, err
	}
	sort.Slice(problems, func(i, j int) bool {
		if problems[i].Path != problems[j].Path {
			return problems[i].Path < problems[j].Path
		}
		return problems[i].Message < problems[j].Message
	})
	return problems, nil
}

// caFor names the CA file a certificate at rel chains to, as its
// consumers are configured.
func caFor(rel string) string {
	switch {
	case strings.HasPrefix(rel, etcdPKIDir), rel == pkiDir+"apiserver-etcd-client.crt":
		return etcdPKIDir + "ca.crt"
	case rel == pkiDir+"front-proxy-client.crt":
		return pkiDir + "front-proxy-ca.crt"
	}
	return pkiDir + "ca.crt"
}

func isCAFile(rel string) bool {
	return strings.HasSuffix(rel, "ca.crt") || rel == "pki/ca.crt"
}

// isKubeconfig recognises the kubeconfigs of the layout, on a node (rel
// to its root) or in the cluster tree (a top-level .conf).
func isKubeconfig(rel string) bool {
	rel = filepath.ToSlash(rel)
	if i := strings.Index(rel, "/nodes/"); i >= 0 {
		// An absolute path inside a tree: make it node-relative.
		rest := rel[i+len("/nodes/"):]
		if j := strings.Index(rest, "/"); j >= 0 {
			rel = rest[j+1:]
		}
	} else if i := strings.LastIndex(rel, "/cluster/"); i >= 0 {
		rel = rel[i+len("/cluster/"):]
	}
	switch {
	case !strings.Contains(rel, "/") && strings.HasSuffix(rel, ".conf"):
		return true
	case strings.HasPrefix(rel, kubeconfigs) && strings.HasSuffix(rel, ".conf") && !strings.Contains(strings.TrimPrefix(rel, kubeconfigs), "/"):
		return true
	}
	return rel == "var/lib/kube-proxy/kubeconfig.conf" || rel == "etc/cni/net.d/calico-kubeconfig"
}

func verifyNode(dir string, now time.Time, add func(p, format string, args ...any)) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		private := bytes.Contains(data, []byte("PRIVATE KEY")) || isKubeconfig(rel)
		if private && info.Mode().Perm() != ModePrivate {
			add(p, "holds private key material but has mode %04o; it must be 0600", info.Mode().Perm())
		}
		if !private && info.Mode().Perm()&0o022 != 0 {
			add(p, "is writable by group or others (mode %04o)", info.Mode().Perm())
		}
		switch {
		case strings.HasSuffix(rel, ".crt") && !isCAFile(rel):
			verifyCertFile(dir, rel, now, add)
		case isCAFile(rel):
			cert, err := readCert(p)
			if err != nil {
				add(p, "%v", err)
			} else if !cert.IsCA {
				add(p, "is not a CA certificate")
			} else if now.After(cert.NotAfter) {
				add(p, "CA expired on %s", cert.NotAfter.Format(time.DateOnly))
			}
		case isKubeconfig(rel):
			verifyKubeconfig(p, data, now, add)
		}
		return nil
	})
}

func verifyCertFile(dir, rel string, now time.Time, add func(p, format string, args ...any)) {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	cert, err := readCert(p)
	if err != nil {
		add(p, "%v", err)
		return
	}
	caPath := filepath.Join(dir, filepath.FromSlash(caFor(rel)))
	ca, err := readCert(caPath)
	if err != nil {
		add(p, "cannot be verified: its CA %s is missing on this node", caFor(rel))
	} else if err := verifyChain(cert, ca, now); err != nil {
		add(p, "does not verify against %s: %v", caFor(rel), err)
	}
	keyPath := strings.TrimSuffix(p, ".crt") + ".key"
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		add(p, "has no key file %s", filepath.Base(keyPath))
		return
	}
	if _, err := tls.X509KeyPair(encodeCert(cert.Raw), keyPEM); err != nil {
		add(keyPath, "does not belong to %s", filepath.Base(p))
	}
}

func verifyKubeconfig(p string, data []byte, now time.Time, add func(p, format string, args ...any)) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		add(p, "does not load as a kubeconfig: %v", err)
		return
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		add(p, "has no current context")
		return
	}
	cluster, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if cluster == nil || user == nil {
		add(p, "current context %q names a missing cluster or user", cfg.CurrentContext)
		return
	}
	ca, err := parseCertPEM(cluster.CertificateAuthorityData)
	if err != nil {
		add(p, "certificate-authority-data: %v", err)
		return
	}
	cert, err := parseCertPEM(user.ClientCertificateData)
	if err != nil {
		add(p, "client-certificate-data: %v", err)
		return
	}
	if _, err := tls.X509KeyPair(user.ClientCertificateData, user.ClientKeyData); err != nil {
		add(p, "client key does not belong to its client certificate")
	}
	if err := verifyChain(cert, ca, now); err != nil {
		add(p, "client certificate does not verify against the embedded CA: %v", err)
	}
}

func verifyChain(cert, ca *x509.Certificate, now time.Time) error {
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	_, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// verifyTopology compares the tree with the catalogue of the cluster.
func verifyTopology(root string, c *ir.Cluster, add func(p, format string, args ...any)) {
	nodeNames := map[string]string{}
	for _, n := range c.Nodes {
		nodeNames[n.Name] = n.Name
		for _, a := range n.Addresses {
			nodeNames[a.String()] = n.Name
		}
	}
	for _, cert := range Catalogue(c) {
		var files []string
		switch {
		case cert.Name == "admin":
			files = append(files, "cluster/admin.conf")
			for _, n := range c.Nodes {
				if n.Runs(ir.ComponentAPIServer) {
					files = append(files, path.Join("nodes", n.Name, cert.Kubeconfig.Path))
				}
			}
		case cert.Name == "super-admin":
			files = append(files, "cluster/super-admin.conf")
		case cert.File != "":
			files = append(files, path.Join("nodes", cert.Node, cert.File+".crt"))
		default:
			files = append(files, path.Join("nodes", cert.Node, cert.Kubeconfig.Path))
		}
		for _, f := range files {
			p := filepath.Join(root, filepath.FromSlash(f))
			got, server, err := readLeaf(p)
			if err != nil {
				add(p, "%s: %v", cert.ID, err)
				continue
			}
			compareCert(p, cert, got, nodeNames, add)
			if cert.Kubeconfig != nil && server != cert.Kubeconfig.Server {
				add(p, "server is %s but its consumer must dial %s", server, cert.Kubeconfig.Server)
			}
		}
	}
}

// readLeaf reads a certificate file, or the client certificate and server
// of a kubeconfig.
func readLeaf(p string) (*x509.Certificate, string, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, "", errors.New("missing")
	}
	if !isKubeconfig(p) {
		cert, err := parseCertPEM(data)
		return cert, "", err
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, "", err
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || cfg.Clusters[ctx.Cluster] == nil || cfg.AuthInfos[ctx.AuthInfo] == nil {
		return nil, "", errors.New("incomplete kubeconfig")
	}
	cert, err := parseCertPEM(cfg.AuthInfos[ctx.AuthInfo].ClientCertificateData)
	return cert, cfg.Clusters[ctx.Cluster].Server, err
}

// compareCert compares a certificate of the tree with its catalogue
// entry. owners maps every node name and address of the topology to its
// node, so that a certificate in another node's name says so.
func compareCert(p string, want Cert, got *x509.Certificate, owners map[string]string, add func(p, format string, args ...any)) {
	if got.Subject.CommonName != want.CommonName || !slices.Equal(got.Subject.Organization, want.Organization) {
		if other, ok := otherNodeCN(got.Subject.CommonName, want.Node); ok {
			add(p, "is node %s's certificate (CN=%s), not %s's: %s would act as %s", other, got.Subject.CommonName, want.Node, want.Node, other)
		} else {
			add(p, "subject is CN=%s O=%v, want CN=%s O=%v", got.Subject.CommonName, got.Subject.Organization, want.CommonName, want.Organization)
		}
	}
	var gotSANs, wantSANs []string
	gotSANs = append(gotSANs, got.DNSNames...)
	for _, ip := range got.IPAddresses {
		gotSANs = append(gotSANs, normalizeIP(ip))
	}
	wantSANs = append(wantSANs, want.DNSNames...)
	for _, ip := range want.IPs {
		wantSANs = append(wantSANs, ip.String())
	}
	for _, s := range wantSANs {
		if !slices.Contains(gotSANs, s) {
			add(p, "lacks SAN %s, which its clients dial", s)
		}
	}
	for _, s := range gotSANs {
		switch other, ok := owners[s]; {
		case slices.Contains(wantSANs, s):
		case ok && want.Node != "" && other != want.Node:
			add(p, "has SAN %s, which names node %s, not %s: %s could impersonate %s", s, other, want.Node, want.Node, other)
		default:
			add(p, "has SAN %s, which the topology does not have", s)
		}
	}
	wantServer, wantClient := want.Server, want.Client
	hasServer := slices.Contains(got.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	hasClient := slices.Contains(got.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	if hasServer != wantServer || hasClient != wantClient {
		add(p, "extended key usages are server=%v client=%v, want server=%v client=%v", hasServer, hasClient, wantServer, wantClient)
	}
}

func normalizeIP(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.String()
}

func readCert(p string) (*x509.Certificate, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, errors.New("missing")
	}
	return parseCertPEM(data)
}

func parseCertPEM(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// otherNodeCN reports the node a node identity (CN=system:node:<name>)
// names when it is not node, the node the certificate lies on.
func otherNodeCN(cn, node string) (string, bool) {
	name, ok := strings.CutPrefix(cn, nodeUserPrefix)
	if !ok || node == "" || name == node {
		return "", false
	}
	return name, true
}

// verifyNodeNames finds, without the spec, certificates that name another
// node of the tree: a kubelet identity (CN=system:node:<name>) or a DNS
// SAN that is another node's name. Such a certificate lets the node it
// lies on act as the other one.
func verifyNodeNames(root string, names map[string]bool, add func(p, format string, args ...any)) error {
	for _, node := range slices.Sorted(maps.Keys(names)) {
		dir := filepath.Join(root, "nodes", node)
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			rel = filepath.ToSlash(rel)
			if isCAFile(rel) || (!strings.HasSuffix(rel, ".crt") && !isKubeconfig(rel)) {
				return nil
			}
			cert, _, err := readLeaf(p)
			if err != nil {
				// verifyNode reports unreadable certificates.
				return nil
			}
			if other, ok := otherNodeCN(cert.Subject.CommonName, node); ok {
				add(p, "is node %s's certificate (CN=%s), not %s's: %s would act as %s", other, cert.Subject.CommonName, node, node, other)
			}
			for _, s := range cert.DNSNames {
				if s != node && names[s] {
					add(p, "has SAN %s, which names node %s, not %s: %s could impersonate %s", s, s, node, node, s)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// verifyKeyPlacement finds private keys where the catalogue puts none.
// Keys are recognised by content, so that a CA key copied under another
// name is still the CA's: the etcd and front-proxy CA keys never leave
// the secrets bundle, the cluster CA and service-account keys belong on
// control-plane nodes only, and every other key beside its certificate.
// With a cluster, the catalogue says exactly which keys go where.
func verifyKeyPlacement(root string, trees []string, c *ir.Cluster, add func(p, format string, args ...any)) error {
	owners := keyOwners(trees)
	var expected map[[2]string]bool
	if c != nil {
		expected = keyFiles(c)
	}
	for _, dir := range trees {
		node := ""
		if filepath.Base(filepath.Dir(dir)) == "nodes" {
			node = filepath.Base(dir)
		}
		_, err := os.Stat(filepath.Join(dir, filepath.FromSlash(pkiDir+"apiserver.crt")))
		controlPlane := err == nil
		err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && p == dir {
				return fs.SkipDir
			}
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			rel = filepath.ToSlash(rel)
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if !strings.HasSuffix(rel, ".key") && !bytes.Contains(data, []byte("PRIVATE KEY-----")) {
				return nil
			}
			owner := ""
			if key, err := parseKey(data); err == nil {
				if der, err := x509.MarshalPKIXPublicKey(key.Public()); err == nil {
					owner = owners[string(der)]
				}
			}
			where := "where the catalogue puts none"
			if node != "" && expected == nil && !controlPlane {
				where = "on a node that runs no API server"
			}
			switch {
			case owner == string(EtcdCA):
				add(p, "is the etcd CA's private key, which never leaves the secrets bundle: with it anyone can mint a client certificate etcd accepts, and read every Secret; delete it")
			case owner == string(FrontProxyCA):
				add(p, "is the front-proxy CA's private key, which never leaves the secrets bundle: with it anyone can impersonate any user to aggregated API servers; delete it")
			case expected != nil && expected[[2]string{node, rel}]:
			case owner == string(ClusterCA) && (expected != nil || !controlPlane || rel != pkiDir+"ca.key"):
				add(p, "is the cluster CA's private key, %s: with it anyone can sign any identity, system:masters included; delete it", where)
			case owner == serviceAccount && (expected != nil || !controlPlane || rel != pkiDir+"sa.key"):
				add(p, "is the service-account signing key, %s: with it anyone can forge any service account's token; delete it", where)
			case owner == string(ClusterCA) || owner == serviceAccount:
			case expected != nil:
				add(p, "holds a private key where the catalogue puts none; delete it, and find out how it got there")
			case node == "":
				add(p, "holds a private key, and the cluster tree has none but those in admin.conf and super-admin.conf; delete it")
			default:
				crt := strings.TrimSuffix(rel, ".key") + ".crt"
				if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(crt))); err != nil || !strings.HasSuffix(rel, ".key") {
					add(p, "holds a private key that belongs to no certificate beside it; delete it, and find out how it got there")
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// serviceAccount names the service-account key among the CAs' in
// keyOwners.
const serviceAccount = "service-account"

// keyOwners maps the public keys of the tree's CA certificates and
// sa.pub files (PKIX DER) to whose they are.
func keyOwners(trees []string) map[string]string {
	out := map[string]string{}
	for _, dir := range trees {
		for rel, owner := range map[string]string{
			pkiDir + "ca.crt": string(ClusterCA), "pki/ca.crt": string(ClusterCA), etcdPKIDir + "ca.crt": string(EtcdCA),
			pkiDir + "front-proxy-ca.crt": string(FrontProxyCA), pkiDir + "sa.pub": serviceAccount,
		} {
			data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
			if err != nil {
				continue
			}
			block, _ := pem.Decode(data)
			if block == nil {
				continue
			}
			der := block.Bytes
			if block.Type == "CERTIFICATE" {
				cert, err := x509.ParseCertificate(block.Bytes)
				if err != nil {
					continue
				}
				der = cert.RawSubjectPublicKeyInfo
			}
			out[string(der)] = owner
		}
	}
	return out
}
