package systemd

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/kcompile/kcompile/internal/unitfile"
	"github.com/kcompile/kcompile/layout"
	"io/fs"
	"net"
	"reflect"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	componentbasev1alpha1 "k8s.io/component-base/config/v1alpha1"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	schedulerv1 "k8s.io/kube-scheduler/config/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/compiler/ir"
)

// kubeletConfig is the node's KubeletConfiguration: webhook authentication
// and authorization with anonymous access off, the serving certificate
// kcompile issued, the cluster DNS of the spec and the runtime's cgroup
// driver.
func kubeletConfig(c *ir.Cluster, n ir.Node, l placement) *kubeletv1beta1.KubeletConfiguration {
	f := false
	t := true
	maxPods := int32(n.Capacity.MaxPods)
	// Bounds the processes of one pod.
	pids := int64(4096)
	// Written out whatever its value: the kubelet's default differs
	// between its releases.
	failV1 := c.Kubelet.FailCgroupV1
	// Graceful node shutdown: the kubelet holds a power-off through
	// logind's inhibitor lock until the pods have ended, so that a halt
	// is never a kill.
	var grace, graceCritical metav1.Duration
	if c.Kubelet.ShutdownGrace > 0 {
		grace, graceCritical = metav1.Duration{Duration: c.Kubelet.ShutdownGrace}, metav1.Duration{Duration: c.Kubelet.ShutdownGraceCritical}
	}
	return &kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: l.at(layout.ClusterCACert)},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: &t},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: &f},
		},
		Authorization:            kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		ClusterDNS:               []string{c.Network.DNSServiceIP.String()},
		ClusterDomain:            c.Network.Domain,
		CgroupDriver:             c.Kubelet.CgroupDriver,
		ContainerRuntimeEndpoint: c.Runtime.Socket,
		MaxPods:                  maxPods,
		RotateCertificates:       true,
		TLSCertFile:              l.at(layout.CertFile(layout.KubeletServingStem)),
		TLSPrivateKeyFile:        l.at(layout.KeyFile(layout.KubeletServingStem)),
		TLSMinVersion:            "VersionTLS12",
		TLSCipherSuites:          kubeletCipherSuites(),
		ReadOnlyPort:             0,
		// CIS 4.2.13 and 4.2.14: a pod cannot exhaust the node's PIDs,
		// and containers run under the runtime's seccomp profile
		// unless they ask for another.
		PodPidsLimit:   &pids,
		SeccompDefault: &t,
		FailCgroupV1:   &failV1,

		ShutdownGracePeriod:             grace,
		ShutdownGracePeriodCriticalPods: graceCritical,
	}
}

// kubeletCipherSuites are the suites of tlsCipherSuites under the names
// CIS 4.2.12 lists for the kubelet (ChaCha20 without its _SHA256 suffix;
// Go knows both names).
func kubeletCipherSuites() []string {
	return []string{
		"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
		"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
		"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
	}
}

// kubeProxyConfig is the KubeProxyConfiguration every node shares; the
// node's name is given by --hostname-override, which kube-proxy applies
// over its configuration file.
func kubeProxyConfig(c *ir.Cluster, l placement) *kubeproxyv1alpha1.KubeProxyConfiguration {
	var cidrs []string
	for _, p := range c.Network.PodCIDRs {
		cidrs = append(cidrs, p.String())
	}
	cfg := &kubeproxyv1alpha1.KubeProxyConfiguration{
		TypeMeta:           metav1.TypeMeta{APIVersion: "kubeproxy.config.k8s.io/v1alpha1", Kind: "KubeProxyConfiguration"},
		ClientConnection:   componentbasev1alpha1.ClientConnectionConfiguration{Kubeconfig: l.at(layout.KubeProxyKubeconfig)},
		BindAddress:        "0.0.0.0",
		MetricsBindAddress: net.JoinHostPort(l.loopback.String(), "10249"),
		Mode:               kubeproxyv1alpha1.ProxyMode(c.Network.KubeProxyMode),
		ClusterCIDR:        strings.Join(cidrs, ","),
	}
	if c.Network.KubeProxyMode == "ipvs" {
		cfg.IPVS.Scheduler = "rr"
	}
	return cfg
}

// schedulerConfig is the control-plane node's KubeSchedulerConfiguration.
func schedulerConfig(l placement) *schedulerv1.KubeSchedulerConfiguration {
	t, f := true, false
	return &schedulerv1.KubeSchedulerConfiguration{
		TypeMeta:               metav1.TypeMeta{APIVersion: "kubescheduler.config.k8s.io/v1", Kind: "KubeSchedulerConfiguration"},
		LeaderElection:         componentbasev1alpha1.LeaderElectionConfiguration{LeaderElect: &t},
		ClientConnection:       componentbasev1alpha1.ClientConnectionConfiguration{Kubeconfig: l.at(layout.SchedulerKubeconfig)},
		DebuggingConfiguration: componentbasev1alpha1.DebuggingConfiguration{EnableProfiling: &f},
	}
}

// encryptionConfig encrypts Secrets with the bundle's key, keeping the
// identity provider last so Secrets written before encryption stay
// readable.
func encryptionConfig(c *ir.Cluster, key []byte) *apiserverv1.EncryptionConfiguration {
	k := []apiserverv1.Key{{Name: "kcompile-1", Secret: base64.StdEncoding.EncodeToString(key)}}
	var p apiserverv1.ProviderConfiguration
	switch c.Security.EncryptionProvider {
	case "aesgcm":
		p.AESGCM = &apiserverv1.AESConfiguration{Keys: k}
	case "aescbc":
		p.AESCBC = &apiserverv1.AESConfiguration{Keys: k}
	default:
		p.Secretbox = &apiserverv1.SecretboxConfiguration{Keys: k}
	}
	return &apiserverv1.EncryptionConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiserver.config.k8s.io/v1", Kind: "EncryptionConfiguration"},
		Resources: []apiserverv1.ResourceConfiguration{{
			Resources: []string{"secrets"},
			Providers: []apiserverv1.ProviderConfiguration{p, {Identity: &apiserverv1.IdentityConfiguration{}}},
		}},
	}
}

