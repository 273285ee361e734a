package nspawn

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/pipeline"
)

// A host that can boot anything: every module, conntrack limits above
// what kube-proxy asks for.
func ampleHost() hostFacts {
	return hostFacts{kernel: everyModule(), conntrack: conntrackFacts{max: 1 << 20, hashsize: 1 << 18, cpus: 2}}
}

// checkHere is check on this host, names resolved by its resolver.
func checkHere(t *testing.T, c *ir.Cluster) []string {
	t.Helper()
	h, err := readHostFacts()
	if err != nil {
		t.Fatal(err)
	}
	why, _ := check(t.Context(), c, pipeline.Systemd, h, nil)
	return why
}

func resolveTo(addrs ...string) Resolver {
	return func(context.Context, string) ([]netip.Addr, error) {
		var as []netip.Addr
		for _, a := range addrs {
			as = append(as, netip.MustParseAddr(a))
		}
		return as, nil
	}
}

func TestCheckKernelModules(t *testing.T) {
	ipvs := compileDir(t, fixture.Path("examples/single-node"), map[string]string{"x.cue": "package cluster\nnetwork: kubeProxy: mode: \"ipvs\"\n"})
	h := ampleHost()
	if why, _ := check(t.Context(), ipvs, pipeline.Systemd, h, nil); len(why) != 0 {
		t.Fatalf("a kernel with IPVS built in: %q", why)
	}
	delete(h.kernel.config, "CONFIG_IP_VS")
	why, _ := check(t.Context(), ipvs, pipeline.Systemd, h, nil)
	wantOne(t, why, "refusal", "network.kubeProxy.mode ipvs", "ip_vs", "6.1.0-test", "does not set CONFIG_IP_VS", "use nftables or iptables")
	h.kernel.config["CONFIG_IP_VS"] = "m"
	why, _ = check(t.Context(), ipvs, pipeline.Systemd, h, nil)
	wantOne(t, why, "refusal", "built as modules but not loaded: modprobe ip_vs on the host first")
	h.kernel.config = map[string]string{}
	h.kernel.loaded = map[string]bool{"overlay": true, "br_netfilter": true, "nf_conntrack": true, "vxlan": true}
	why, _ = check(t.Context(), ipvs, pipeline.Systemd, h, nil)
	wantOne(t, why, "refusal", "no /proc/config.gz", "modprobe ip_vs ip_vs_rr ip_vs_sh ip_vs_wrr on the host first")

	// This host, as the boot tests find it: ipvs is refused exactly
	// when its kernel lacks IPVS, and the reason names what it lacks.
	live, err := readKernelFacts()
	if err != nil {
		t.Fatal(err)
	}
	_, lack := live.split([]string{"ip_vs"})
	why = checkHere(t, ipvs)
	refused := strings.Contains(strings.Join(why, "\n"), "network.kubeProxy.mode ipvs")
	if refused != (len(lack) > 0) {
		t.Errorf("this host lacks %v, and Check says %q", lack, why)
	}
}

func TestCheckConntrack(t *testing.T) {
	c := fixture.Cluster(t, "single-node", nil)
	h := ampleHost()
	h.conntrack = conntrackFacts{max: 65536, hashsize: 16384, cpus: 2}
	why, _ := check(t.Context(), c, pipeline.Systemd, h, nil)
	if len(why) != 2 {
		t.Fatalf("want the limit and the hash size refused: %q", why)
	}
	for i, want := range []string{"nf_conntrack_max to 131072 (32768 per CPU, 2 CPUs, at least 131072)", "hashsize to 32768"} {
		if !strings.Contains(why[i], want) || !strings.Contains(why[i], "on the host first") {
			t.Errorf("refusal %d does not say %q and the host's fix:\n%s", i, want, why[i])
		}
	}
	// kube-proxy raises only a lower limit.
	h.conntrack = conntrackFacts{max: 262144, hashsize: 65536, cpus: 8}
	if why, _ := check(t.Context(), c, pipeline.Systemd, h, nil); len(why) != 0 {
		t.Errorf("limits equal to kube-proxy's: %q", why)
	}
	h.conntrack.max = 200000
	why, _ = check(t.Context(), c, pipeline.Systemd, h, nil)
	wantOne(t, why, "refusal", "nf_conntrack_max to 262144 (32768 per CPU, 8 CPUs", "this host's is 200000", "sysctl -w net.netfilter.nf_conntrack_max=262144")
	h.conntrack = conntrackFacts{max: 1 << 20, hashsize: 1 << 18, cpus: 64}
	if why, _ := check(t.Context(), c, pipeline.Systemd, h, nil); len(why) != 0 {
		t.Errorf("64 CPUs ask for the 1,048,576 cap, which the host has: %q", why)
	}
	h.conntrack = conntrackFacts{cpus: 2}
	why, _ = check(t.Context(), c, pipeline.Systemd, h, nil)
	wantOne(t, why, "refusal", "nf_conntrack is not loaded", "modprobe nf_conntrack on the host first")
	if n, err := countCPUs("0-3,8,10-11"); n != 7 || err != nil {
		t.Errorf("countCPUs = %d, %v", n, err)
	}
}

