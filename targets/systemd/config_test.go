package systemd

import (
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/internal/fixture"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/kcompile/kcompile/compiler/ir"
)

// TestConfigsDecodeStrictly renders every component config of every
// example and decodes it back strictly with its upstream type.
func TestConfigsDecodeStrictly(t *testing.T) {
	for _, name := range fixture.Examples() {
		c := compileExample(t, name)
		for _, n := range c.Nodes {
			var cfgs []any
			if n.RunsPods() {
				cfgs = append(cfgs, kubeletConfig(c, n, Options{}.placement(n)))
				if n.Runs(ir.ComponentKubeProxy) {
					cfgs = append(cfgs, kubeProxyConfig(c, Options{}.placement(c.Nodes[0])))
				}
			}
			if n.Runs(ir.ComponentAPIServer) {
				cfgs = append(cfgs, schedulerConfig(Options{}.placement(c.Nodes[0])), encryptionConfig(c, make([]byte, 32)), auditPolicy())
			}
			for _, cfg := range cfgs {
				data, err := marshalConfig(cfg)
				if err != nil {
					t.Fatalf("%s/%s: %T: %v", name, n.Name, cfg, err)
				}
				if err := verifyConfig(data, cfg); err != nil {
					t.Errorf("%s/%s: %v\n%s", name, n.Name, err, data)
				}
				if !strings.HasPrefix(string(data), "apiVersion: ") && !strings.Contains(string(data), "\napiVersion: ") {
					t.Errorf("%s/%s: %T has no apiVersion", name, n.Name, cfg)
				}
			}
		}
	}
}

func TestVerifyConfigRejectsUnknownFields(t *testing.T) {
	c := compileExample(t, "single-node")
	cfg := kubeletConfig(c, c.Nodes[0], Options{}.placement(c.Nodes[0]))
	data, err := marshalConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyConfig(append(data, []byte("clusterDNSes: [1.2.3.4]\n")...), cfg); err == nil {
		t.Error("an unknown field passed strict decoding")
	}
	if err := verifyConfig([]byte(strings.Replace(string(data), "maxPods: 110", "maxPods: 111", 1)), cfg); err == nil {
		t.Error("a changed value passed the round trip")
	}
}

func TestKubeletConfig(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	w := c.Nodes[3]
	cfg := kubeletConfig(c, w, Options{}.placement(w))
	if !slices.Equal(cfg.ClusterDNS, []string{"10.96.0.10"}) || cfg.ClusterDomain != "cluster.local" {
		t.Errorf("DNS %v %q", cfg.ClusterDNS, cfg.ClusterDomain)
	}
	if *cfg.Authentication.Anonymous.Enabled || !*cfg.Authentication.Webhook.Enabled || cfg.Authorization.Mode != kubeletv1beta1.KubeletAuthorizationModeWebhook {
		t.Error("kubelet authentication is not webhook-only")
	}
	if cfg.CgroupDriver != "systemd" || cfg.ContainerRuntimeEndpoint != "unix:///run/containerd/containerd.sock" || cfg.MaxPods != 110 {
		t.Errorf("runtime settings %q %q %d", cfg.CgroupDriver, cfg.ContainerRuntimeEndpoint, cfg.MaxPods)
	}
	if cfg.ShutdownGracePeriod.Duration != 30*time.Second || cfg.ShutdownGracePeriodCriticalPods.Duration != 10*time.Second {
		t.Errorf("graceful node shutdown %v, critical %v; want the schema's 30s and 10s", cfg.ShutdownGracePeriod, cfg.ShutdownGracePeriodCriticalPods)
	}
	// Turned off, both are left to the kubelet's default (off).
	c.Kubelet.ShutdownGrace, c.Kubelet.ShutdownGraceCritical = 0, 0
	cfg = kubeletConfig(c, w, Options{}.placement(w))
	if cfg.ShutdownGracePeriod.Duration != 0 || cfg.ShutdownGracePeriodCriticalPods.Duration != 0 {
		t.Errorf("graceful node shutdown turned off, yet %v, %v", cfg.ShutdownGracePeriod, cfg.ShutdownGracePeriodCriticalPods)
	}
}

