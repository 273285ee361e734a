package systemd

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	schedulerv1 "k8s.io/kube-scheduler/config/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/unitfile"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
)

// verify parses every file of the tree with the parser its consumer uses
// and checks that values shared by several components are one value. A
// failure is a compiler bug: the spec was checked before the tree was
// built.
func verify(tree *targets.Tree, c *ir.Cluster, rc *renderCache, unverified map[string]bool) error {
	var errs []error
	fail := func(p string, err error) { errs = append(errs, fmt.Errorf("%s: %w", p, err)) }
	flags := map[string][]string{} // flag=value seen per flag name, across units
	var proxyCIDRs []string
	// Kubeconfigs are one per client and node, and loading them is most
	// of the verification of a large cluster: they are loaded on every
	// core after the walk.
	var kubeconfigs []targets.File
	for _, f := range tree.Files() {
		p := f.Path
		switch {
		case strings.HasSuffix(p, ".service"):
			u, err := unitfile.Parse(f.Data)
			if err != nil {
				fail(p, err)
				continue
			}
			// What systemd reads must be what was built: no value may
			// have added a line, a directive or an argument.
			if built, ok := rc.units[p]; ok {
				if err := sameUnit(built, u); err != nil {
					fail(p, err)
					continue
				}
			}
			exec := u.Commands("Service", "ExecStart")
			if len(exec) != 1 {
				fail(p, fmt.Errorf("has %d ExecStart lines", len(exec)))
				continue
			}
			for _, arg := range exec[0].Argv[1:] {
				if name, value, ok := strings.Cut(arg, "="); ok {
					flags[name] = append(flags[name], value)
				}
			}
		case strings.HasSuffix(p, layout.KubeletConfig):
			if err := rc.once(f.Data, func() error {
				var cfg kubeletv1beta1.KubeletConfiguration
				if err := strict(f.Data, &cfg); err != nil {
					return err
				}
				if !slices.Equal(cfg.ClusterDNS, []string{c.Network.DNSServiceIP.String()}) {
					return fmt.Errorf("clusterDNS %v is not the cluster's DNS IP %s", cfg.ClusterDNS, c.Network.DNSServiceIP)
				}
				return nil
			}); err != nil {
				fail(p, err)
			}
		case strings.HasSuffix(p, layout.KubeProxyConfig):
			if err := rc.once(f.Data, func() error {
				var cfg kubeproxyv1alpha1.KubeProxyConfiguration
				if err := strict(f.Data, &cfg); err != nil {
					return err
				}
				proxyCIDRs = append(proxyCIDRs, cfg.ClusterCIDR)
				return nil
			}); err != nil {
				fail(p, err)
			}
		case strings.HasSuffix(p, layout.SchedulerConfig):
			var cfg schedulerv1.KubeSchedulerConfiguration
			if err := strict(f.Data, &cfg); err != nil {
				fail(p, err)
			}
		case strings.HasSuffix(p, layout.AuditPolicy):
			var cfg auditv1.Policy
			if err := strict(f.Data, &cfg); err != nil {
				fail(p, err)
			}
		case strings.HasSuffix(p, layout.EncryptionConfig):
			var cfg apiserverv1.EncryptionConfiguration
			if err := strict(f.Data, &cfg); err != nil {
				fail(p, err)
			}
		case strings.HasSuffix(p, ".conflist"):
			if _, err := libcni.ConfListFromBytes(f.Data); err != nil {
				fail(p, err)
			}
		case strings.HasSuffix(p, "/"+layout.BootDropIn):
			if err := verifyBootDropIn(tree, p, f.Data, rc); err != nil {
				fail(p, err)
			}
		case strings.Contains(p, "/"+layout.ContainerdHostsDir+"/") || strings.HasSuffix(p, "/"+layout.ContainersRegistries) ||
			strings.HasSuffix(p, "/"+layout.ContainerdConfig):
			if err := rc.once(f.Data, func() error { return verifyRuntimeFile(p, f.Data, c) }); err != nil {
				fail(p, err)
			}
		case strings.HasSuffix(p, ".toml") || strings.HasSuffix(p, "10-kcompile.conf"):
			if _, err := verifyTOML(f.Data); err != nil {
				fail(p, err)
			}
		case strings.HasSuffix(p, ".conf") && strings.Contains(p, "/"+layout.KubernetesDir) || strings.HasSuffix(p, "kubeconfig") ||
			strings.HasSuffix(p, "kubeconfig.conf") || strings.HasPrefix(p, layout.ClusterTree("")) && strings.HasSuffix(p, ".conf"):
			if node, _, ok := layout.SplitTree(p); ok && unverified[node] {
				continue
			}
			kubeconfigs = append(kubeconfigs, f)
		}
	}
	loadErrs := make([]error, len(kubeconfigs))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				_, loadErrs[i] = pki.LoadKubeconfig(kubeconfigs[i].Data)
			}
		}()
	}
	for i := range kubeconfigs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range loadErrs {
		if err != nil {
			fail(kubeconfigs[i].Path, err)
		}
	}
	// One value per setting across components.
	one := func(name string, want string) {
		for _, v := range flags[name] {
			if v != want {
				errs = append(errs, fmt.Errorf("--%s is %s in one unit, but the cluster's is %s", strings.TrimPrefix(name, "--"), v, want))
				return
			}
		}
	}
	one("--service-cluster-ip-range", ir.Join(c.Network.ServiceCIDRs, ","))
	one("--cluster-cidr", ir.Join(c.Network.PodCIDRs, ","))
	for _, v := range proxyCIDRs {
		if v != ir.Join(c.Network.PodCIDRs, ",") {
			errs = append(errs, fmt.Errorf("a kube-proxy clusterCIDR is %s, but the cluster's pod CIDRs are %s", v, ir.Join(c.Network.PodCIDRs, ",")))
			break
		}
	}
	if err := verifyAddons(tree, c); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("kcompile bug: the systemd tree does not verify: %w", errors.Join(errs...))
	}
	return nil
}

