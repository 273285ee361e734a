package systemd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/internal/unitfile"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
)

// upExample is an example built as kcompile up's caller builds it (zero
// Options), with extra CUE files.
type upExample struct {
	name  string
	extra map[string]string
}

// upExamples are the examples, and a CRI-O one: the runtime whose
// configuration names the sandbox image another way.
func upExamples() []upExample {
	var out []upExample
	for _, name := range fixture.Examples() {
		out = append(out, upExample{name: name})
	}
	return append(out, upExample{name: "single-node", extra: map[string]string{"crio.cue": "package cluster\nruntime: engine: \"cri-o\"\n"}})
}

func (e upExample) String() string {
	if len(e.extra) > 0 {
		return e.name + "+" + strings.Join(slices.Sorted(maps.Keys(e.extra)), "+")
	}
	return e.name
}

func (e upExample) build(t *testing.T, opts Options) (*pki.Material, *targets.Tree) {
	t.Helper()
	m := fixture.Material(t, e.name, e.extra)
	tree, err := Build(m, opts)
	if err != nil {
		t.Fatalf("%s: %v", e, err)
	}
	return m, tree
}

// TestImagesAreTheTreesImages holds Images to what reading the compiled
// tree back finds: the images of every container list of the addon
// manifests, and the sandbox image of the runtimes' configurations.
func TestImagesAreTheTreesImages(t *testing.T) {
	for _, e := range upExamples() {
		m, tree := e.build(t, Options{})
		got, err := Images(m.Cluster)
		if err != nil {
			t.Fatal(err)
		}
		want, err := treeImages(tree)
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: Images says\n  %q\nthe tree pulls\n  %q", e, got, want)
		}
		if !slices.Contains(got, pauseImage) || !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "coredns") }) {
			t.Errorf("%s: no sandbox or CoreDNS image in %q", e, got)
		}
	}
}

