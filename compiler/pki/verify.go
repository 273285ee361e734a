package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/kcompile/kcompile/layout"
	"io/fs"
	"maps"
	"net"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
)

// Problem is one finding of Verify, at a file of the tree.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (p Problem) String() string { return p.Path + ": " + p.Message }

// Verify checks a built tree (OUT/<target>, holding nodes/<node>/... and
// cluster/...; nothing else at its root is looked at, such as the manifest
// a build writes there): every certificate chains to the CA its consumers
// trust and is valid at now, every key belongs to its certificate, every
// kubeconfig loads with client-go and its credentials chain, private
// material is 0600, no private key (PEM of any type, or DER) and no
// kubeconfig carrying credentials lies where the catalogue puts none, and
// no node holds a certificate in another node's name. Files over 1 MiB,
// and files that are not regular, are not read. With a cluster it
// also checks that each node has exactly the certificates of the
// catalogue, with the subjects, SANs and server URLs of the topology.
// Messages never quote key material. Problem paths, like the paths in
// errors, are relative to tree.
func Verify(tree fs.FS, c *ir.Cluster, now time.Time) ([]Problem, error) {
	nodes, err := fs.ReadDir(tree, "nodes")
	if err != nil {
		return nil, fmt.Errorf("not a kcompile tree: %w", err)
	}
	var problems []Problem
	add := func(p, format string, args ...any) {
		problems = append(problems, Problem{Path: p, Message: fmt.Sprintf(format, args...)})
	}
	trees := []string{"cluster"}
	names := map[string]bool{}
	for _, n := range nodes {
		if n.IsDir() {
			trees = append(trees, path.Join("nodes", n.Name()))
			names[n.Name()] = true
		}
	}
	owners := keyOwners(tree, trees)
	kubeconfigs := map[string]kubeconfigCredentials{}
	for _, dir := range trees {
		if err := verifyNode(tree, dir, now, kubeconfigs, add); err != nil {
			return nil, err
		}
	}
	if err := verifyKeyPlacement(tree, trees, c, owners, kubeconfigs, add); err != nil {
		return nil, err
	}
	if c != nil {
		verifyTopology(tree, c, add)
	} else if err := verifyNodeNames(tree, names, add); err != nil {
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
	case strings.HasPrefix(rel, layout.EtcdPKIDir), rel == layout.CertFile(layout.APIServerEtcdClientStem):
		return layout.EtcdCACert
	case rel == layout.CertFile(layout.FrontProxyClientStem):
		return layout.FrontProxyCACert
	}
	return layout.ClusterCACert
}

func isCAFile(rel string) bool {
	return strings.HasSuffix(rel, "ca.crt") || rel == "pki/ca.crt"
}

// isKubeconfig recognises the kubeconfigs of the layout, on a node (rel
// to its root) or in the cluster tree (a top-level .conf).
func isKubeconfig(rel string) bool {
	switch {
	case !strings.Contains(rel, "/") && strings.HasSuffix(rel, ".conf"):
		return true
	case strings.HasPrefix(rel, layout.KubernetesDir) && strings.HasSuffix(rel, ".conf") && !strings.Contains(strings.TrimPrefix(rel, layout.KubernetesDir), "/"):
		return true
	}
	return rel == layout.KubeProxyKubeconfig || rel == layout.CalicoKubeconfig
}

// verifyNode checks the files of one node's tree (or the cluster tree).
// It records the credentials of the kubeconfigs it decodes in
// kubeconfigs, by path.
func verifyNode(tree fs.FS, dir string, now time.Time, kubeconfigs map[string]kubeconfigCredentials, add func(p, format string, args ...any)) error {
	if _, err := fs.Stat(tree, dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return fs.WalkDir(tree, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(p, dir+"/")
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := readBounded(tree, p, d)
		if errors.Is(err, errNotSniffed) {
			// Too large, or no regular file, to be read whole: no
			// certificate, key or kubeconfig of the layout is either.
			if strings.HasSuffix(rel, ".crt") || strings.HasSuffix(rel, ".key") || isKubeconfig(rel) {
				add(p, "is no regular file of at most 1 MiB, as every certificate, key and kubeconfig is: not read")
			} else if info.Mode().IsRegular() && info.Mode().Perm()&0o022 != 0 {
				add(p, "is writable by group or others (mode %04o)", info.Mode().Perm())
			}
			return nil
		}
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
			verifyCertFile(tree, dir, rel, now, add)
		case isCAFile(rel):
			cert, err := parseCertPEM(data)
			if err != nil {
				add(p, "%v", err)
			} else if !cert.IsCA {
				add(p, "is not a CA certificate")
			} else if now.After(cert.NotAfter) {
				add(p, "CA expired on %s", cert.NotAfter.Format(time.DateOnly))
			}
		case isKubeconfig(rel):
			kubeconfigs[p] = verifyKubeconfig(p, data, now, add)
		}
		return nil
	})
}

