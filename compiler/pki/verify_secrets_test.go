package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"github.com/kcompile/kcompile/layout"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/kcompile/kcompile/compiler/ir"
)

// testRSAKey derives an RSA-2048 key from the test seed, as issuance
// would for an RSA cluster.
func testRSAKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := deriveKey(testSeed, RSA2048, "verify-secrets-test")
	if err != nil {
		t.Fatal(err)
	}
	return k.(*rsa.PrivateKey)
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// kubeconfigWith is a kubeconfig of one user whose credentials are the
// YAML lines of user (indented by four spaces).
func kubeconfigWith(caPEM []byte, user string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: %s
users:
- name: someone
  user:
%scontexts:
- name: ctx
  context:
    cluster: c
    user: someone
current-context: ctx
`, base64.StdEncoding.EncodeToString(caPEM), user)
}

// TestVerifySniffSecrets: every encoding of a private key and every
// credential of a kubeconfig is found in a file where the catalogue puts
// none, with the spec and without, and named without quoting it;
// certificates, public keys, a kubeconfig without credentials and random
// bytes are not.
func TestVerifySniffSecrets(t *testing.T) {
	m := issueExample(t, "ha-stacked")
	b := m.Bundle
	caKey := b.CAs[ClusterCA].Key.(*ecdsa.PrivateKey)
	caPEM := encodeCert(b.CAs[ClusterCA].Cert.Raw)
	rsaKey := testRSAKey(t)
	leaf := mustLeaf(t, m, "kubelet-serving@w02")
	leafKey, err := parseKey(leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8 := func(k any) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	sec1 := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(caKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	random := make([]byte, 4096)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	random[0] = 0x30 // looks like the start of DER
	const token = "abcdef.0123456789abcdef"
	const password = "hunter2-hunter2"
	admin := mustLeaf(t, m, "admin")
	adminConf, err := kubeconfig(m.Cluster.Name, caPEM, admin)
	if err != nil {
		t.Fatal(err)
	}
	embedded := func(cert []byte, key []byte) string {
		return fmt.Sprintf("    client-certificate-data: %s\n    client-key-data: %s\n",
			base64.StdEncoding.EncodeToString(cert), base64.StdEncoding.EncodeToString(key))
	}

	rows := []struct {
		name string
		data []byte
		// want are substrings of the one problem the file gets, with the
		// spec and without; none for a negative row.
		want []string
	}{
		{"PEM PKCS#1", pemOf("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)), []string{"holds a private key", "PKCS#1 PEM, RSA-2048"}},
		{"PEM PKCS#8 RSA", pemOf("PRIVATE KEY", pkcs8(rsaKey)), []string{"holds a private key", "PKCS#8 PEM, RSA-2048"}},
		{"PEM PKCS#8 Ed25519", pemOf("PRIVATE KEY", pkcs8(edKey)), []string{"holds a private key", "PKCS#8 PEM, Ed25519"}},
		{"PEM PKCS#8 cluster CA", pemOf("PRIVATE KEY", pkcs8(caKey)), []string{"is the cluster CA's private key", "PKCS#8 PEM, ECDSA-P256"}},
		{"PEM SEC1 leaf", leaf.KeyPEM, []string{"holds a private key", "SEC1 PEM, ECDSA-P256"}},
		{"PEM encrypted PKCS#8", pemOf("ENCRYPTED PRIVATE KEY", random[:256]), []string{"holds a private key", "encrypted PKCS#8 PEM"}},
		{"PEM OpenSSH", pemOf("OPENSSH PRIVATE KEY", append([]byte("openssh-key-v1\x00"), random[:200]...)), []string{"holds a private key", "OpenSSH PEM"}},
		{"PEM legacy encrypted PKCS#1", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,00112233445566778899AABBCCDDEEFF"}, Bytes: random[:256]}),
			[]string{"holds a private key", "encrypted PKCS#1 PEM"}},
		{"PEM key after a certificate", append(slices.Clone(leaf.CertPEM), leaf.KeyPEM...), []string{"holds a private key", "SEC1 PEM"}},
		{"PEM indented into YAML", []byte("key: |\n  " + strings.ReplaceAll(string(leaf.KeyPEM), "\n", "\n  ")), []string{"holds a private key", "PEM armour that does not decode"}},
		{"DER PKCS#8 cluster CA", pkcs8(caKey), []string{"is the cluster CA's private key", "PKCS#8 DER, ECDSA-P256"}},
		{"DER PKCS#1", x509.MarshalPKCS1PrivateKey(rsaKey), []string{"holds a private key", "PKCS#1 DER, RSA-2048"}},
		{"DER SEC1 etcd CA", sec1(b.CAs[EtcdCA].Key.(*ecdsa.PrivateKey)), []string{"is the etcd CA's private key", "SEC1 DER, ECDSA-P256"}},
		{"DER SEC1 leaf", sec1(leafKey.(*ecdsa.PrivateKey)), []string{"holds a private key", "SEC1 DER, ECDSA-P256"}},
		{"kubeconfig admin.conf", adminConf, []string{`credentials for user "kubernetes-admin" (client key)`, "a cluster-admin credential (O=kubeadm:cluster-admins) on a node that runs no API server"}},
		{"kubeconfig client-key-data", kubeconfigWith(caPEM, embedded(leaf.CertPEM, leaf.KeyPEM)), []string{`credentials for user "someone" (client key)`}},
		{"kubeconfig CA key as client key", kubeconfigWith(caPEM, embedded(caPEM, pemOf("PRIVATE KEY", pkcs8(caKey)))), []string{`credentials for user "someone" (client key; the client key is the cluster CA's private key)`}},
		{"kubeconfig client-key path", kubeconfigWith(caPEM, "    client-certificate: /etc/x.crt\n    client-key: /etc/x.key\n"), []string{`credentials for user "someone" (client key file /etc/x.key)`}},
		{"kubeconfig token", kubeconfigWith(caPEM, "    token: "+token+"\n"), []string{`credentials for user "someone" (token)`}},
		{"kubeconfig tokenFile", kubeconfigWith(caPEM, "    tokenFile: /var/run/token\n"), []string{`credentials for user "someone" (token file /var/run/token)`}},
		{"kubeconfig basic auth", kubeconfigWith(caPEM, "    username: admin\n    password: "+password+"\n"), []string{`credentials for user "someone" (basic auth)`}},
		{"kubeconfig JSON token", fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Config","users":[{"name":"j","user":{"token":%q}}]}`, token), []string{`credentials for user "j" (token)`}},

		{"certificate", leaf.CertPEM, nil},
		{"certificate DER", b.CAs[ClusterCA].Cert.Raw, nil},
		{"public key", pemOf("PUBLIC KEY", pub), nil},
		{"public key DER", pub, nil},
		{"kubeconfig CA only", kubeconfigWith(caPEM, "    {}\n"), nil},
		{"kubeconfig exec plugin", kubeconfigWith(caPEM, "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: get-token\n"), nil},
		{"Secret manifest", []byte("apiVersion: v1\nkind: Secret\nmetadata:\n  name: users\nstringData:\n  token: x\n"), nil},
		{"random bytes", random, nil},
		{"empty", nil, nil},
	}
	base := memTree(t, m)
	secrets := append(bundleSecretRenderings(t, b), "PRIVATE KEY", token, password, string(leaf.KeyPEM[40:72]))
	const at = "nodes/w01/root/stray"
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			tree := maps.Clone(base)
			tree[at] = &fstest.MapFile{Data: row.data, Mode: ModePrivate}
			for _, c := range []*ir.Cluster{m.Cluster, nil} {
				ps, err := Verify(tree, c, testVerifyTime)
				if err != nil {
					t.Fatal(err)
				}
				got := problemsAt(ps)
				if len(row.want) == 0 {
					if len(ps) != 0 {
						t.Errorf("spec %v: want no problems, got %v", c != nil, ps)
					}
					continue
				}
				t.Logf("spec %v: %v", c != nil, ps)
				if len(got[at]) != 1 || len(got) != 1 {
					t.Fatalf("spec %v: want one problem at %s, got %v", c != nil, at, ps)
				}
				for _, w := range row.want {
					if !strings.Contains(got[at][0], w) {
						t.Errorf("spec %v: got %q, want it to say %q", c != nil, got[at][0], w)
					}
				}
				assertNoSecretIn(t, "a verify problem", ps[0].String(), secrets)
			}
		})
	}
}