// sameUnit compares a unit as built with the unit parsed from its file:
// the same sections, directives, values and command arguments, in order.
func sameUnit(built, read unitfile.File) error {
	if len(built.Sections) != len(read.Sections) {
		return fmt.Errorf("reads as %d sections, built with %d", len(read.Sections), len(built.Sections))
	}
	for i, bs := range built.Sections {
		rs := read.Sections[i]
		if bs.Name != rs.Name || len(bs.Directives) != len(rs.Directives) {
			return fmt.Errorf("section [%s] reads as [%s] with %d directives, built with %d", bs.Name, rs.Name, len(rs.Directives), len(bs.Directives))
		}
		for j, bd := range bs.Directives {
			rd := rs.Directives[j]
			switch {
			case bd.Key != rd.Key:
				return fmt.Errorf("[%s] directive %d reads as %s, built as %s", bs.Name, j, rd.Key, bd.Key)
			case (bd.Command == nil) != (rd.Command == nil):
				return fmt.Errorf("[%s] %s: a command line in one and not the other", bs.Name, bd.Key)
			case bd.Command == nil && bd.Value != rd.Value:
				return fmt.Errorf("[%s] %s reads as %q, built as %q", bs.Name, bd.Key, rd.Value, bd.Value)
			case bd.Command != nil && (bd.Command.Prefix != rd.Command.Prefix || !slices.Equal(bd.Command.Argv, rd.Command.Argv)):
				return fmt.Errorf("[%s] %s reads as %d arguments %q, built with %d %q", bs.Name, bd.Key, len(rd.Command.Argv), rd.Command.Argv, len(bd.Command.Argv), bd.Command.Argv)
			}
		}
	}
	return nil
}

// strict decodes YAML into an upstream type, refusing unknown fields.
func strict(data []byte, into any) error {
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		return fmt.Errorf("does not decode strictly as %T: %w", into, err)
	}
	return nil
}

// verifyBootDropIn holds the drop-in to what was built and to the node's
// units: each unit it wants is a unit of the node's tree.
func verifyBootDropIn(tree *targets.Tree, p string, data []byte, rc *renderCache) error {
	u, err := unitfile.Parse(data)
	if err != nil {
		return err
	}
	if err := sameUnit(rc.units[p], u); err != nil {
		return err
	}
	node := strings.TrimSuffix(p, layout.BootDropIn)
	for _, name := range u.Get("Unit", "Wants") {
		if _, ok := tree.Get(node + layout.UnitDir + name); !ok {
			return fmt.Errorf("wants %s, which the node's tree does not have", name)
		}
	}
	return nil
}

