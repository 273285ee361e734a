package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/kcompile/kcompile/layout"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kcompile/kcompile/compiler/ir"
)

// maxSniff bounds the files Verify reads: no certificate, key or
// kubeconfig of a tree comes near it, and a huge file is not read whole
// into memory to find out.
const maxSniff = 1 << 20

// errNotSniffed says a file was not read: it is larger than maxSniff, or
// not a regular file (a FIFO would block the reader, a device never end).
var errNotSniffed = errors.New("not read: larger than 1 MiB or not a regular file")

// readBounded reads a regular file of at most maxSniff bytes, following
// symbolic links as fs.ReadFile does; other files are errNotSniffed. d,
// the file's entry in a walk, may be nil; when it says the file is
// regular, the file is opened without a Stat of its path first.
func readBounded(tree fs.FS, p string, d fs.DirEntry) ([]byte, error) {
	if d == nil || !d.Type().IsRegular() {
		// Opening a FIFO would block: look before opening.
		info, err := fs.Stat(tree, p)
		if err != nil {
			return nil, err
		}
		if !info.Mode().IsRegular() || info.Size() > maxSniff {
			return nil, errNotSniffed
		}
	}
	f, err := tree.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() || info.Size() > maxSniff {
		return nil, errNotSniffed
	}
	var buf bytes.Buffer
	buf.Grow(int(info.Size()) + bytes.MinRead)
	if _, err := buf.ReadFrom(io.LimitReader(f, maxSniff+1)); err != nil {
		return nil, err
	}
	if buf.Len() > maxSniff {
		// It grew since the Stat.
		return nil, errNotSniffed
	}
	return buf.Bytes(), nil
}

// foundKey is a private key found in a file's content.
type foundKey struct {
	// form says how it is encoded and, when it parses, its algorithm,
	// e.g. "PKCS#8 DER, ECDSA-P256". It never quotes the key.
	form string
	// pub is its public half, nil when it cannot be parsed (encrypted,
	// OpenSSH, damaged).
	pub crypto.PublicKey
}

// pemKeyForms names the PEM block types of private keys by encoding.
var pemKeyForms = map[string]string{
	"PRIVATE KEY":           "PKCS#8 PEM",
	"RSA PRIVATE KEY":       "PKCS#1 PEM",
	"EC PRIVATE KEY":        "SEC1 PEM",
	"ENCRYPTED PRIVATE KEY": "encrypted PKCS#8 PEM",
	"OPENSSH PRIVATE KEY":   "OpenSSH PEM",
}

// sniffKeys finds the private keys of a file's content, in any encoding
// the PKI's consumers (or an operator's tools) write: every PEM block of
// a private-key type, PEM armour that does not decode (a key indented
// into another file), and a whole file of DER in PKCS #8, PKCS #1 or
// SEC 1.
func sniffKeys(data []byte) []foundKey {
	var out []foundKey
	// Every PEM type of a private key ends in PRIVATE KEY.
	for rest := data; bytes.Contains(data, []byte("PRIVATE KEY")); {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if strings.HasSuffix(block.Type, "PRIVATE KEY") {
			out = append(out, pemKey(block))
		}
	}
	if len(out) == 0 && bytes.Contains(data, []byte("PRIVATE KEY-----")) {
		out = append(out, foundKey{form: "PEM armour that does not decode"})
	}
	if len(out) == 0 {
		if k, ok := derKey(data); ok {
			out = append(out, k)
		}
	}
	return out
}

func pemKey(block *pem.Block) foundKey {
	form, ok := pemKeyForms[block.Type]
	if !ok {
		return foundKey{form: fmt.Sprintf("a PEM block of type %q", block.Type)}
	}
	if strings.Contains(block.Headers["Proc-Type"], "ENCRYPTED") {
		return foundKey{form: "encrypted " + form}
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		// Encrypted or OpenSSH: a key, whose owner cannot be told.
		return foundKey{form: form}
	}
	if err != nil {
		return foundKey{form: form + " that does not parse"}
	}
	return withAlgorithm(form, key)
}

// derKey parses a whole file as a DER private key.
func derKey(data []byte) (foundKey, bool) {
	if len(data) < 2 || data[0] != 0x30 { // an ASN.1 SEQUENCE
		return foundKey{}, false
	}
	if k, err := x509.ParsePKCS8PrivateKey(data); err == nil {
		return withAlgorithm("PKCS#8 DER", k), true
	}
	if k, err := x509.ParsePKCS1PrivateKey(data); err == nil {
		return withAlgorithm("PKCS#1 DER", k), true
	}
	if k, err := x509.ParseECPrivateKey(data); err == nil {
		return withAlgorithm("SEC1 DER", k), true
	}
	return foundKey{}, false
}