// TestVerifyAdminConfOnWorker: the cluster-admin kubeconfig copied onto a
// worker, where the layout has an admin.conf on control-plane nodes only,
// is reported with the spec and without; so is the cluster CA key in DER
// on a worker, and the super-admin kubeconfig on a control-plane node.
// The tree as built, in memory and on disk, has no problems.
func TestVerifyAdminConfOnWorker(t *testing.T) {
	m := issueExample(t, "ha-stacked")
	tree := memTree(t, m)
	for _, c := range []*ir.Cluster{m.Cluster, nil} {
		for where, tree := range map[string]fs.FS{"in memory": tree, "on disk": os.DirFS(writeTree(t, tree))} {
			if ps, err := Verify(tree, c, testVerifyTime); err != nil || len(ps) != 0 {
				t.Fatalf("the tree as built (%s, spec %v) has problems: %v %v", where, c != nil, ps, err)
			}
		}
	}
	caDER, err := x509.MarshalPKCS8PrivateKey(m.Bundle.CAs[ClusterCA].Key)
	if err != nil {
		t.Fatal(err)
	}
	tree["nodes/w01/etc/kubernetes/admin.conf"] = tree["cluster/admin.conf"]
	tree["nodes/w02/home/ops/.kube/config"] = tree["nodes/cp1/etc/kubernetes/admin.conf"]
	tree["nodes/cp2/etc/kubernetes/super-admin.conf"] = tree["cluster/super-admin.conf"]
	tree["nodes/w03/etc/kubernetes/pki/ca.der"] = &fstest.MapFile{Data: caDER, Mode: ModePrivate}
	wants := map[string][]string{
		"nodes/w01/etc/kubernetes/admin.conf":       {`holds a kubeconfig with credentials for user "kubernetes-admin" (client key)`, "a cluster-admin credential (O=kubeadm:cluster-admins) on a node that runs no API server"},
		"nodes/w02/home/ops/.kube/config":           {`holds a kubeconfig with credentials for user "kubernetes-admin" (client key)`, "a cluster-admin credential (O=kubeadm:cluster-admins) on a node that runs no API server"},
		"nodes/cp2/etc/kubernetes/super-admin.conf": {`holds a kubeconfig with credentials for user "kubernetes-super-admin" (client key)`, "a cluster-admin credential (O=system:masters)"},
		"nodes/w03/etc/kubernetes/pki/ca.der":       {"is the cluster CA's private key", "PKCS#8 DER, ECDSA-P256"},
	}
	for where, tree := range map[string]fs.FS{"in memory": tree, "on disk": os.DirFS(writeTree(t, tree))} {
		for _, c := range []*ir.Cluster{m.Cluster, nil} {
			ps, err := Verify(tree, c, testVerifyTime)
			if err != nil {
				t.Fatal(err)
			}
			got := problemsAt(ps)
			for p, want := range wants {
				for _, w := range want {
					if !slices.ContainsFunc(got[p], func(msg string) bool { return strings.Contains(msg, w) }) {
						t.Errorf("%s, spec %v: %s: got %q, want %q", where, c != nil, p, got[p], w)
					}
				}
			}
			for p := range got {
				if _, ok := wants[p]; !ok {
					t.Errorf("%s, spec %v: unexpected problems at %s: %q", where, c != nil, p, got[p])
				}
			}
			for _, p := range ps {
				assertNoSecretIn(t, "a verify problem", p.String(), append(bundleSecretRenderings(t, m.Bundle), "PRIVATE KEY"))
			}
		}
	}
}