// treeImages reads the images a compiled tree pulls back from its files.
func treeImages(tree *targets.Tree) ([]string, error) {
	var out []string
	for _, f := range tree.Files() {
		_, rel, node := layout.SplitTree(f.Path)
		switch {
		case strings.HasPrefix(f.Path, layout.ClusterTree("addons/")):
			for _, doc := range bytes.Split(f.Data, []byte("\n---\n")) {
				var obj any
				if err := yaml.Unmarshal(doc, &obj); err != nil {
					return nil, fmt.Errorf("%s: %w", f.Path, err)
				}
				out = append(out, containerImages(obj)...)
			}
		case node && rel == layout.ContainerdConfig:
			var doc struct {
				Plugins struct {
					Images struct {
						Pinned struct {
							Sandbox string `toml:"sandbox"`
						} `toml:"pinned_images"`
					} `toml:"io.containerd.cri.v1.images"`
				} `toml:"plugins"`
			}
			if err := toml.Unmarshal(f.Data, &doc); err != nil {
				return nil, fmt.Errorf("%s: %w", f.Path, err)
			}
			out = append(out, doc.Plugins.Images.Pinned.Sandbox)
		case node && rel == layout.CRIOConfig:
			var doc struct {
				CRIO struct {
					Image struct {
						Pause string `toml:"pause_image"`
					} `toml:"image"`
				} `toml:"crio"`
			}
			if err := toml.Unmarshal(f.Data, &doc); err != nil {
				return nil, fmt.Errorf("%s: %w", f.Path, err)
			}
			out = append(out, doc.CRIO.Image.Pause)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// containerImages are the images of every containers, initContainers and
// ephemeralContainers list in a decoded document, wherever it nests.
func containerImages(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if list, ok := x.([]any); ok && (k == "containers" || k == "initContainers" || k == "ephemeralContainers") {
				for _, c := range list {
					if img, ok := c.(map[string]any)["image"].(string); ok {
						out = append(out, img)
					}
				}
				continue
			}
			out = append(out, containerImages(x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, containerImages(x)...)
		}
	}
	return out
}

// TestModulesAreTheModulesLoadFiles holds Modules to what each node's
// modules-load.d files list.
func TestModulesAreTheModulesLoadFiles(t *testing.T) {
	for _, name := range fixture.Examples() {
		m, tree := upExample{name: name}.build(t, Options{})
		listed := map[string][]string{}
		for _, f := range tree.Files() {
			node, rel, ok := layout.SplitTree(f.Path)
			if !ok || !strings.HasPrefix(rel, layout.ModulesLoadDir) {
				continue
			}
			for _, line := range strings.Split(string(f.Data), "\n") {
				if line = strings.TrimSpace(line); line != "" && line[0] != '#' && line[0] != ';' {
					listed[node] = append(listed[node], line)
				}
			}
		}
		for _, n := range m.Cluster.Nodes {
			if got := Modules(m.Cluster, n); !slices.Equal(got, listed[n.Name]) {
				t.Errorf("%s: node %s: Modules says %q, its tree loads %q", name, n.Name, got, listed[n.Name])
			}
		}
	}
}

// everyOverride is each change kcompile up can make.
func everyOverride() UpOverrides {
	return UpOverrides{
		KubeletArgs: []string{"--fail-cgroupv1=false"}, KubeletWhy: "the host has cgroup v1",
		RestrictOOMScoreAdj: true, RegistryHosts: true, ContainerdWhy: "the host lacks CAP_SYS_RESOURCE",
	}
}

// TestUpFilesChangeOnlyWhatTheySay: on every node of every example (and
// of a tree built with Options, as the simulator builds one), up's files
// lie beside the compiled ones; the kubelet's drop-in runs the compiled
// command with the extra arguments, containerd's the compiled command
// with the copy of its configuration, and the copy is the compiled
// configuration with the two keys set.
func TestUpFilesChangeOnlyWhatTheySay(t *testing.T) {
	sim := Options{
		Root:      func(node string) string { return "/srv/sim/" + node },
		ExtraArgs: func(node string, c ir.Component) []string { return []string{"--v=" + string(c)} },
	}
	cases := []struct {
		e    upExample
		opts Options
	}{{upExample{name: "single-node"}, sim}}
	for _, name := range fixture.Examples() {
		cases = append(cases, struct {
			e    upExample
			opts Options
		}{upExample{name: name}, Options{}})
	}
	for _, tc := range cases {
		m, tree := tc.e.build(t, tc.opts)
		c := m.Cluster
		for _, n := range c.Nodes {
			files, err := UpFiles(c, n, tc.opts, everyOverride())
			if err != nil {
				t.Fatalf("%s: %s: %v", tc.e, n.Name, err)
			}
			if !n.RunsPods() {
				if len(files) > 0 {
					t.Errorf("%s: node %s runs no pods, yet up writes %v", tc.e, n.Name, slices.Sorted(maps.Keys(files)))
				}
				continue
			}
			for p, data := range files {
				if _, ok := tree.Get(layout.NodeTree(n.Name, p)); ok {
					t.Errorf("%s: node %s: up writes %s over the compiled file", tc.e, n.Name, p)
				}
				if !bytes.HasPrefix(data, []byte("# Written by kcompile up: ")) {
					t.Errorf("%s: node %s: %s does not say who wrote it:\n%s", tc.e, n.Name, p, data)
				}
			}
			compiledCommand := func(unit string) []string {
				f, ok := tree.Get(layout.NodeTree(n.Name, layout.UnitDir+unit))
				if !ok {
					t.Fatalf("%s: node %s has no %s", tc.e, n.Name, unit)
				}
				u, err := unitfile.Parse(f.Data)
				if err != nil {
					t.Fatal(err)
				}
				return u.Commands("Service", "ExecStart")[0].Argv
			}
			dropInCommand := func(unit string) []string {
				data, ok := files[layout.UnitDropIn(unit, layout.UpDropIn)]
				if !ok {
					t.Fatalf("%s: node %s: no drop-in of %s", tc.e, n.Name, unit)
				}
				d, err := unitfile.Parse(data)
				if err != nil {
					t.Fatalf("%v\n%s", err, data)
				}
				if v := d.Get("Service", "ExecStart"); len(v) != 2 || v[0] != "" {
					t.Fatalf("%s: node %s: the drop-in of %s must reset ExecStart first:\n%s", tc.e, n.Name, unit, data)
				}
				return d.Commands("Service", "ExecStart")[0].Argv
			}
			if got, want := dropInCommand("kubelet.service"), append(compiledCommand("kubelet.service"), "--fail-cgroupv1=false"); !slices.Equal(got, want) {
				t.Errorf("%s: node %s: the kubelet's drop-in runs\n  %q\nnot\n  %q", tc.e, n.Name, got, want)
			}
			want := compiledCommand("containerd.service")
			root := "/"
			if tc.opts.Root != nil {
				root = tc.opts.Root(n.Name)
			}
			i := slices.Index(want, "--config="+strings.TrimSuffix(root, "/")+layout.Abs(layout.ContainerdConfig))
			if i < 0 {
				t.Fatalf("%s: node %s: containerd runs %q", tc.e, n.Name, want)
			}
			want[i] = "--config=" + strings.TrimSuffix(root, "/") + layout.Abs(layout.ContainerdUpConfig)
			if got := dropInCommand("containerd.service"); !slices.Equal(got, want) {
				t.Errorf("%s: node %s: containerd's drop-in runs\n  %q\nnot\n  %q", tc.e, n.Name, got, want)
			}
			compiled, _ := tree.Get(layout.NodeTree(n.Name, layout.ContainerdConfig))
			checkUpContainerdConfig(t, compiled.Data, files[layout.ContainerdUpConfig], c)
		}
	}
}

// checkUpContainerdConfig checks that up's copy is the compiled
// configuration with restrict_oom_score_adj and the registry
// config_path set, and nothing else changed.
func checkUpContainerdConfig(t *testing.T, compiled, copied []byte, c *ir.Cluster) {
	t.Helper()
	var before, after map[string]any
	if err := toml.Unmarshal(compiled, &before); err != nil {
		t.Fatal(err)
	}
	if err := toml.Unmarshal(copied, &after); err != nil {
		t.Fatalf("%v\n%s", err, copied)
	}
	plugins := after["plugins"].(map[string]any)
	rt := plugins["io.containerd.cri.v1.runtime"].(map[string]any)
	images := plugins["io.containerd.cri.v1.images"].(map[string]any)
	reg, _ := images["registry"].(map[string]any)
	if rt["restrict_oom_score_adj"] != true || reg["config_path"] != layout.Abs(layout.ContainerdHostsDir) {
		t.Errorf("up's copy does not set the two keys:\n%s", copied)
	}
	if !c.Runtime.RestrictOOMScoreAdj {
		delete(rt, "restrict_oom_score_adj")
	}
	if len(c.Runtime.Mirrors) == 0 {
		delete(images, "registry")
	}
	a, _ := json.Marshal(before)
	b, _ := json.Marshal(after)
	if !bytes.Equal(a, b) {
		t.Errorf("up's copy changes more than the two keys:\n%s\n%s", a, b)
	}
}

// TestUpFilesOnlyWhereNeeded: no override, no file; what the spec already
// says is not copied again; CRI-O's configuration up does not change.
func TestUpFilesOnlyWhereNeeded(t *testing.T) {
	c := fixture.Cluster(t, "single-node", nil)
	n := c.Nodes[0]
	if files, err := UpFiles(c, n, Options{}, UpOverrides{}); err != nil || len(files) > 0 {
		t.Errorf("no override, yet %v (%v)", slices.Sorted(maps.Keys(files)), err)
	}
	said := fixture.Cluster(t, "single-node", map[string]string{"x.cue": "package cluster\nruntime: restrictOOMScoreAdj: true\nruntime: mirrors: \"docker.io\": [\"http://10.0.0.5:5000\"]\n"})
	files, err := UpFiles(said, said.Nodes[0], Options{}, everyOverride())
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, []string{layout.UnitDropIn("kubelet.service", layout.UpDropIn)}) {
		t.Errorf("the spec sets containerd's keys, yet up writes %v", got)
	}
	m := fixture.Material(t, "single-node", map[string]string{"x.cue": "package cluster\nruntime: restrictOOMScoreAdj: true\n"})
	tree, err := Build(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	files, err = UpFiles(m.Cluster, m.Cluster.Nodes[0], Options{}, UpOverrides{RestrictOOMScoreAdj: true, RegistryHosts: true, ContainerdWhy: "mirrors"})
	if err != nil {
		t.Fatal(err)
	}
	if h, _, _ := strings.Cut(string(files[layout.ContainerdUpConfig]), "\nversion"); !strings.Contains(h, "with\n# the registry config_path /etc/containerd/certs.d.\n# Why: mirrors.\n") || strings.Contains(h, "restrict") {
		t.Errorf("the header names what differs from the compiled file, and only that: %q", h)
	}
	compiled, _ := tree.Get(layout.NodeTree("box", layout.ContainerdConfig))
	checkUpContainerdConfig(t, compiled.Data, files[layout.ContainerdUpConfig], m.Cluster)

	crio := fixture.Cluster(t, "single-node", map[string]string{"crio.cue": "package cluster\nruntime: engine: \"cri-o\"\n"})
	if _, err := UpFiles(crio, crio.Nodes[0], Options{}, UpOverrides{RestrictOOMScoreAdj: true}); err == nil {
		t.Error("up changed CRI-O's configuration")
	}
	if files, err := UpFiles(crio, crio.Nodes[0], Options{}, UpOverrides{KubeletArgs: []string{"--x"}}); err != nil || len(files) != 1 {
		t.Errorf("the kubelet's drop-in on a CRI-O node: %v (%v)", slices.Sorted(maps.Keys(files)), err)
	}
}

// TestUpAddons: up's copy of cilium's manifest is the compiled one
// without the dropped capability, and nothing else changed; a manifest
// with no container adding it, and no override, get no copy.
func TestUpAddons(t *testing.T) {
	drop := UpOverrides{DropCapabilities: []corev1.Capability{"SYS_RESOURCE"}, CapabilitiesWhy: "the host lacks it"}
	m := fixture.Material(t, "external-etcd", nil)
	tree, err := Build(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if copies, err := UpAddons(m.Cluster, UpOverrides{}); err != nil || len(copies) > 0 {
		t.Errorf("no override, yet %v (%v)", slices.Sorted(maps.Keys(copies)), err)
	}
	copies, err := UpAddons(m.Cluster, drop)
	if err != nil {
		t.Fatal(err)
	}
	path := layout.ClusterTree("addons/20-cni-cilium.yaml")
	if got := slices.Sorted(maps.Keys(copies)); !slices.Equal(got, []string{path}) {
		t.Fatalf("copies %v", got)
	}
	header, _, _ := strings.Cut(string(copies[path]), "\n---\n")
	for _, want := range []string{"# Written by kcompile up: its copy of 20-cni-cilium.yaml", "SYS_RESOURCE", "DaemonSet cilium container clean-cilium-state", "DaemonSet cilium container cilium-agent", "# Why: the host lacks it."} {
		if !strings.Contains(header, want) {
			t.Errorf("the header does not say %q:\n%s", want, header)
		}
	}
	compiled, _ := tree.Get(path)
	// Every object decodes strictly, and with SYS_RESOURCE put back
	// where it was, the copy is the compiled file.
	objs, err := decodeManifest(copies[path])
	if err != nil {
		t.Fatal(err)
	}
	removed := 0
	for _, o := range objs {
		ds, ok := o.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		spec := &ds.Spec.Template.Spec
		for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for i := range list {
				sc := list[i].SecurityContext
				if sc == nil || sc.Capabilities == nil {
					continue
				}
				if slices.Contains(sc.Capabilities.Add, "SYS_RESOURCE") {
					t.Errorf("container %s still adds SYS_RESOURCE", list[i].Name)
				}
				// The compiled order: SYS_RESOURCE after SYS_ADMIN.
				if at := slices.Index(sc.Capabilities.Add, "SYS_ADMIN"); at >= 0 && list[i].Name != "mount-cgroup" && list[i].Name != "apply-sysctl-overwrites" {
					sc.Capabilities.Add = slices.Insert(sc.Capabilities.Add, at+1, "SYS_RESOURCE")
					removed++
				}
			}
		}
	}
	if removed != 2 {
		t.Errorf("put SYS_RESOURCE back in %d containers, want 2", removed)
	}
	restored, err := manifest(objs...)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(restored, compiled.Data) {
		t.Error("the copy differs from the compiled manifest beyond SYS_RESOURCE")
	}
	flannel := fixture.Cluster(t, "single-node", nil)
	if copies, err := UpAddons(flannel, drop); err != nil || len(copies) > 0 {
		t.Errorf("flannel adds no SYS_RESOURCE, yet %v (%v)", slices.Sorted(maps.Keys(copies)), err)
	}
}
