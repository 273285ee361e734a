package pki

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeconfig renders the kubeconfig of a client certificate with every
// credential embedded, so the file works wherever it is copied.
func kubeconfig(clusterName string, caPEM []byte, l Issued) ([]byte, error) {
	if l.Kubeconfig == nil {
		return nil, fmt.Errorf("%s has no kubeconfig", l.ID)
	}
	user := l.CommonName
	context := user + "@" + clusterName
	cfg := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{
			clusterName: {Server: l.Kubeconfig.Server, CertificateAuthorityData: caPEM},
		},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{
			user: {ClientCertificateData: l.CertPEM, ClientKeyData: l.KeyPEM},
		},
		Contexts: map[string]*clientcmdapi.Context{
			context: {Cluster: clusterName, AuthInfo: user},
		},
		CurrentContext: context,
	}
	return clientcmd.Write(cfg)
}