func withAlgorithm(form string, key any) foundKey {
	k, ok := key.(interface{ Public() crypto.PublicKey })
	if !ok {
		return foundKey{form: form}
	}
	pub := k.Public()
	switch p := pub.(type) {
	case ed25519.PublicKey:
		return foundKey{form: form + ", Ed25519", pub: pub}
	case *ecdh.PublicKey:
		return foundKey{form: form + ", ECDH " + fmt.Sprint(p.Curve()), pub: pub}
	}
	return foundKey{form: form + ", " + keyAlgorithm(pub), pub: pub}
}

// ownerOf says whose a found key is, by its public half: a CA's or the
// service-account key's (see keyOwners), or "".
func ownerOf(k foundKey, owners map[string]string) string {
	if k.pub == nil {
		return ""
	}
	der, err := x509.MarshalPKIXPublicKey(k.pub)
	if err != nil {
		return ""
	}
	return owners[string(der)]
}

// kubeconfigUser is a user of a kubeconfig that carries credentials.
type kubeconfigUser struct {
	name string
	// kinds are the credentials, e.g. "client key", "token".
	kinds []string
	// admin is the cluster-admin group of its client certificate
	// (system:masters or kubeadm:cluster-admins), if it has one.
	admin string
	// clientKey is its embedded client key, whose owner keyOwner finds
	// when a message needs it.
	clientKey []byte
}

// keyOwner says whose a user's client key is when it is a CA's or the
// service-account key, or "".
func (u kubeconfigUser) keyOwner(owners map[string]string) string {
	for _, k := range sniffKeys(u.clientKey) {
		if o := ownerOf(k, owners); o != "" {
			return o
		}
	}
	return ""
}

// credentialFields are the kubeconfig fields of which one must appear for
// a file to carry credentials; the others are not decoded.
var credentialFields = [][]byte{[]byte("client-key"), []byte("token"), []byte("password"), []byte("auth-provider")}

// kubeconfigCredentials are the users of a kubeconfig that carry
// credentials, and the user of its current context; verifyNode records
// them for the kubeconfigs it decodes, so that verifyKeyPlacement does not
// decode them again.
type kubeconfigCredentials struct {
	users   []kubeconfigUser
	current string
}

// sniffKubeconfig decodes a file as a kubeconfig, as kubectl does, and
// returns its users that carry credentials (see credentialUsers). A file
// that does not decode as a kubeconfig has none.
func sniffKubeconfig(data []byte) kubeconfigCredentials {
	if !bytes.Contains(data, []byte("users")) || !slices.ContainsFunc(credentialFields, func(f []byte) bool { return bytes.Contains(data, f) }) {
		return kubeconfigCredentials{}
	}
	cfg, err := LoadKubeconfig(data)
	if err != nil {
		return kubeconfigCredentials{}
	}
	return credentialUsers(cfg)
}

// credentialUsers returns the users of a kubeconfig that carry
// credentials, sorted by name: an embedded client key or a path to one, a
// token or a token file, a password, or an auth provider's stored
// configuration (its tokens).
func credentialUsers(cfg *clientcmdapi.Config) kubeconfigCredentials {
	var current string
	if ctx := cfg.Contexts[cfg.CurrentContext]; ctx != nil {
		current = ctx.AuthInfo
	}
	var out []kubeconfigUser
	for _, name := range slices.Sorted(maps.Keys(cfg.AuthInfos)) {
		a := cfg.AuthInfos[name]
		if a == nil {
			continue
		}
		u := kubeconfigUser{name: name}
		if len(a.ClientKeyData) > 0 {
			u.kinds = append(u.kinds, "client key")
			u.clientKey = a.ClientKeyData
		}
		if a.ClientKey != "" {
			u.kinds = append(u.kinds, "client key file "+a.ClientKey)
		}
		if a.Token != "" {
			u.kinds = append(u.kinds, "token")
		}
		if a.TokenFile != "" {
			u.kinds = append(u.kinds, "token file "+a.TokenFile)
		}
		if a.Password != "" {
			u.kinds = append(u.kinds, "basic auth")
		}
		if a.AuthProvider != nil && len(a.AuthProvider.Config) > 0 {
			u.kinds = append(u.kinds, "stored "+a.AuthProvider.Name+" auth-provider tokens")
		}
		if len(u.kinds) == 0 {
			continue
		}
		u.admin = adminGroup(a.ClientCertificateData)
		out = append(out, u)
	}
	return kubeconfigCredentials{users: out, current: current}
}