func TestEncryptionConfigCarriesKey(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	key := []byte("0123456789abcdef0123456789abcdef")
	cfg := encryptionConfig(c, key)
	p := cfg.Resources[0].Providers
	if len(p) != 2 || p[0].Secretbox == nil || p[1].Identity == nil {
		t.Fatalf("providers %+v", p)
	}
	if p[0].Secretbox.Keys[0].Secret != base64.StdEncoding.EncodeToString(key) {
		t.Error("the bundle's key is not the secretbox key")
	}
}

// TestCrossArtifactValues: one value per setting across components.
func TestCrossArtifactValues(t *testing.T) {
	c := compileExample(t, "dual-stack")
	cp := c.Nodes[0]
	api := strings.Join(apiServerArgs(c, cp, Options{}.placement(cp)), " ")
	cm := strings.Join(controllerManagerArgs(c, Options{}.placement(c.Nodes[0])), " ")
	svc := "10.96.0.0/16,fd00:10:96::/112"
	pods := "10.244.0.0/16,fd00:10:244::/56"
	if !strings.Contains(api, "--service-cluster-ip-range="+svc) || !strings.Contains(cm, "--service-cluster-ip-range="+svc) {
		t.Errorf("service CIDRs differ:\n%s\n%s", api, cm)
	}
	if !strings.Contains(cm, "--cluster-cidr="+pods) || kubeProxyConfig(c, Options{}.placement(c.Nodes[0])).ClusterCIDR != pods {
		t.Errorf("pod CIDRs differ")
	}
	if !strings.Contains(cm, "--node-cidr-mask-size-ipv4=24") || !strings.Contains(cm, "--node-cidr-mask-size-ipv6=64") {
		t.Errorf("mask sizes missing: %s", cm)
	}
	// A stacked API server talks to its own member only.
	if !strings.Contains(api, "--etcd-servers=https://"+cp.Address().String()+":2379 ") {
		t.Errorf("etcd servers: %s", api)
	}
	// An API server without a member of its own talks to all of them.
	ext := fixture.Cluster(t, "external-etcd", nil)
	for _, n := range ext.Nodes {
		if n.Runs(ir.ComponentAPIServer) {
			if got := strings.Join(etcdServers(ext, n), ","); got != strings.Join(ext.Etcd.ClientURLs(), ",") || len(ext.Etcd.ClientURLs()) != 5 {
				t.Errorf("external etcd: %s talks to %s", n.Name, got)
			}
		}
	}
}

func TestKubeletArgsLeaveRestrictedLabels(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	argv := kubeletArgs(c.Nodes[0], Options{}.placement(c.Nodes[0]))
	args := strings.Join(argv, " ")
	for _, a := range argv {
		if strings.HasPrefix(a, "--node-labels=") && strings.Contains(a, "node-role.kubernetes.io") {
			t.Errorf("the kubelet would set a label NodeRestriction refuses: %s", a)
		}
	}
	if !strings.Contains(args, "--register-with-taints=node-role.kubernetes.io/control-plane:NoSchedule") {
		t.Errorf("control-plane taint missing: %s", args)
	}
	if !strings.Contains(args, "topology.kubernetes.io/zone=a") {
		t.Errorf("zone label missing: %s", args)
	}
	for key, want := range map[string]bool{"node-role.kubernetes.io/control-plane": false, "topology.kubernetes.io/zone": true,
		"node.kubernetes.io/pool": true, "example.com/tier": true, "kubernetes.io/hostname": true, "foo.k8s.io/x": false} {
		if kubeletMaySet(key) != want {
			t.Errorf("kubeletMaySet(%q) = %v", key, !want)
		}
	}
}