func verifyCertFile(tree fs.FS, dir, rel string, now time.Time, add func(p, format string, args ...any)) {
	p := path.Join(dir, rel)
	cert, err := readCert(tree, p)
	if err != nil {
		add(p, "%v", err)
		return
	}
	ca, err := readCert(tree, path.Join(dir, caFor(rel)))
	if err != nil {
		add(p, "cannot be verified: its CA %s is missing on this node", caFor(rel))
	} else if err := verifyChain(cert, ca, now); err != nil {
		add(p, "does not verify against %s: %v", caFor(rel), err)
	}
	keyPath := strings.TrimSuffix(p, ".crt") + ".key"
	keyPEM, err := readBounded(tree, keyPath, nil)
	if err != nil {
		add(p, "has no key file %s", path.Base(keyPath))
		return
	}
	if _, err := tls.X509KeyPair(encodeCert(cert.Raw), keyPEM); err != nil {
		add(keyPath, "does not belong to %s", path.Base(p))
	}
}

// verifyKubeconfig checks a kubeconfig at a path of the layout, and
// returns its users that carry credentials.
func verifyKubeconfig(p string, data []byte, now time.Time, add func(p, format string, args ...any)) kubeconfigCredentials {
	cfg, err := LoadKubeconfig(data)
	if err != nil {
		add(p, "does not load as a kubeconfig: %v", err)
		return kubeconfigCredentials{}
	}
	creds := credentialUsers(cfg)
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		add(p, "has no current context")
		return creds
	}
	cluster, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if cluster == nil || user == nil {
		add(p, "current context %q names a missing cluster or user", cfg.CurrentContext)
		return creds
	}
	ca, err := parseCertPEM(cluster.CertificateAuthorityData)
	if err != nil {
		add(p, "certificate-authority-data: %v", err)
		return creds
	}
	cert, err := parseCertPEM(user.ClientCertificateData)
	if err != nil {
		add(p, "client-certificate-data: %v", err)
		return creds
	}
	if _, err := tls.X509KeyPair(user.ClientCertificateData, user.ClientKeyData); err != nil {
		add(p, "client key does not belong to its client certificate")
	}
	if err := verifyChain(cert, ca, now); err != nil {
		add(p, "client certificate does not verify against the embedded CA: %v", err)
	}
	return creds
}