func TestCheckNamedEndpoint(t *testing.T) {
	named := compileDir(t, fixture.Path("examples/single-node"), map[string]string{"x.cue": "package cluster\ncontrolPlane: endpoint: host: \"api.lab.test\"\n"})
	h := ampleHost()
	nxdomain := func(context.Context, string) ([]netip.Addr, error) { return nil, errors.New("no such host") }
	why, _ := check(t.Context(), named, pipeline.Systemd, h, nxdomain)
	wantOne(t, why, "refusal", `controlPlane.endpoint.host "api.lab.test" does not resolve on this host (no such host)`, "192.168.50.0/24", "/etc/hosts")
	why, _ = check(t.Context(), named, pipeline.Systemd, h, resolveTo("203.0.113.7"))
	wantOne(t, why, "refusal", "resolves on this host to 203.0.113.7, on no node network (192.168.50.0/24)")

	why, at := check(t.Context(), named, pipeline.Systemd, h, resolveTo("2001:db8::1", "192.168.50.20"))
	if len(why) != 0 || at != netip.MustParseAddr("192.168.50.20") {
		t.Fatalf("a name on the node network: %q, %s", why, at)
	}
	p, err := newPlan(named, "/w")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.named(named, at); err != nil {
		t.Fatal(err)
	}
	if p.endpoint != netip.MustParseAddrPort("192.168.50.20:6443") {
		t.Errorf("up serves the endpoint at %s, want 192.168.50.20:6443", p.endpoint)
	}
	a, err := decide(named, p, everyFact(), pipeline.Systemd, "")
	if err != nil {
		t.Fatal(err)
	}
	if hosts := a.hosts; !strings.HasSuffix(hosts, localHosts+"192.168.50.20\tapi.lab.test\n") {
		t.Errorf("the machines' /etc/hosts:\n%s", hosts)
	}
	// The host's own address on the bridge is not the endpoint's.
	p, _ = newPlan(named, "/w")
	if err := p.named(named, netip.MustParseAddr("192.168.50.1")); err == nil || !strings.Contains(err.Error(), "the host's own address on up's bridge") {
		t.Errorf("the gateway as the endpoint: %v", err)
	}
	// The node's own address: no balancer, the node holds it.
	p, _ = newPlan(named, "/w")
	if err := p.named(named, netip.MustParseAddr("192.168.50.10")); err != nil || p.endpoint.IsValid() || len(p.hosts) != 1 {
		t.Errorf("the node's address as the endpoint: %v, endpoint %s", err, p.endpoint)
	}
}

// TestCheckRefusesTheModesUpCannotBoot: each with its reason, the same
// on any host, or (a tunnel device) naming the host's kernel.
func TestCheckRefusesTheModesUpCannotBoot(t *testing.T) {
	wireguard := compileDir(t, fixture.Path("examples/single-node"), map[string]string{"x.cue": "package cluster\nnetwork: cni: mode: \"wireguard\"\n"})
	// TestUpCilium's cluster, in each tunnel mode.
	cilium := func(mode string) *ir.Cluster {
		return compileDir(t, fixture.Path("runtimes/nspawn/testdata/cilium"), map[string]string{"x.cue": "package cluster\nnetwork: cni: mode: \"" + mode + "\"\n"})
	}
	noGeneve := ampleHost()
	delete(noGeneve.kernel.config, "CONFIG_GENEVE")
	for _, tc := range []struct {
		name    string
		cluster *ir.Cluster
		host    hostFacts
		want    []string
	}{
		{"flannel wireguard", wireguard, ampleHost(), []string{"network.cni.mode wireguard: this host's kernel cannot make wireguard devices inside a namespace"}},
		{"calico", fixture.Cluster(t, "ha-stacked", nil), ampleHost(), []string{"network.cni.plugin calico: the Go module proxy serves no release of github.com/projectcalico/calico", "./api, a nested module"}},
		{"cilium without kube-proxy", fixture.Cluster(t, "external-etcd", nil), ampleHost(), nil},
		{"cilium geneve on a kernel without it", cilium("geneve"), noGeneve, []string{"network.cni.mode geneve: cilium's tunnel is a geneve device, which this host's kernel 6.1.0-test has neither built in nor loaded (its configuration does not set CONFIG_GENEVE)"}},
		{"cilium geneve", cilium("geneve"), ampleHost(), nil},
		{"cilium vxlan", cilium("vxlan"), ampleHost(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, _ := check(t.Context(), tc.cluster, pipeline.Systemd, tc.host, resolveTo("10.0.0.1", "192.168.50.20", "10.40.0.5"))
			var cni []string
			for _, w := range why {
				if strings.HasPrefix(w, "network.cni.") {
					cni = append(cni, w)
				}
			}
			if tc.want == nil {
				if len(cni) > 0 {
					t.Errorf("refused: %q", cni)
				}
				return
			}
			wantOne(t, cni, "refusal", tc.want...)
		})
	}
}