// TestVerifyAdminAtAnotherKubeconfigPath: without the spec, the layout
// says which kubeconfigs go where, and a cluster-admin credential in a
// worker's kubelet.conf is found; with it, the catalogue's subject does.
// A second user beside a kubeconfig's own is reported either way.
func TestVerifyAdminAtAnotherKubeconfigPath(t *testing.T) {
	m := issueExample(t, "ha-stacked")
	tree := memTree(t, m)
	tree["nodes/w01/etc/kubernetes/kubelet.conf"] = tree["cluster/admin.conf"]
	extra := slices.Clone(tree["nodes/w02/etc/kubernetes/kubelet.conf"].Data)
	extra = bytes.Replace(extra, []byte("users:\n"), []byte("users:\n- name: backdoor\n  user:\n    token: abcdef.0123456789abcdef\n"), 1)
	tree["nodes/w02/etc/kubernetes/kubelet.conf"] = &fstest.MapFile{Data: extra, Mode: ModePrivate}
	for _, c := range []*ir.Cluster{m.Cluster, nil} {
		ps, err := Verify(tree, c, testVerifyTime)
		if err != nil {
			t.Fatal(err)
		}
		got := problemsAt(ps)
		w01 := "a cluster-admin credential (O=kubeadm:cluster-admins) on a node that runs no API server"
		if c != nil {
			w01 = "subject is CN=kubernetes-admin O=[kubeadm:cluster-admins], want CN=system:node:w01"
		}
		for p, w := range map[string]string{
			"nodes/w01/etc/kubernetes/kubelet.conf": w01,
			"nodes/w02/etc/kubernetes/kubelet.conf": `holds credentials for user "backdoor" (token) beside its own user "system:node:w02"`,
		} {
			if !slices.ContainsFunc(got[p], func(msg string) bool { return strings.Contains(msg, w) }) {
				t.Errorf("spec %v: %s: got %q, want %q", c != nil, p, got[p], w)
			}
		}
		for _, p := range ps {
			if strings.Contains(p.Message, "abcdef.0123456789abcdef") {
				t.Errorf("a problem quotes the token: %s", p)
			}
		}
	}
}

