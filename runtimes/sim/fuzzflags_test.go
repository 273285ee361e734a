package sim

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/pflag"
	etcdflags "go.etcd.io/etcd/pkg/v3/flags"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
	schedoptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	kubeletoptions "k8s.io/kubernetes/cmd/kubelet/app/options"
	"k8s.io/kubernetes/pkg/apis/core"
	corev1conv "k8s.io/kubernetes/pkg/apis/core/v1"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"

	"github.com/kcompile/kcompile/internal/fixture/specfuzz"
	"github.com/kcompile/kcompile/internal/unitfile"
)

// FuzzComponentFlags is the property of specfuzz.Harness with the
// components as the consumers: every string field of the schema in turn,
// every node's command lines parsed by the programs' own flag sets
// (kubelet, kube-apiserver, kube-controller-manager, kube-scheduler,
// kube-proxy, etcd), the flags' parsed values compared with the plain
// build's, and what the programs validate themselves validated by their
// code: the kubelet's flags, the Node it registers (labels, taints, name)
// by the API server's validation, etcd's configuration and initial
// cluster. A value a program would refuse must be refused by
// `kcompile check`, at its position.
func FuzzComponentFlags(f *testing.F) {
	h := specfuzz.NewHarness(f, componentLeaves)
	seeds := specfuzz.Seeds()
	for _, s := range specfuzz.Sample(len(h.Fields), 6) {
		f.Add(uint16(s[0]), seeds[s[1]])
	}
	f.Fuzz(func(t *testing.T, which uint16, value string) {
		if !utf8.ValidString(value) {
			t.Skip("a CUE string is Unicode text")
		}
		h.Check(t, h.Fields[int(which)%len(h.Fields)], value)
	})
}

// componentLeaves parses every component's command line of every node of
// the systemd tree with the component's own flag set.
func componentLeaves(o specfuzz.Outcome) ([]specfuzz.Leaf, error) {
	tree := o.Output.Trees["systemd"]
	if tree == nil {
		return nil, fmt.Errorf("no systemd tree")
	}
	var out []specfuzz.Leaf
	for _, file := range tree.Files() {
		parts := strings.Split(file.Path, "/")
		if len(parts) < 3 || parts[0] != "nodes" || !strings.HasSuffix(file.Path, ".service") {
			continue
		}
		node, unit := parts[1], path.Base(file.Path)
		parse, ok := componentParser(unit)
		if !ok {
			continue
		}
		u, err := unitfile.Parse(file.Data)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", node, unit, err)
		}
		cmds := u.Commands("Service", "ExecStart")
		if len(cmds) != 1 {
			return nil, fmt.Errorf("%s %s has %d ExecStart", node, unit, len(cmds))
		}
		flags, err := parse(cmds[0].Argv[1:])
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w\n%q", node, unit, err, cmds[0].Argv)
		}
		for _, k := range slices.Sorted(maps.Keys(flags)) {
			// A list or map flag prints its items in its own order (a
			// map's sorted by key): compared item by item.
			at := node + " " + unit + " --" + k
			if !strings.Contains(flags[k], ",") {
				out = append(out, specfuzz.Leaf{Loc: at, Val: flags[k]})
				continue
			}
			for item := range strings.SplitSeq(strings.Trim(flags[k], "[]"), ",") {
				out = append(out, specfuzz.Leaf{Loc: at + " item", Val: item})
			}
		}
		if unit == "kubelet.service" {
			if err := validateNode(node, flags); err != nil {
				return nil, fmt.Errorf("%s: the Node the kubelet registers: %w", node, err)
			}
		}
	}
	return out, nil
}

