package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TestKubeconfigs loads every kubeconfig of ha-stacked as client-go does
// and checks the API server URL each consumer dials, that the embedded
// credential is a working client certificate of the cluster CA with the
// consumer's identity, and that client-go's TLS configuration built from
// the file completes a handshake with the API servers the URL reaches.
func TestKubeconfigs(t *testing.T) {
	m := issueExample(t, "ha-stacked")
	files, err := Files(m)
	if err != nil {
		t.Fatal(err)
	}
	// What the spec says, written out here rather than derived, so that a
	// wrong derivation cannot agree with itself.
	const endpoint = "https://10.0.0.10:6443"
	nodeAddress := map[string]string{"cp1": "10.0.0.11", "cp2": "10.0.0.12", "cp3": "10.0.0.13"}
	controlPlanes := []string{"cp1", "cp2", "cp3"}
	nodes := append(slices.Clone(controlPlanes), "w01", "w02", "w03", "w04", "w05", "w06")

	type consumer struct {
		host   string
		user   string
		groups []string
		// apiservers the URL reaches (the VIP: any of them).
		apiservers []string
	}
	want := map[nodePath]consumer{
		{"", "admin.conf"}:       {endpoint, "kubernetes-admin", []string{"kubeadm:cluster-admins"}, controlPlanes},
		{"", "super-admin.conf"}: {endpoint, "kubernetes-super-admin", []string{"system:masters"}, controlPlanes},
	}
	for _, n := range nodes {
		want[nodePath{n, "etc/kubernetes/kubelet.conf"}] = consumer{endpoint, "system:node:" + n, []string{"system:nodes"}, controlPlanes}
		want[nodePath{n, "var/lib/kube-proxy/kubeconfig.conf"}] = consumer{endpoint, "system:kube-proxy", nil, controlPlanes}
		want[nodePath{n, "etc/cni/net.d/calico-kubeconfig"}] = consumer{endpoint, "calico-cni", nil, controlPlanes}
	}
	for _, n := range controlPlanes {
		local := "https://" + nodeAddress[n] + ":6443"
		want[nodePath{n, "etc/kubernetes/admin.conf"}] = consumer{endpoint, "kubernetes-admin", []string{"kubeadm:cluster-admins"}, controlPlanes}
		want[nodePath{n, "etc/kubernetes/controller-manager.conf"}] = consumer{local, "system:kube-controller-manager", nil, []string{n}}
		want[nodePath{n, "etc/kubernetes/scheduler.conf"}] = consumer{local, "system:kube-scheduler", nil, []string{n}}
	}

	clusterCA := m.Bundle.CAs[ClusterCA].Cert
	seen := map[nodePath]bool{}
	for _, f := range files {
		k := nodePath{f.Node, f.Path}
		cfg, err := clientcmd.Load(f.Data)
		if err != nil || len(cfg.Clusters) == 0 {
			// Not a kubeconfig: only certificates and keys may fail to load.
			if !strings.Contains(string(f.Data), "-----BEGIN ") {
				t.Errorf("%s:%s is neither PEM nor a kubeconfig: %v", f.Node, f.Path, err)
			}
			continue
		}
		seen[k] = true
		w, ok := want[k]
		if !ok {
			t.Errorf("unexpected kubeconfig %s:%s", f.Node, f.Path)
			continue
		}
		t.Run(f.Node+":"+f.Path, func(t *testing.T) {
			if f.Mode != ModePrivate {
				t.Errorf("mode %v, want %v", f.Mode, ModePrivate)
			}
			rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
			if err != nil {
				t.Fatalf("client-go: %v", err)
			}
			if rc.Host != w.host {
				t.Errorf("Host = %q, want %q", rc.Host, w.host)
			}
			tc := rc.TLSClientConfig
			if tc.Insecure {
				t.Errorf("the kubeconfig skips server verification")
			}
			// The embedded CA is the cluster CA, and only it.
			block, tail := pem.Decode(tc.CAData)
			if block == nil || len(bytes.TrimSpace(tail)) != 0 {
				t.Fatalf("CA data is not one PEM certificate")
			}
			ca, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if !ca.Equal(clusterCA) {
				t.Errorf("embedded CA is %q, not the cluster CA", ca.Subject)
			}
			// The client certificate parses, matches its key, chains to the
			// embedded CA for client authentication, and names the consumer.
			pair, err := tls.X509KeyPair(tc.CertData, tc.KeyData)
			if err != nil {
				t.Fatalf("client certificate and key: %v", err)
			}
			leaf, err := x509.ParseCertificate(pair.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			roots.AddCert(ca)
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: testVerifyTime,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("client certificate does not chain to the embedded CA: %v", err)
			}
			if leaf.Subject.CommonName != w.user || !slices.Equal(leaf.Subject.Organization, w.groups) {
				t.Errorf("client certificate is CN=%q O=%q, want CN=%q O=%q", leaf.Subject.CommonName, leaf.Subject.Organization, w.user, w.groups)
			}

			// client-go's own TLS configuration from this file reaches the
			// API servers behind its URL.
			u, err := url.Parse(rc.Host)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range w.apiservers {
				cli, err := rest.TLSConfigFor(rc)
				if err != nil {
					t.Fatal(err)
				}
				cli.ServerName = u.Hostname()
				cli.MinVersion = tls.VersionTLS12
				cli.Time = func() time.Time { return testVerifyTime }
				r := loopbackHandshake(t, flowServerConfig(tlsCert(t, mustLeaf(t, m, "apiserver@"+a)), caPool(m.Bundle, ClusterCA)), cli)
				if r.clientErr != nil || r.serverErr != nil {
					t.Errorf("dialling apiserver@%s as %s: client: %v; server: %v", a, u.Hostname(), r.clientErr, r.serverErr)
					continue
				}
				if cn := r.server.PeerCertificates[0].Subject.CommonName; cn != w.user {
					t.Errorf("apiserver@%s saw user %q, want %q", a, cn, w.user)
				}
			}
		})
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("no kubeconfig %s:%s", k.node, k.path)
		}
	}
}