func verifyChain(cert, ca *x509.Certificate, now time.Time) error {
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	_, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// verifyTopology compares the tree with the catalogue of the cluster.
func verifyTopology(tree fs.FS, c *ir.Cluster, add func(p, format string, args ...any)) {
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
			files = append(files, path.Join("nodes", cert.Node, layout.CertFile(cert.File)))
		default:
			files = append(files, path.Join("nodes", cert.Node, cert.Kubeconfig.Path))
		}
		for _, p := range files {
			// A certificate without a file of its own is in its kubeconfig.
			got, server, err := readLeaf(tree, p, cert.File == "")
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
func readLeaf(tree fs.FS, p string, kubeconfig bool) (*x509.Certificate, string, error) {
	data, err := readBounded(tree, p, nil)
	if errors.Is(err, errNotSniffed) {
		return nil, "", err
	}
	if err != nil {
		return nil, "", errors.New("missing")
	}
	if !kubeconfig {
		cert, err := parseCertPEM(data)
		return cert, "", err
	}
	cfg, err := LoadKubeconfig(data)
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

func readCert(tree fs.FS, p string) (*x509.Certificate, error) {
	data, err := readBounded(tree, p, nil)
	if errors.Is(err, errNotSniffed) {
		return nil, err
	}
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
func verifyNodeNames(tree fs.FS, names map[string]bool, add func(p, format string, args ...any)) error {
	for _, node := range slices.Sorted(maps.Keys(names)) {
		dir := path.Join("nodes", node)
		err := fs.WalkDir(tree, dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel := strings.TrimPrefix(p, dir+"/")
			if isCAFile(rel) || (!strings.HasSuffix(rel, ".crt") && !isKubeconfig(rel)) {
				return nil
			}
			cert, _, err := readLeaf(tree, p, isKubeconfig(rel))
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

// verifyKeyPlacement finds private keys and credential-bearing
// kubeconfigs where the catalogue puts none. Every regular file of the
// tree up to maxSniff is sniffed, whatever its name: PEM keys of every
// type, DER keys in PKCS #8, PKCS #1 and SEC 1, and kubeconfigs (as
// kubectl decodes them) whose users carry a client key, a token, a
// password or a path to one. Keys are recognised by content, so that a
// CA key copied under another name is still the CA's: the etcd and
// front-proxy CA keys never leave the secrets bundle, the cluster CA and
// service-account keys belong on control-plane nodes only, and every
// other key beside its certificate. With a cluster, the catalogue says
// exactly which keys and kubeconfigs go where; without it, the layout
// does, and a node holding apiserver.crt is a control-plane node.
func verifyKeyPlacement(tree fs.FS, trees []string, c *ir.Cluster, owners map[string]string, kubeconfigs map[string]kubeconfigCredentials, add func(p, format string, args ...any)) error {
	var expected, expectedKubeconfigs map[[2]string]bool
	apiServers := map[string]bool{}
	if c != nil {
		expected = keyFiles(c)
		expectedKubeconfigs = kubeconfigFiles(c)
		for _, n := range c.Nodes {
			apiServers[n.Name] = n.Runs(ir.ComponentAPIServer)
		}
	}
	for _, dir := range trees {
		node := ""
		if n, ok := strings.CutPrefix(dir, "nodes/"); ok {
			node = n
		}
		_, err := fs.Stat(tree, path.Join(dir, layout.CertFile(layout.APIServerStem)))
		controlPlane := err == nil
		runsAPIServer := controlPlane
		if c != nil {
			runsAPIServer = apiServers[node]
		}
		err = fs.WalkDir(tree, dir, func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && p == dir {
				return fs.SkipDir
			}
			if err != nil || d.IsDir() {
				return err
			}
			rel := strings.TrimPrefix(p, dir+"/")
			data, err := readBounded(tree, p, d)
			if errors.Is(err, errNotSniffed) {
				return nil
			}
			if err != nil {
				return err
			}
			kubeconfigHere := layoutKubeconfig(node, rel, controlPlane)
			if c != nil {
				kubeconfigHere = expectedKubeconfigs[[2]string{node, rel}]
			}
			creds, ok := kubeconfigs[p]
			if !ok {
				creds = sniffKubeconfig(data)
			}
			verifyKubeconfigCredentials(p, node, rel, creds, owners, kubeconfigHere, c != nil, runsAPIServer, add)
			keys := sniffKeys(data)
			if len(keys) == 0 && strings.HasSuffix(rel, ".key") {
				keys = append(keys, foundKey{form: "named .key, in no encoding Verify recognises"})
			}
			keyHere := expected != nil && expected[[2]string{node, rel}]
			where := "where the catalogue puts none"
			if node != "" && expected == nil && !controlPlane {
				where = "on a node that runs no API server"
			}
			for i, key := range keys {
				owner := ownerOf(key, owners)
				switch {
				case owner == string(EtcdCA):
					add(p, "is the etcd CA's private key, which never leaves the secrets bundle: with it anyone can mint a client certificate etcd accepts, and read every Secret; delete it (%s)", key.form)
				case owner == string(FrontProxyCA):
					add(p, "is the front-proxy CA's private key, which never leaves the secrets bundle: with it anyone can impersonate any user to aggregated API servers; delete it (%s)", key.form)
				case keyHere && i == 0:
					// The key the catalogue puts here; verifyCertFile
					// holds it to its certificate. A second key in the
					// file is another's.
				case owner == string(ClusterCA) && (expected != nil || !controlPlane || rel != layout.ClusterCAKey || i > 0):
					add(p, "is the cluster CA's private key, %s: with it anyone can sign any identity, system:masters included; delete it (%s)", where, key.form)
				case owner == serviceAccount && (expected != nil || !controlPlane || rel != layout.ServiceAccountKey || i > 0):
					add(p, "is the service-account signing key, %s: with it anyone can forge any service account's token; delete it (%s)", where, key.form)
				case owner == string(ClusterCA) || owner == serviceAccount:
				case expected != nil:
					add(p, "holds a private key where the catalogue puts none (%s); delete it, and find out how it got there", key.form)
				case node == "":
					add(p, "holds a private key (%s), and the cluster tree has none but those in admin.conf and super-admin.conf; delete it", key.form)
				default:
					crt := strings.TrimSuffix(rel, ".key") + ".crt"
					if _, err := fs.Stat(tree, path.Join(dir, crt)); err != nil || !strings.HasSuffix(rel, ".key") || i > 0 {
						add(p, "holds a private key that belongs to no certificate beside it (%s); delete it, and find out how it got there", key.form)
					}
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
func keyOwners(tree fs.FS, trees []string) map[string]string {
	out := map[string]string{}
	for _, dir := range trees {
		for rel, owner := range map[string]string{
			layout.ClusterCACert: string(ClusterCA), "pki/ca.crt": string(ClusterCA), layout.EtcdCACert: string(EtcdCA),
			layout.FrontProxyCACert: string(FrontProxyCA), layout.ServiceAccountPubKey: serviceAccount,
		} {
			data, err := readBounded(tree, path.Join(dir, rel), nil)
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