// TestVerifySniffBounded: a file over maxSniff is not read for sniffing,
// and a certificate that large is named, not read.
func TestVerifySniffBounded(t *testing.T) {
	m := issueExample(t, "ha-stacked")
	tree := memTree(t, m)
	big := bytes.Repeat([]byte{'#'}, maxSniff)
	tree["nodes/w01/var/log/huge.log"] = &fstest.MapFile{Data: append(slices.Clone(big), m.Bundle.CAs[ClusterCA].Cert.Raw...), Mode: 0o644}
	tree["nodes/w01/var/log/max.log"] = &fstest.MapFile{Data: big, Mode: 0o644}
	crt := "nodes/w02/" + layout.CertFile(layout.KubeletServingStem)
	tree[crt] = &fstest.MapFile{Data: append(slices.Clone(big), tree[crt].Data...), Mode: ModePublic}
	for _, c := range []*ir.Cluster{m.Cluster, nil} {
		ps, err := Verify(tree, c, testVerifyTime)
		if err != nil {
			t.Fatal(err)
		}
		got := problemsAt(ps)
		if len(got["nodes/w01/var/log/huge.log"]) != 0 || len(got["nodes/w01/var/log/max.log"]) != 0 {
			t.Errorf("spec %v: large files without keys have problems: %v", c != nil, ps)
		}
		if !slices.ContainsFunc(got[crt], func(msg string) bool { return strings.Contains(msg, "at most 1 MiB") }) {
			t.Errorf("spec %v: %s: got %q, want it named too large", c != nil, crt, got[crt])
		}
	}
}

// TestFilesPutKubeconfigsWhereKubeconfigFilesSays: Verify's idea of
// where kubeconfigs go is what Files writes, and every file that carries
// credentials is a key or a kubeconfig of the catalogue.
func TestFilesPutKubeconfigsWhereKubeconfigFilesSays(t *testing.T) {
	for _, ex := range []string{"ha-stacked", "external-etcd", "single-node"} {
		m := issueExample(t, ex)
		files, err := Files(m)
		if err != nil {
			t.Fatal(err)
		}
		want := kubeconfigFiles(m.Cluster)
		keys := keyFiles(m.Cluster)
		got := map[[2]string]bool{}
		for _, f := range files {
			k := [2]string{f.Node, f.Path}
			if len(sniffKubeconfig(f.Data).users) > 0 {
				got[k] = true
			}
			if len(sniffKeys(f.Data)) > 0 && !keys[k] {
				t.Errorf("%s: Files writes a key at %s:%s, which keyFiles does not list", ex, f.Node, f.Path)
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: Files writes kubeconfigs with credentials at %v, kubeconfigFiles says %v", ex, got, want)
		}
	}
}