// auditPolicy logs who did what to every object, without the bodies of
// Secrets, ConfigMaps and token reviews (which carry credentials), and
// without the noise of health checks, of the system's own reads and of
// node heartbeats: every kubelet renews its Lease every 10 s, so 5,000
// nodes would write 500 events a second, most of the log, each telling
// only that a node is alive. A node's Lease being created, patched or
// deleted, and any other writer's renewal, are still logged.
func auditPolicy() *auditv1.Policy {
	return &auditv1.Policy{
		TypeMeta:          metav1.TypeMeta{APIVersion: "audit.k8s.io/v1", Kind: "Policy"},
		OmitStages:        []auditv1.Stage{auditv1.StageRequestReceived},
		OmitManagedFields: true,
		Rules: []auditv1.PolicyRule{
			{Level: auditv1.LevelNone, NonResourceURLs: []string{"/healthz*", "/livez*", "/readyz*", "/version", "/metrics"}},
			{Level: auditv1.LevelNone, Users: []string{"system:kube-proxy"}, Verbs: []string{"watch"},
				Resources: []auditv1.GroupResources{{Group: "", Resources: []string{"endpoints", "services", "services/status"}}}},
			{Level: auditv1.LevelNone, UserGroups: []string{"system:nodes"}, Verbs: []string{"get"},
				Resources: []auditv1.GroupResources{{Group: "", Resources: []string{"nodes", "nodes/status"}}}},
			{Level: auditv1.LevelNone, Verbs: []string{"get", "list", "watch"},
				Resources: []auditv1.GroupResources{{Group: "coordination.k8s.io", Resources: []string{"leases"}}}},
			{Level: auditv1.LevelNone, UserGroups: []string{"system:nodes"}, Verbs: []string{"update"}, Namespaces: []string{"kube-node-lease"},
				Resources: []auditv1.GroupResources{{Group: "coordination.k8s.io", Resources: []string{"leases"}}}},
			{Level: auditv1.LevelMetadata, Resources: []auditv1.GroupResources{
				{Group: "", Resources: []string{"secrets", "configmaps", "serviceaccounts/token"}},
				{Group: "authentication.k8s.io", Resources: []string{"tokenreviews"}},
			}},
			{Level: auditv1.LevelRequest, Verbs: []string{"create", "update", "patch", "delete", "deletecollection"}},
			{Level: auditv1.LevelMetadata},
		},
	}
}

// renderCache remembers rendered and verified configs by content within
// one build: most nodes of a large cluster share theirs.
type renderCache struct {
	rendered map[string][]byte
	verified map[[32]byte]error
	// units are the units as built, by tree path, for verify to hold
	// what systemd will read to them.
	units map[string]unitfile.File
}

func newRenderCache() *renderCache {
	return &renderCache{rendered: map[string][]byte{}, verified: map[[32]byte]error{}, units: map[string]unitfile.File{}}
}

// marshal is marshalConfig, once per distinct config.
func (rc *renderCache) marshal(v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	key := fmt.Sprintf("%T%s", v, j)
	if b, ok := rc.rendered[key]; ok {
		return b, nil
	}
	b, err := marshalConfig(v)
	if err == nil {
		rc.rendered[key] = b
	}
	return b, err
}

// once runs check for each distinct content.
func (rc *renderCache) once(data []byte, check func() error) error {
	key := sha256.Sum256(data)
	if err, ok := rc.verified[key]; ok {
		return err
	}
	err := check()
	rc.verified[key] = err
	return err
}

// marshalConfig renders a component config as YAML. Nulls and empty
// strings are left out: every component defaults them itself. Empty
// objects stay, since some mean something ({identity: {}}).
func marshalConfig(v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var tree any
	if err := json.Unmarshal(j, &tree); err != nil {
		return nil, err
	}
	return yaml.Marshal(prune(tree, nil))
}

// prune drops zero values from a decoded document, except inside the
// maps keep names (nil keeps none), whose empty values mean something.
func prune(v any, keep func(key string) bool) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, val := range x {
			if m, ok := val.(map[string]any); ok && keep != nil && keep(k) {
				out[k] = m
				continue
			}
			if p := prune(val, keep); !empty(p) {
				out[k] = p
			}
		}
		return out
	case []any:
		out := make([]any, 0, len(x))
		for _, val := range x {
			out = append(out, prune(val, keep))
		}
		return out
	}
	return v
}

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	}
	return false
}

// verifyConfig decodes a rendered config strictly into a fresh value of
// its upstream type, as its component will, and checks that nothing was
// lost or added on the way.
func verifyConfig(data []byte, want any) error {
	got := reflect.New(reflect.TypeOf(want).Elem()).Interface()
	if err := yaml.UnmarshalStrict(data, got); err != nil {
		return fmt.Errorf("does not decode strictly as %T: %w", want, err)
	}
	a, err := json.Marshal(got)
	if err != nil {
		return err
	}
	b, err := json.Marshal(want)
	if err != nil {
		return err
	}
	if !bytes.Equal(a, b) {
		return fmt.Errorf("decodes as %T into something else than was rendered", want)
	}
	return nil
}

// sortedPaths lists a map's keys in order, for deterministic trees.
func sortedPaths[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func fileMode(m uint32) fs.FileMode { return fs.FileMode(m) }
