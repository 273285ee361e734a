package sim

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	kubeletoptions "k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeapiserveroptions "k8s.io/kubernetes/pkg/kubeapiserver/options"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/unitfile"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/systemd"
)

// flagSpec puts the values the kubelet's and the API server's command
// lines carry at their limits: labels with prefixes, dots, dashes and
// underscores, a label and a taint with empty values, several taints,
// and a list of admission plugins.
const flagSpec = `package cluster

apiVersion: "kcompile.dev/v1alpha1"
name:       "flags"
kubernetes: version: "1.37.2"
controlPlane: {nodes: cp1: address: "10.0.0.11", schedulable: true}
network: nodes: ["10.0.0.0/16"]
security: admission: plugins: ["NodeRestriction", "DenyServiceExternalIPs", "AlwaysPullImages", "EventRateLimit"]
workers: pools: p: {
	count: 1, namePattern: "w%d", firstAddress: "10.0.1.1", zones: ["eu-west_1.a"]
	labels: {
		"example.com/tier": "web_front-1.a"
		"empty":            ""
		"A.b-c_d":          "Z"
	}
	taints: [
		{key: "example.com/dedicated", value: "gpu_a-1.0", effect: "NoSchedule"},
		{key: "bare", effect: "NoExecute"},
		{key: "soft", value: "x", effect: "PreferNoSchedule"},
	]
}
`

// TestCompiledFlagsParseWithRealFlagSets reads the compiled command lines
// of the kubelet and the API server with those programs' own flag sets
// from Kubernetes: the labels, taints and admission plugins they end up
// with are exactly the spec's, and no argument is one the program does
// not know.
func TestCompiledFlagsParseWithRealFlagSets(t *testing.T) {
	c, diags := compiler.Compile(compiler.Source{Dir: t.TempDir(), Overlay: map[string][]byte{"c.cue": []byte(flagSpec)}})
	if c == nil {
		t.Fatal(diags)
	}
	_, b := compile(t, "single-node")
	m, err := pki.Issue(c, b)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := systemd.Build(m, systemd.Options{})
	if err != nil {
		t.Fatal(err)
	}

	args := treeArgs(t, tree, "w1", "kubelet.service")
	fs := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
	flags := kubeletoptions.NewKubeletFlags()
	flags.AddFlags(fs)
	cfg, err := kubeletoptions.NewKubeletConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	kubeletoptions.AddKubeletConfigFlags(fs, cfg)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("the kubelet refuses its command line: %v\n%q", err, args)
	}
	if len(fs.Args()) != 0 {
		t.Errorf("the kubelet's command line has stray arguments %q", fs.Args())
	}
	var node *struct{ labels, taints map[string]string }
	for _, n := range c.Nodes {
		if n.Name != "w1" {
			continue
		}
		node = &struct{ labels, taints map[string]string }{map[string]string{}, map[string]string{}}
		for _, l := range n.Labels {
			node.labels[l.Key] = l.Value
		}
		for _, tt := range n.Taints {
			node.taints[tt.Key] = tt.Value + ":" + tt.Effect
		}
	}
	if !maps.Equal(flags.NodeLabels, node.labels) {
		t.Errorf("the kubelet reads labels %v, the spec has %v", flags.NodeLabels, node.labels)
	}
	got := map[string]string{}
	for _, tt := range cfg.RegisterWithTaints {
		got[tt.Key] = tt.Value + ":" + string(tt.Effect)
	}
	if !maps.Equal(got, node.taints) {
		t.Errorf("the kubelet registers taints %v, the spec has %v", got, node.taints)
	}
	if err := kubeletoptions.ValidateKubeletFlags(flags); err != nil {
		t.Errorf("the kubelet's own validation refuses its flags: %v", err)
	}
	for _, tt := range cfg.RegisterWithTaints {
		if tt.Effect != corev1.TaintEffectNoSchedule && tt.Effect != corev1.TaintEffectNoExecute && tt.Effect != corev1.TaintEffectPreferNoSchedule {
			t.Errorf("taint %v has an effect the kubelet does not know", tt)
		}
	}

	args = treeArgs(t, tree, "cp1", "kube-apiserver.service")
	opts := apiserveroptions.NewServerRunOptions()
	afs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range opts.Flags().FlagSets {
		afs.AddFlagSet(f)
	}
	if err := afs.Parse(args); err != nil {
		t.Fatalf("kube-apiserver refuses its command line: %v\n%q", err, args)
	}
	enabled := opts.Admission.GenericAdmission.EnablePlugins
	want := slices.Sorted(slices.Values(c.Security.AdmissionPlugins))
	if !slices.Equal(enabled, want) {
		t.Errorf("kube-apiserver enables %v, the spec %v", enabled, want)
	}
	if len(afs.Args()) != 0 {
		t.Errorf("kube-apiserver's command line has stray arguments %q", afs.Args())
	}
}

// TestAdmissionPluginsAreKubeAPIServers holds the compiler's list of
// admission plugins to the one kube-apiserver registers.
func TestAdmissionPluginsAreKubeAPIServers(t *testing.T) {
	ours := compiler.AdmissionPlugins()
	theirs := kubeapiserveroptions.AllOrderedPlugins
	if !slices.Equal(slices.Sorted(slices.Values(ours)), slices.Sorted(slices.Values(theirs))) {
		t.Errorf("the compiler knows %s\nkube-apiserver registers %s", strings.Join(ours, ","), strings.Join(theirs, ","))
	}
}

// treeArgs reads a unit's command line from the built tree, as systemd
// would read the file.
func treeArgs(t *testing.T, tree *targets.Tree, node, unit string) []string {
	t.Helper()
	f, ok := tree.Get(layout.NodeTree(node, "etc/systemd/system/"+unit))
	if !ok {
		t.Fatalf("%s has no %s", node, unit)
	}
	u, err := unitfile.Parse(f.Data)
	if err != nil {
		t.Fatal(err)
	}
	return u.Commands("Service", "ExecStart")[0].Argv[1:]
}
