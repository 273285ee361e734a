package pki

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdlatest "k8s.io/client-go/tools/clientcmd/api/latest"
)

// kubeconfig renders the kubeconfig of a client certificate with every
// credential embedded, so the file works wherever it is copied. Its shape
// is written here rather than through clientcmd.Write or a YAML encoder,
// which convert through the API machinery and would dominate the build
// of a large cluster; every value goes through the JSON encoder, whose
// strings are YAML's double-quoted scalars, or is base64. Every
// kubeconfig is read back with client-go's decoder (LoadKubeconfig) by
// the systemd target's verification and `kcompile pki verify`, so the two
// cannot drift apart.
func kubeconfig(clusterName string, caPEM []byte, l Issued) ([]byte, error) {
	if l.Kubeconfig == nil {
		return nil, fmt.Errorf("%s has no kubeconfig", l.ID)
	}
	b64 := base64.StdEncoding.EncodeToString
	user := scalar(l.CommonName)
	cluster := scalar(clusterName)
	context := scalar(l.CommonName + "@" + clusterName)
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Config\nclusters:\n")
	fmt.Fprintf(&b, "- name: %s\n  cluster:\n    server: %s\n    certificate-authority-data: %s\n", cluster, scalar(l.Kubeconfig.Server), b64(caPEM))
	fmt.Fprintf(&b, "users:\n- name: %s\n  user:\n    client-certificate-data: %s\n    client-key-data: %s\n", user, b64(l.CertPEM), b64(l.KeyPEM))
	fmt.Fprintf(&b, "contexts:\n- name: %s\n  context:\n    cluster: %s\n    user: %s\ncurrent-context: %s\n", context, cluster, user, context)
	return []byte(b.String()), nil
}

// scalar writes a string as a YAML double-quoted scalar, through the JSON
// encoder (a JSON string is one).
func scalar(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

// LoadKubeconfig decodes a kubeconfig as kubectl does (client-go's
// clientcmd.Load, through the same codec), without linking client-go's
// REST client.
func LoadKubeconfig(data []byte) (*clientcmdapi.Config, error) {
	config := clientcmdapi.NewConfig()
	decoded, _, err := clientcmdlatest.Codec.Decode(data, &schema.GroupVersionKind{Version: clientcmdlatest.Version, Kind: "Config"}, config)
	if err != nil {
		return nil, err
	}
	return decoded.(*clientcmdapi.Config), nil
}