// componentParser parses a unit's arguments with its program's flag set
// and returns every flag set, by name, as the program's value prints it.
func componentParser(unit string) (func([]string) (map[string]string, error), bool) {
	p, ok := map[string]func([]string) (map[string]string, error){
		"kubelet.service": func(args []string) (map[string]string, error) {
			fs := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
			flags := kubeletoptions.NewKubeletFlags()
			flags.AddFlags(fs)
			cfg, err := kubeletoptions.NewKubeletConfiguration()
			if err != nil {
				return nil, err
			}
			kubeletoptions.AddKubeletConfigFlags(fs, cfg)
			out, err := parsePflags(fs, args)
			if err != nil {
				return nil, err
			}
			if err := kubeletoptions.ValidateKubeletFlags(flags); err != nil {
				return nil, err
			}
			return out, nil
		},
		"kube-apiserver.service": func(args []string) (map[string]string, error) {
			fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
			for _, s := range apiserveroptions.NewServerRunOptions().Flags().FlagSets {
				fs.AddFlagSet(s)
			}
			return parsePflags(fs, args)
		},
		"kube-controller-manager.service": func(args []string) (map[string]string, error) {
			s, err := kcmoptions.NewKubeControllerManagerOptions()
			if err != nil {
				return nil, err
			}
			fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
			for _, set := range s.Flags(kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases()).FlagSets {
				fs.AddFlagSet(set)
			}
			return parsePflags(fs, args)
		},
		"kube-scheduler.service": func(args []string) (map[string]string, error) {
			fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
			for _, set := range schedoptions.NewOptions().Flags.FlagSets {
				fs.AddFlagSet(set)
			}
			return parsePflags(fs, args)
		},
		"kube-proxy.service": func(args []string) (map[string]string, error) {
			fs := pflag.NewFlagSet("kube-proxy", pflag.ContinueOnError)
			proxyapp.NewOptions().AddFlags(fs)
			return parsePflags(fs, args)
		},
		"etcd.service": func(args []string) (map[string]string, error) {
			cfg := embed.NewConfig()
			cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
			fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			cfg.AddFlags(fs)
			// The flag etcd's main package adds beside the embedded server's.
			state := etcdflags.NewSelectiveStringValue(embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting)
			fs.Var(state, "initial-cluster-state", "")
			if err := fs.Parse(args); err != nil {
				return nil, err
			}
			if fs.NArg() != 0 {
				return nil, fmt.Errorf("stray arguments %q", fs.Args())
			}
			out := map[string]string{}
			fs.Visit(func(f *flag.Flag) { out[f.Name] = f.Value.String() })
			// As etcd's main package completes the configuration before it
			// validates it.
			cfg.ClusterState = state.String()
			cfg.ListenPeerUrls = etcdflags.UniqueURLsFromFlag(fs, "listen-peer-urls")
			cfg.AdvertisePeerUrls = etcdflags.UniqueURLsFromFlag(fs, "initial-advertise-peer-urls")
			cfg.ListenClientUrls = etcdflags.UniqueURLsFromFlag(fs, "listen-client-urls")
			cfg.AdvertiseClientUrls = etcdflags.UniqueURLsFromFlag(fs, "advertise-client-urls")
			cfg.ListenMetricsUrls = etcdflags.UniqueURLsFromFlag(fs, "listen-metrics-urls")
			if err := cfg.Validate(); err != nil {
				return nil, err
			}
			// What etcd makes of its initial cluster: member names and peer
			// URLs, each name once.
			if _, err := embedInitialCluster(cfg); err != nil {
				return nil, err
			}
			return out, nil
		},
	}[unit]
	return p, ok
}

// embedInitialCluster parses --initial-cluster as etcd does when it
// bootstraps a member.
func embedInitialCluster(cfg *embed.Config) (string, error) {
	m, _, err := cfg.PeerURLsMapAndToken("etcd")
	if err != nil {
		return "", fmt.Errorf("--initial-cluster: %w", err)
	}
	if _, ok := m[cfg.Name]; !ok {
		return "", fmt.Errorf("--initial-cluster %q does not name the member itself (%q)", cfg.InitialCluster, cfg.Name)
	}
	return m.String(), nil
}

func parsePflags(fs *pflag.FlagSet, args []string) (map[string]string, error) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("stray arguments %q", fs.Args())
	}
	out := map[string]string{}
	fs.Visit(func(f *pflag.Flag) { out[f.Name] = f.Value.String() })
	return out, nil
}

// validateNode validates the Node a kubelet with these flags registers
// with the API server's own validation.
func validateNode(node string, flags map[string]string) error {
	fs := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	kf := kubeletoptions.NewKubeletFlags()
	kf.AddFlags(fs)
	cfg, err := kubeletoptions.NewKubeletConfiguration()
	if err != nil {
		return err
	}
	kubeletoptions.AddKubeletConfigFlags(fs, cfg)
	for k, v := range flags {
		if err := fs.Set(k, v); err != nil {
			return err
		}
	}
	// The kubelet names its Node by --hostname-override, else by the
	// machine's host name, which kcompile sets to the node's name.
	name := kf.HostnameOverride
	if name == "" {
		name = node
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: kf.NodeLabels}, Spec: corev1.NodeSpec{Taints: cfg.RegisterWithTaints}}
	var internal core.Node
	if err := corev1conv.Convert_v1_Node_To_core_Node(n, &internal, nil); err != nil {
		return err
	}
	if errs := corevalidation.ValidateNode(&internal); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}