// verifyRuntimeFile reads a runtime's configuration or registry file back
// as the runtime does, strictly where kcompile owns the whole file, and
// holds it to the cluster's runtime settings.
func verifyRuntimeFile(p string, data []byte, c *ir.Cluster) error {
	strict := func(into any) error {
		dec := toml.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		return dec.Decode(into)
	}
	rt := c.Runtime
	switch {
	case strings.HasSuffix(p, "/"+layout.ContainerdConfig):
		var cfg struct {
			Plugins struct {
				Images struct {
					Registry struct {
						ConfigPath string `toml:"config_path"`
					} `toml:"registry"`
				} `toml:"io.containerd.cri.v1.images"`
				Runtime struct {
					RestrictOOMScoreAdj bool `toml:"restrict_oom_score_adj"`
				} `toml:"io.containerd.cri.v1.runtime"`
			} `toml:"plugins"`
		}
		if err := toml.Unmarshal(data, &cfg); err != nil {
			return err
		}
		want := ""
		if len(rt.Mirrors) > 0 {
			want = layout.Abs(layout.ContainerdHostsDir)
		}
		if got := cfg.Plugins.Images.Registry.ConfigPath; got != want {
			return fmt.Errorf("registry config_path is %q, not %q", got, want)
		}
		if cfg.Plugins.Runtime.RestrictOOMScoreAdj != rt.RestrictOOMScoreAdj {
			return fmt.Errorf("restrict_oom_score_adj is %t, not the spec's %t", cfg.Plugins.Runtime.RestrictOOMScoreAdj, rt.RestrictOOMScoreAdj)
		}
	case strings.HasSuffix(p, "/"+layout.ContainersRegistries):
		var got crioRegistries
		if err := strict(&got); err != nil {
			return err
		}
		if len(got.Registry) != len(rt.Mirrors) {
			return fmt.Errorf("%d registries, the spec has %d", len(got.Registry), len(rt.Mirrors))
		}
		for i, m := range rt.Mirrors {
			r := got.Registry[i]
			var locations []string
			for _, x := range r.Mirror {
				scheme := "https://"
				if x.Insecure {
					scheme = "http://"
				}
				locations = append(locations, scheme+x.Location)
			}
			if r.Prefix != m.Registry || r.Location != m.Registry || !slices.Equal(locations, m.URLs()) {
				return fmt.Errorf("registry %s reads as %s with mirrors %v, not the spec's %v", m.Registry, r.Prefix, locations, m.URLs())
			}
		}
	default:
		registry := path.Base(path.Dir(p))
		i := slices.IndexFunc(rt.Mirrors, func(m ir.Mirror) bool { return m.Registry == registry })
		if i < 0 || path.Base(p) != "hosts.toml" {
			return fmt.Errorf("no registry of the spec has this file")
		}
		m := rt.Mirrors[i]
		var got struct {
			Server string                `toml:"server"`
			Host   map[string]mirrorHost `toml:"host"`
		}
		if err := strict(&got); err != nil {
			return err
		}
		order, err := tomlTables(data, "host")
		if err != nil {
			return err
		}
		if got.Server != upstream(registry) || !slices.Equal(order, m.URLs()) {
			return fmt.Errorf("reads as server %s with mirrors %v, not %s with the spec's %v", got.Server, order, upstream(registry), m.URLs())
		}
		for _, h := range got.Host {
			if !slices.Equal(h.Capabilities, []string{"pull", "resolve"}) {
				return fmt.Errorf("a mirror has the capabilities %v", h.Capabilities)
			}
		}
	}
	return nil
}

// tomlTables lists, in the order of the file, the names of the tables
// under parent: containerd tries mirrors in that order, which no decoding
// into a map keeps.
func tomlTables(data []byte, parent string) ([]string, error) {
	var p unstable.Parser
	p.Reset(data)
	var out []string
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind != unstable.Table {
			continue
		}
		var key []string
		for it := e.Key(); it.Next(); {
			key = append(key, string(it.Node().Data))
		}
		if len(key) == 2 && key[0] == parent {
			out = append(out, key[1])
		}
	}
	return out, p.Error()
}