// adminGroup is the cluster-admin group (system:masters or
// kubeadm:cluster-admins) of a PEM client certificate's subject, or "".
// The certificate is parsed only when its DER holds one of the names.
func adminGroup(certPEM []byte) string {
	block, _ := pem.Decode(certPEM)
	if block == nil || !bytes.Contains(block.Bytes, []byte(groupMasters)) && !bytes.Contains(block.Bytes, []byte(groupClusterAdmins)) {
		return ""
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return ""
	}
	group := ""
	for _, o := range cert.Subject.Organization {
		if o == groupMasters || o == groupClusterAdmins {
			group = o
		}
	}
	return group
}

// kubeconfigFiles is where Files puts kubeconfigs, by node and path (the
// cluster tree's node is ""), as keyFiles is for keys: the admin
// kubeconfig on every control-plane node and in the cluster tree, the
// super-admin one in the cluster tree only, every other one on its node.
func kubeconfigFiles(c *ir.Cluster) map[[2]string]bool {
	out := map[[2]string]bool{}
	for _, cert := range Catalogue(c) {
		if cert.Kubeconfig == nil {
			continue
		}
		switch cert.Name {
		case "admin":
			for _, n := range c.Nodes {
				if n.Runs(ir.ComponentAPIServer) {
					out[[2]string{n.Name, cert.Kubeconfig.Path}] = true
				}
			}
			out[[2]string{"", path.Base(layout.AdminKubeconfig)}] = true
		case "super-admin":
			out[[2]string{"", path.Base(layout.SuperAdminKubeconfig)}] = true
		default:
			out[[2]string{cert.Node, cert.Kubeconfig.Path}] = true
		}
	}
	return out
}

// layoutKubeconfig says, without the spec, whether the layout puts a
// kubeconfig at rel on a node (node "" is the cluster tree) that runs an
// API server (cp) or not.
func layoutKubeconfig(node, rel string, cp bool) bool {
	if node == "" {
		return rel == path.Base(layout.AdminKubeconfig) || rel == path.Base(layout.SuperAdminKubeconfig)
	}
	switch rel {
	case layout.KubeletKubeconfig, layout.KubeProxyKubeconfig, layout.CalicoKubeconfig:
		return true
	case layout.AdminKubeconfig, layout.ControllerManagerKubeconfig, layout.SchedulerKubeconfig:
		return cp
	}
	return false
}

// ownerNames describes the owners of keyOwners in messages.
var ownerNames = map[string]string{
	string(ClusterCA):    "the cluster CA's private key",
	string(EtcdCA):       "the etcd CA's private key",
	string(FrontProxyCA): "the front-proxy CA's private key",
	serviceAccount:       "the service-account signing key",
}

// verifyKubeconfigCredentials reports the credentials of a file's
// kubeconfig users where the catalogue (with the spec) or the layout
// (without it) puts none. At a path where a kubeconfig belongs, only its
// current context's user belongs there, and, without the spec (with it
// verifyTopology compares the subject), a cluster-admin credential only at
// the admin kubeconfig of a control-plane node or the cluster tree.
func verifyKubeconfigCredentials(p, node, rel string, creds kubeconfigCredentials, owners map[string]string, expected bool, spec, cp bool, add func(p, format string, args ...any)) {
	own := creds.current
	for _, u := range creds.users {
		if expected && u.name == own && (spec || u.admin == "") {
			// Its own user, which verifyKubeconfig checks.
			continue
		}
		kinds := strings.Join(u.kinds, ", ")
		if o := u.keyOwner(owners); o != "" {
			kinds += "; the client key is " + ownerNames[o]
		}
		admin := ""
		if u.admin != "" {
			admin = fmt.Sprintf(": a cluster-admin credential (O=%s)", u.admin)
			if node != "" && !cp {
				admin += " on a node that runs no API server"
			}
		}
		switch {
		case expected && u.name == own:
			switch {
			case spec || u.admin == "":
			case u.admin == groupMasters && node != "":
				add(p, "holds the credentials of user %q (%s): a system:masters credential, which the layout keeps off every node; delete it", u.name, kinds)
			case u.admin == groupClusterAdmins && node != "" && rel != layout.AdminKubeconfig:
				add(p, "holds the credentials of user %q (%s)%s, where the layout puts another component's kubeconfig; replace it", u.name, kinds, admin)
			}
		case expected:
			add(p, "holds credentials for user %q (%s)%s beside its own user %q, and a kubeconfig of the layout has one user; delete them", u.name, kinds, admin, own)
		default:
			where := "where the catalogue puts none"
			switch {
			case spec:
			case node == "":
				where = "and the cluster tree has none but admin.conf and super-admin.conf"
			default:
				where = "where the layout puts none"
			}
			add(p, "holds a kubeconfig with credentials for user %q (%s) %s%s; delete it, and find out how it got there", u.name, kinds, where, admin)
		}
	}
}
