package nspawn

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/internal/unitfile"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/systemd"
)

func TestPlanNamesAndGateways(t *testing.T) {
	single, err := newPlan(fixture.Cluster(t, "single-node", nil), "/var/lib/kcompile/up/lab")
	if err != nil {
		t.Fatal(err)
	}
	// The spec's gateway, which the host takes.
	if len(single.gateways) != 1 || single.gateways[0] != netip.MustParsePrefix("192.168.50.1/24") {
		t.Errorf("gateways %v", single.gateways)
	}
	if single.endpoint.IsValid() {
		t.Errorf("the endpoint is the node's own address, yet up would serve %s", single.endpoint)
	}
	ha, err := newPlan(fixture.Cluster(t, "ha-stacked", nil), "/var/lib/kcompile/up/prod-eu1")
	if err != nil {
		t.Fatal(err)
	}
	if len(ha.gateways) != 1 || ha.gateways[0] != netip.MustParsePrefix("10.0.0.1/16") {
		t.Errorf("the spec's gateway: %v", ha.gateways)
	}
	if ha.endpoint.IsValid() {
		t.Errorf("the control-plane nodes hold ha-stacked's VIP, yet up would serve %s", ha.endpoint)
	}
	ds, err := newPlan(fixture.Cluster(t, "dual-stack", nil), "/var/lib/kcompile/up/ds")
	if err != nil {
		t.Fatal(err)
	}
	if ds.endpoint != netip.MustParseAddrPort("10.20.0.10:6443") {
		t.Errorf("the external VIP no node holds: %v", ds.endpoint)
	}
	if single.id == ha.id {
		t.Error("two work directories, one id")
	}
	for _, m := range ha.machines {
		if len(m.hostLink) > 15 || !strings.HasPrefix(m.hostLink, namePrefix+ha.id) || !strings.HasPrefix(m.netns, namePrefix+ha.id) {
			t.Errorf("machine %s: device %q, namespace %q", m.name, m.hostLink, m.netns)
		}
		if len(m.addrs) != 1 || m.addrs[0].Bits() != 16 {
			t.Errorf("machine %s: addresses %v", m.name, m.addrs)
		}
	}
}

func TestMachineIDsAreStableAndDistinct(t *testing.T) {
	a, b := machineID("lab", "w1"), machineID("lab", "w2")
	if a == b || a != machineID("lab", "w1") || len(a) != 32 {
		t.Errorf("%s %s", a, b)
	}
	if u := uuid(a); len(u) != 36 || strings.Count(u, "-") != 4 {
		t.Errorf("uuid %s", u)
	}
}

