package pki

// Where the PKI lives on a node, relative to the node's root: kubeadm's
// layout, and the one place these paths are written. The catalogue puts
// certificates, keys and kubeconfigs there; the systemd target names the
// same constants on the components' command lines and in their
// configurations. A certificate's stem takes ".crt", its key ".key".
const (
	// Directories.
	PKIDir     = "etc/kubernetes/pki/"
	EtcdPKIDir = "etc/kubernetes/pki/etcd/"

	// The CAs' certificates (and the cluster CA's key, on control-plane
	// nodes, where the controller-manager signs kubelet certificates).
	ClusterCACert    = PKIDir + "ca.crt"
	ClusterCAKey     = PKIDir + "ca.key"
	FrontProxyCACert = PKIDir + "front-proxy-ca.crt"
	EtcdCACert       = EtcdPKIDir + "ca.crt"

	// The service-account signing key and its public half.
	ServiceAccountKey    = PKIDir + "sa.key"
	ServiceAccountPubKey = PKIDir + "sa.pub"

	// Leaf certificate stems.
	APIServerStem              = PKIDir + "apiserver"
	APIServerKubeletClientStem = PKIDir + "apiserver-kubelet-client"
	APIServerEtcdClientStem    = PKIDir + "apiserver-etcd-client"
	FrontProxyClientStem       = PKIDir + "front-proxy-client"
	EtcdServerStem             = EtcdPKIDir + "server"
	EtcdPeerStem               = EtcdPKIDir + "peer"
	EtcdHealthcheckClientStem  = EtcdPKIDir + "healthcheck-client"
	KubeletServingStem         = "var/lib/kubelet/pki/kubelet"
	// EndpointHealthStem is the client certificate the endpoint's HAProxy
	// checks the API servers' /readyz with (anonymous requests are off).
	EndpointHealthStem = PKIDir + "endpoint-health"

	// Kubeconfigs.
	KubeconfigDir               = "etc/kubernetes/"
	AdminKubeconfig             = KubeconfigDir + "admin.conf"
	SuperAdminKubeconfig        = KubeconfigDir + "super-admin.conf"
	ControllerManagerKubeconfig = KubeconfigDir + "controller-manager.conf"
	SchedulerKubeconfig         = KubeconfigDir + "scheduler.conf"
	KubeletKubeconfig           = KubeconfigDir + "kubelet.conf"
	KubeProxyKubeconfig         = "var/lib/kube-proxy/kubeconfig.conf"
	CalicoKubeconfig            = "etc/cni/net.d/calico-kubeconfig"
)

// CertFile is the path of a stem's certificate.
func CertFile(stem string) string { return stem + ".crt" }

// KeyFile is the path of a stem's private key.
func KeyFile(stem string) string { return stem + ".key" }
