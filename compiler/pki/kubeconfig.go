package pki

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// kubeconfig renders the kubeconfig of a client certificate with every
// credential embedded, so the file works wherever it is copied. It is
// written directly rather than through clientcmd.Write, which converts
// through the API machinery and dominates the build of a large cluster;
// every kubeconfig is read back with clientcmd.Load, in the tests and by
// `kcompile pki verify`, so the two cannot drift apart.
func kubeconfig(clusterName string, caPEM []byte, l Issued) ([]byte, error) {
	if l.Kubeconfig == nil {
		return nil, fmt.Errorf("%s has no kubeconfig", l.ID)
	}
	b64 := base64.StdEncoding.EncodeToString
	user := strconv.Quote(l.CommonName)
	cluster := strconv.Quote(clusterName)
	context := strconv.Quote(l.CommonName + "@" + clusterName)
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Config\nclusters:\n")
	fmt.Fprintf(&b, "- name: %s\n  cluster:\n    server: %s\n    certificate-authority-data: %s\n", cluster, strconv.Quote(l.Kubeconfig.Server), b64(caPEM))
	fmt.Fprintf(&b, "users:\n- name: %s\n  user:\n    client-certificate-data: %s\n    client-key-data: %s\n", user, b64(l.CertPEM), b64(l.KeyPEM))
	fmt.Fprintf(&b, "contexts:\n- name: %s\n  context:\n    cluster: %s\n    user: %s\ncurrent-context: %s\n", context, cluster, user, context)
	return []byte(b.String()), nil
}