func TestJournalRefusesWhatUpNeverMakes(t *testing.T) {
	work := t.TempDir()
	for _, r := range []Resource{
		{Kind: KindDir, Name: "/etc"},
		{Kind: KindDir, Name: filepath.Join(work, "..", "x")},
		{Kind: KindLink, Name: "eth0"},
		{Kind: KindNetns, Name: "production"},
		{Kind: KindProcess, Name: "init", PID: 1},
		{Kind: KindCgroup, Name: "/sys/fs/cgroup/unified/system.slice"},
		{Kind: KindCgroup, Name: "/sys/fs/cgroup/unified/kcabc/../system.slice"},
		{Kind: KindCgroup, Name: "/sys/fs/cgroup"},
		{Kind: KindCgroup, Name: "/home/kcabc"},
		{Kind: "file", Name: filepath.Join(work, "f")},
	} {
		data, _ := json.Marshal(State{Cluster: "x", Resources: []Resource{r}})
		if err := os.WriteFile(filepath.Join(work, StateName), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadState(work); err == nil {
			t.Errorf("a journal listing %+v was accepted", r)
		}
	}
	ok := State{Cluster: "x", Resources: []Resource{{Kind: KindDir, Name: filepath.Join(work, "machines")}, {Kind: KindLink, Name: "kcabc123"},
		{Kind: KindCgroup, Name: "/sys/fs/cgroup/unified/kcabc123"}, {Kind: KindCgroup, Name: "/sys/fs/cgroup/unified/kcabc123/cp1"}}}
	data, _ := json.Marshal(ok)
	if err := os.WriteFile(filepath.Join(work, StateName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadState(work); err != nil {
		t.Error(err)
	}
}

func TestUndoRemovesOnlyWhatTheJournalLists(t *testing.T) {
	work := t.TempDir()
	mine := filepath.Join(work, "machines")
	theirs := filepath.Join(work, "keep")
	for _, d := range []string{filepath.Join(mine, "a"), theirs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	j := &journal{path: filepath.Join(work, StateName), state: State{Cluster: "x"}}
	if err := j.record(Resource{Kind: KindDir, Name: mine}); err != nil {
		t.Fatal(err)
	}
	if err := Down(t.Context(), work, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine); !os.IsNotExist(err) {
		t.Errorf("%s survived: %v", mine, err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("what up did not make was removed: %v", err)
	}
	for _, f := range []string{j.path, filepath.Join(work, LockName)} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s survived: %v", f, err)
		}
	}
	if _, err := os.Stat(work); err != nil {
		t.Errorf("the work directory up did not make was removed: %v", err)
	}
}

// everyModule is a kernel that has every module kcompile trees load
// built in.
func everyModule() kernelFacts {
	k := kernelFacts{release: "6.1.0-test", config: map[string]string{}}
	for _, sym := range moduleSymbols() {
		k.config[sym] = "y"
	}
	return k
}

// everyFact is a host that needs every adjustment.
func everyFact() hostFacts {
	return hostFacts{cgroupV1: true, noSysResource: true, kernel: everyModule(),
		cgroups:   []cgroupMount{{dir: "/sys/fs/cgroup/unified"}, {dir: "/sys/fs/cgroup/cpuset", cpuset: true}},
		conntrack: conntrackFacts{max: 1 << 18, hashsize: 1 << 18, cpus: 2}}
}

// upFiles are the files up writes into node's machine on a host that
// needs every adjustment, with the tree it boots (built as kcompile up's
// caller builds it).
func upFiles(t *testing.T, example, node string) (map[string][]byte, *targets.Tree) {
	t.Helper()
	m := fixture.Material(t, example, nil)
	tree, err := systemd.Build(m, systemd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPlan(m.Cluster, "/w")
	if err != nil {
		t.Fatal(err)
	}
	a, err := decide(m.Cluster, p, everyFact(), pipeline.Systemd, "registry.k8s.io → http://192.168.50.1:5000")
	if err != nil {
		t.Fatal(err)
	}
	for _, mach := range p.machines {
		if mach.name == node {
			files, err := a.machineFiles(m.Cluster, mach)
			if err != nil {
				t.Fatal(err)
			}
			return files, tree
		}
	}
	t.Fatalf("no machine %s", node)
	return nil, nil
}

// compiledCommand is the command of a compiled unit of node box.
func compiledCommand(t *testing.T, tree *targets.Tree, unit string) []string {
	t.Helper()
	f, ok := tree.Get(layout.NodeTree("box", layout.UnitDir+unit))
	if !ok {
		t.Fatalf("box has no %s", unit)
	}
	u, err := unitfile.Parse(f.Data)
	if err != nil {
		t.Fatal(err)
	}
	return u.Commands("Service", "ExecStart")[0].Argv
}

// dropInCommand is the command a drop-in of up's runs instead of the
// compiled one.
func dropInCommand(t *testing.T, files map[string][]byte, unit string) []string {
	t.Helper()
	data, ok := files[layout.UnitDropIn(unit, layout.UpDropIn)]
	if !ok {
		t.Fatalf("up writes no drop-in of %s", unit)
	}
	if !strings.HasPrefix(string(data), "# Written by kcompile up: ") {
		t.Errorf("the drop-in of %s does not say who wrote it:\n%s", unit, data)
	}
	d, err := unitfile.Parse(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if got := d.Get("Service", "ExecStart"); len(got) != 2 || got[0] != "" {
		t.Fatalf("the drop-in must reset ExecStart first: %q", got)
	}
	return d.Commands("Service", "ExecStart")[0].Argv
}

func TestKubeletDropInRunsTheCompiledCommand(t *testing.T) {
	files, tree := upFiles(t, "single-node", "box")
	want := append(compiledCommand(t, tree, "kubelet.service"), "--fail-cgroupv1=false")
	if got := dropInCommand(t, files, "kubelet.service"); !slices.Equal(got, want) {
		t.Errorf("drop-in runs %q, want %q", got, want)
	}
}

func TestContainerdConfigKeepsTheCompiledOne(t *testing.T) {
	files, tree := upFiles(t, "single-node", "box")
	want := compiledCommand(t, tree, "containerd.service")
	i := slices.Index(want, "--config="+layout.Abs(layout.ContainerdConfig))
	if i < 0 {
		t.Fatalf("containerd runs %q", want)
	}
	want[i] = "--config=" + layout.Abs(layout.ContainerdUpConfig)
	if got := dropInCommand(t, files, "containerd.service"); !slices.Equal(got, want) {
		t.Errorf("drop-in runs %q, want %q", got, want)
	}
	f, _ := tree.Get(layout.NodeTree("box", layout.ContainerdConfig))
	out := files[layout.ContainerdUpConfig]
	if !strings.HasPrefix(string(out), "# Written by kcompile up: ") {
		t.Errorf("up's copy does not say who wrote it:\n%s", out)
	}
	var before, after map[string]any
	if err := toml.Unmarshal(f.Data, &before); err != nil {
		t.Fatal(err)
	}
	if err := toml.Unmarshal(out, &after); err != nil {
		t.Fatal(err)
	}
	plugins := after["plugins"].(map[string]any)
	rt := plugins["io.containerd.cri.v1.runtime"].(map[string]any)
	reg := plugins["io.containerd.cri.v1.images"].(map[string]any)["registry"].(map[string]any)
	if rt["restrict_oom_score_adj"] != true || reg["config_path"] != "/etc/containerd/certs.d" {
		t.Errorf("adjusted config:\n%s", out)
	}
	// Everything compiled is still there.
	delete(rt, "restrict_oom_score_adj")
	delete(plugins["io.containerd.cri.v1.images"].(map[string]any), "registry")
	a, _ := json.Marshal(before)
	b, _ := json.Marshal(after)
	if string(a) != string(b) {
		t.Errorf("the compiled configuration changed beyond the two keys:\n%s\n%s", a, b)
	}
}

func TestCheckRefusesWhatCannotBootHere(t *testing.T) {
	why := strings.Join(checkHere(t, fixture.Cluster(t, "ha-stacked", nil)), "\n")
	if !strings.Contains(why, "network.cni.plugin calico") {
		t.Errorf("calico accepted:\n%s", why)
	}
	why = strings.Join(checkHere(t, fixture.Cluster(t, "external-etcd", nil)), "\n")
	if !strings.Contains(why, `controlPlane.endpoint.host "api.core.example.com" does not resolve on this host`) {
		t.Errorf("an endpoint named by DNS accepted:\n%s", why)
	}
	why = strings.Join(checkHere(t, fixture.Cluster(t, "single-node", nil)), "\n")
	if strings.Contains(why, "network.") || strings.Contains(why, "runtime.") || strings.Contains(why, "controlPlane.") {
		t.Errorf("single-node refused:\n%s", why)
	}
}

func TestSplitYAML(t *testing.T) {
	docs := splitYAML([]byte("# Generated.\n---\na: 1\n---\n# only a comment\n---\nb: 2\n...\n"))
	if len(docs) != 2 || string(docs[0]) != "a: 1" {
		t.Errorf("%q", docs)
	}
}

// fakeRegistry names registries without serving.
type fakeRegistry []string

func (f fakeRegistry) Serve(context.Context, netip.AddrPort) error { return nil }
func (f fakeRegistry) Registries() []string                        { return f }
func (f fakeRegistry) Refs() []string                              { return nil }

// compileDir compiles a spec directory with extra files.
func compileDir(t *testing.T, dir string, extra map[string]string) *ir.Cluster {
	t.Helper()
	src := compiler.Source{Dir: dir, Overlay: map[string][]byte{}}
	for f, s := range extra {
		src.Overlay[f] = []byte(s)
	}
	c, diags := compiler.Compile(src)
	if c == nil {
		t.Fatalf("%s: %v", dir, diags)
	}
	return c
}

func TestMirrorAddress(t *testing.T) {
	regs := fakeRegistry{"ghcr.io", "registry.k8s.io", "registry.kcompile.test"}
	three := fixture.Path("runtimes/nspawn/testdata/nodelocal")
	for _, tc := range []struct {
		name    string
		cluster *ir.Cluster
		at      string
		adjust  string
		err     string
	}{
		{name: "the spec's mirror", cluster: compileDir(t, three, nil), at: "10.77.0.2:5000"},
		{name: "no mirror", cluster: fixture.Cluster(t, "single-node", nil), at: "192.168.50.1:5000",
			adjust: "ghcr.io, registry.k8s.io, registry.kcompile.test → http://192.168.50.1:5000"},
		{name: "one registry without", cluster: compileDir(t, three, map[string]string{"x.cue": "package cluster\nruntime: mirrors: \"docker.io\": [\"http://10.77.0.2:5000\"]\n"}),
			at: "10.77.0.2:5000"},
		{name: "unservable", cluster: compileDir(t, fixture.Path("examples/single-node"), map[string]string{"x.cue": "package cluster\nruntime: mirrors: \"registry.k8s.io\": [\"https://mirror.example.com\"]\n"}),
			err: "registry.k8s.io (https://mirror.example.com) name no endpoint up can serve"},
		{name: "a node's address", cluster: compileDir(t, fixture.Path("examples/single-node"), map[string]string{"x.cue": "package cluster\nruntime: mirrors: \"registry.k8s.io\": [\"http://192.168.50.10:5000\"]\n"}),
			err: "name no endpoint up can serve"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newPlan(tc.cluster, "/w")
			if err != nil {
				t.Fatal(err)
			}
			c := &Cluster{cfg: Config{Cluster: tc.cluster, Registry: regs}, p: p}
			at, adjust, err := c.mirrorAddress()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if at.String() != tc.at || adjust != tc.adjust {
				t.Errorf("served at %s with adjustment %q, want %s and %q", at, adjust, tc.at, tc.adjust)
			}
		})
	}
}

func TestResolveIn(t *testing.T) {
	top, image := t.TempDir(), t.TempDir()
	for _, d := range []string{"usr/lib/modules", "usr/bin", "etc/alternatives"} {
		if err := os.MkdirAll(filepath.Join(image, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"lib": "usr/lib", "sbin": "/usr/bin", "etc/alt": "../etc/alternatives"} {
		if err := os.Symlink(target, filepath.Join(image, link)); err != nil {
			t.Fatal(err)
		}
	}
	// The top layer has a real lib: it wins over the image's link.
	if err := os.MkdirAll(filepath.Join(top, "var/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"lib/modules/6.1/modules.builtin": "usr/lib/modules/6.1/modules.builtin",
		"sbin/x":                          "usr/bin/x",
		"etc/alt/y":                       "etc/alternatives/y",
		"var/lib/z":                       "var/lib/z",
		"lib":                             "lib",
		".kcompile-up/init":               ".kcompile-up/init",
	} {
		if got := resolveIn([]string{top, image}, in); got != want {
			t.Errorf("resolveIn(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestReadmeListsEveryAdjustment holds docs/up.md's table of adjustments
// to what decide applies, on a host that needs every one of them.
func TestReadmeListsEveryAdjustment(t *testing.T) {
	// dual-stack's endpoint is a VIP outside the spec, which up serves.
	c := fixture.Cluster(t, "dual-stack", nil)
	p, err := newPlan(c, "/w")
	if err != nil {
		t.Fatal(err)
	}
	// As if the endpoint were given by name.
	p.hosts = []hostEntry{{addr: c.Endpoint.Address, name: "api.example.test"}}
	applied := map[string]bool{}
	for _, target := range []pipeline.Target{pipeline.Systemd, pipeline.CloudInit} {
		a, err := decide(c, p, everyFact(), target, "registry.k8s.io → http://10.0.0.1:5000")
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range a.list {
			if x.Name == "" || x.What == "" || x.Why == "" {
				t.Errorf("adjustment %+v lacks a name, what or why", x)
			}
			applied[x.Name] = true
		}
	}
	// And what a kube-proxy before 1.37 needs besides.
	old := *c
	old.Kubernetes.KubeProxy = "1.36.3"
	old.Nodes = slices.Clone(c.Nodes)
	for i := range old.Nodes {
		old.Nodes[i].KubeProxyVersion = "1.36.3"
	}
	a, err := decide(&old, p, everyFact(), pipeline.Systemd, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range a.list {
		applied[x.Name] = true
	}
	if !applied["conntrack-max-file"] || !strings.Contains(a.init, "net/netfilter/nf_conntrack_max") {
		t.Errorf("a 1.36 kube-proxy without its conntrack file: %v", a.list)
	}
	// And what a cilium cluster needs besides, and what the Ignition
	// target adds.
	for dir, target := range map[string]pipeline.Target{"runtimes/nspawn/testdata/cilium": pipeline.Systemd, "examples/flatcar": pipeline.Ignition} {
		other := compileDir(t, fixture.Path(dir), nil)
		op, err := newPlan(other, "/w")
		if err != nil {
			t.Fatal(err)
		}
		a, err := decide(other, op, everyFact(), target, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range a.list {
			applied[x.Name] = true
		}
	}
	const page = "docs/up.md"
	data, err := os.ReadFile(fixture.Path(page))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## What up does that the compiled tree does not say\n")
	if !ok {
		t.Fatalf("%s has no section on up's adjustments", page)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	listed := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			name, _, _ := strings.Cut(rest, "`")
			listed[name] = true
		}
	}
	for n := range applied {
		if !listed[n] {
			t.Errorf("up applies %s, which %s does not list", n, page)
		}
	}
	for n := range listed {
		if !applied[n] {
			t.Errorf("%s lists %s, which up never applies", page, n)
		}
	}
}
