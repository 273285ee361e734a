package cloudinit

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/kcompile/kcompile/fixture"
	"github.com/kcompile/kcompile/targets/systemd"

	"cuelang.org/go/cue/literal"
	"github.com/pelletier/go-toml/v2"
	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/unitfile"
)

// hostileBase is the spec every value of the property test is put into:
// one schedulable control-plane node and a pool of two workers,
// downloading its binaries, with a user, a StorageClass and a CNI image
// override, so that every field below reaches the trees.
const hostileBase = `package cluster

apiVersion: "kcompile.dev/v1alpha1"
name:       "t"
kubernetes: version: "1.37.2"
controlPlane: {nodes: cp1: address: "10.0.0.11", schedulable: true}
network: nodes: ["10.0.0.0/16"]
storage: drivers: "d.example.com": {}
`

// hostileField puts a value into the spec and says where the built trees
// must carry it: want lists (tree path, the value as its consumer reads
// it) pairs that read must find.
type hostileField struct {
	name   string
	sample string
	// read extracts what the artifact's consumer reads at the value's
	// place, by its own parser; the test compares it with the value.
	read func(t *testing.T, tree *targets.Tree) string
}

// unitArg reads one argument of a unit's ExecStart as systemd splits it:
// the value of flag --name=.
func unitArg(t *testing.T, tree *targets.Tree, node, unit, flag string) string {
	t.Helper()
	u := userDataFiles(t, tree, node)["/etc/systemd/system/"+unit]
	f, err := unitfile.Parse(u.Data)
	if err != nil {
		t.Fatalf("%s of %s does not parse: %v", unit, node, err)
	}
	for _, a := range f.Commands("Service", "ExecStart")[0].Argv {
		if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
			return v
		}
	}
	return ""
}

// userDataFiles decodes a node's user-data into its files.
func userDataFiles(t *testing.T, tree *targets.Tree, node string) map[string]targets.File {
	t.Helper()
	f, ok := tree.Get(targets.NodePath(node, "user-data"))
	if !ok {
		t.Fatalf("no user-data for %s", node)
	}
	d, err := Decode(f.Data)
	if err != nil {
		t.Fatalf("user-data of %s: %v", node, err)
	}
	return d.Files
}

// manifestValue finds key's value in the first object of kind in a
// cluster manifest, decoded as kubectl decodes it.
func manifestObjects(t *testing.T, tree *targets.Tree, file string) []map[string]any {
	t.Helper()
	f, ok := tree.Get(targets.ClusterPath("addons/" + file))
	if !ok {
		t.Fatalf("no %s", file)
	}
	var out []map[string]any
	for _, doc := range strings.Split(string(f.Data), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if obj != nil {
			out = append(out, obj)
		}
	}
	return out
}

func hostileFields() []hostileField {
	const pool = `workers: pools: p: {count: 2, namePattern: "w%%d", firstAddress: "10.0.1.1", `
	labels := func(t *testing.T, tree *targets.Tree) string {
		for _, kv := range strings.Split(unitArg(t, tree, "w1", "kubelet.service", "node-labels"), ",") {
			if v, ok := strings.CutPrefix(kv, "tier="); ok {
				return v
			}
		}
		return "<none>"
	}
	return []hostileField{
		{name: "label value", sample: pool + `labels: tier: %s}`, read: labels},
		{name: "label key", sample: pool + `labels: %s: "x"}`, read: func(t *testing.T, tree *targets.Tree) string {
			kv := unitArg(t, tree, "w1", "kubelet.service", "node-labels")
			k, _, _ := strings.Cut(kv, "=")
			return k
		}},
		{name: "taint value", sample: pool + `taints: [{key: "k", value: %s, effect: "NoSchedule"}]}`, read: func(t *testing.T, tree *targets.Tree) string {
			// key[=value]:effect, as the kubelet parses it.
			kv, _, _ := strings.Cut(unitArg(t, tree, "w1", "kubelet.service", "register-with-taints"), ":")
			_, v, _ := strings.Cut(kv, "=")
			return v
		}},
		{name: "zone", sample: pool + `zones: [%s]}`, read: func(t *testing.T, tree *targets.Tree) string {
			for _, kv := range strings.Split(unitArg(t, tree, "w1", "kubelet.service", "node-labels"), ",") {
				if v, ok := strings.CutPrefix(kv, "topology.kubernetes.io/zone="); ok {
					return v
				}
			}
			return "<none>"
		}},
		{name: "admission plugin", sample: `security: admission: plugins: ["NodeRestriction", "DenyServiceExternalIPs", %s]`, read: func(t *testing.T, tree *targets.Tree) string {
			ps := strings.Split(unitArg(t, tree, "cp1", "kube-apiserver.service", "enable-admission-plugins"), ",")
			ps = slices.DeleteFunc(ps, func(p string) bool { return p == "NodeRestriction" || p == "DenyServiceExternalIPs" })
			return strings.Join(ps, ",")
		}},
		{name: "StorageClass parameter", sample: `storage: classes: c: {driver: "d.example.com", default: true, parameters: x: %s}`, read: func(t *testing.T, tree *targets.Tree) string {
			for _, o := range manifestObjects(t, tree, "40-storage.yaml") {
				if o["kind"] == "StorageClass" {
					return fmt.Sprint(o["parameters"].(map[string]any)["x"])
				}
			}
			return "<none>"
		}},
		{name: "StorageClass parameter name", sample: `storage: classes: c: {driver: "d.example.com", default: true, parameters: %s: "v"}`, read: func(t *testing.T, tree *targets.Tree) string {
			for _, o := range manifestObjects(t, tree, "40-storage.yaml") {
				if o["kind"] == "StorageClass" {
					for k := range o["parameters"].(map[string]any) {
						return k
					}
				}
			}
			return "<none>"
		}},
		{name: "CNI image", sample: `network: cni: images: flannel: %s`, read: func(t *testing.T, tree *targets.Tree) string {
			f, _ := tree.Get(targets.ClusterPath("addons/20-cni-flannel.yaml"))
			for _, l := range strings.Split(string(f.Data), "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(l), "image: "); ok && !strings.Contains(v, "flannel-cni-plugin") {
					var s string
					if err := yaml.Unmarshal([]byte(v), &s); err != nil {
						t.Fatal(err)
					}
					return s
				}
			}
			return "<none>"
		}},
		{name: "SSH key comment", sample: `access: users: alice: sshAuthorizedKeys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICBPJLtN0OW1tWrsYbsc7QGZG5UW3m3SHqYd/C30E0i0 " + %s]`, read: func(t *testing.T, tree *targets.Tree) string {
			f, _ := tree.Get(targets.NodePath("cp1", "user-data"))
			var ud userData
			if err := yaml.Unmarshal(f.Data, &ud); err != nil {
				t.Fatal(err)
			}
			return strings.TrimPrefix(ud.Users[0].SSHAuthorizedKeys[0], "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICBPJLtN0OW1tWrsYbsc7QGZG5UW3m3SHqYd/C30E0i0 ")
		}},
		{name: "artifact URL", sample: `install: {source: "download", artifacts: k: {url: %s, sha256: "` + strings.Repeat("0", 64) + `", path: "/usr/local/bin/kubelet"}}`, read: func(t *testing.T, tree *targets.Tree) string {
			list := userDataFiles(t, tree, "w1")["/usr/local/lib/kcompile/binaries.list"]
			for _, l := range strings.Split(string(list.Data), "\n") {
				if f := strings.Split(l, "|"); f[0] == "file" && f[1] == "/usr/local/bin/kubelet" {
					return f[3]
				}
			}
			return "<none>"
		}},
		{name: "registry mirror", sample: `runtime: mirrors: "registry.k8s.io": [%s]`, read: func(t *testing.T, tree *targets.Tree) string {
			f := userDataFiles(t, tree, "cp1")["/etc/containerd/certs.d/registry.k8s.io/hosts.toml"]
			var hosts struct {
				Host map[string]any `toml:"host"`
			}
			if err := toml.Unmarshal(f.Data, &hosts); err != nil {
				t.Fatal(err)
			}
			for k := range hosts.Host {
				return k
			}
			return "<none>"
		}},
		{name: "waiver reason", sample: `security: {anonymousAuth: true, cis: waivers: "1.2.1": reason: %s}`, read: nil},
	}
}

// hostileMaterial issues the PKI of a compiled spec with the test bundle.
func hostileMaterial(t *testing.T, c *ir.Cluster) *pki.Material {
	t.Helper()
	m, err := pki.Issue(c, testBundle(t))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// bundleOnce parses the test bundle once for all fuzzing iterations.
func testBundle(t *testing.T) *pki.Bundle { return fixture.Bundle(t) }

// FuzzHostileValues puts generated strings into every kind of free-form
// field of a spec. Each either gets an error diagnostic at the place it
// was written, or the whole cloud-init tree (which carries the systemd
// tree) is built, every file is read back by its consumer's parser, and
// the value reads back exactly where it belongs, while the set of files,
// the units' directives and the command lines' arguments are those of the
// same spec with a plain value: no value adds a line, a directive, a flag
// or a file.
func FuzzHostileValues(f *testing.F) {
	seeds := []string{
		"web", "a\nExecStartPre=/bin/sh -c id", "x --anonymous-auth=true --authorization-mode=AlwaysAllow",
		`a"b`, "it's", `back\slash`, "%n%H", "$HOME", "${PATH}", "a;b", ";", "a b", "a=b,c=d",
		"\x00", "\x1b[31m", "zoné", "\u202e", "", strings.Repeat("x", 300), "ghcr.io/x/y:v1", "ghcr.io/x/y:v1\n- evil",
		"https://example.com/k", "http://[fd00::1]:5000", "https://example.com/k|file|/etc/shadow", "https://example.com/k\nfile|/bin/x", "example.com/tier",
		"NodeRestriction,AlwaysAdmit", "AlwaysPullImages", "key: value\n---\nkind: Secret",
	}
	for i := range hostileFields() {
		for _, s := range seeds {
			f.Add(uint8(i), s)
		}
	}
	baselines := map[int]*targets.Tree{}
	var mu sync.Mutex
	f.Fuzz(func(t *testing.T, which uint8, value string) {
		fields := hostileFields()
		i := int(which) % len(fields)
		field := fields[i]
		if !utf8.ValidString(value) {
			t.Skip("CUE strings are Unicode text")
		}
		c, diags := compileHostile(t, field, literal.String.Quote(value))
		if c == nil {
			for _, d := range diags {
				if d.Code == compiler.CodeInternal {
					t.Fatalf("internal error: %s", d.Message)
				}
				if d.Severity == diag.Error && strings.HasSuffix(d.Primary().File, "value.cue") {
					return
				}
			}
			t.Fatalf("%s %s refused, but not at its position:\n%v", field.name, diag.Quote(value), diags)
		}
		tree, err := buildErr(hostileMaterial(t, c))
		if err != nil {
			t.Fatalf("%s %s compiles but does not build: %v", field.name, diag.Quote(value), err)
		}
		mu.Lock()
		base, ok := baselines[i]
		mu.Unlock()
		if !ok {
			bc, bd := compileHostile(t, field, plainFor(field))
			if bc == nil {
				t.Fatalf("the plain %s does not compile: %v", field.name, bd)
			}
			if base, err = buildErr(hostileMaterial(t, bc)); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			baselines[i] = base
			mu.Unlock()
		}
		sameShape(t, base, tree)
		if field.read != nil {
			if got := field.read(t, tree); got != value {
				t.Errorf("%s %s reads back as %s", field.name, diag.Quote(value), diag.Quote(got))
			}
		}
	})
}

// plainFor is a value every field takes.
func plainFor(f hostileField) string {
	switch f.name {
	case "admission plugin":
		return `"AlwaysPullImages"`
	case "CNI image":
		return `"ghcr.io/flannel-io/flannel:v0.27.4"`
	case "artifact URL":
		return `"https://example.com/kubelet"`
	case "registry mirror":
		return `"https://mirror.example.com"`
	case "label key":
		return `"tier"`
	}
	return `"plain"`
}

// buildErr builds the cloud-init tree as the pipeline does, its own
// diagnostics aside (the spec sets no size limit).
func buildErr(m *pki.Material) (*targets.Tree, error) {
	sd, err := systemd.Build(m, systemd.Options{})
	if err != nil {
		return nil, err
	}
	tree, _, err := Build(m, sd)
	return tree, err
}

func compileHostile(t *testing.T, f hostileField, quoted string) (*ir.Cluster, diag.List) {
	t.Helper()
	return compiler.Compile(compiler.Source{Dir: t.TempDir(), Overlay: map[string][]byte{
		"base.cue":  []byte(hostileBase),
		"value.cue": []byte("package cluster\n\n" + fmt.Sprintf(f.sample, quoted) + "\n"),
	}})
}

// sameShape holds a tree to the tree of the same spec with a plain value:
// the same files, and in every unit the same directives and the same
// number of arguments; every user-data the same files.
func sameShape(t *testing.T, base, got *targets.Tree) {
	t.Helper()
	bf, gf := base.Files(), got.Files()
	if len(bf) != len(gf) {
		t.Fatalf("%d files instead of %d", len(gf), len(bf))
	}
	for i := range bf {
		if bf[i].Path != gf[i].Path {
			t.Fatalf("file %s instead of %s", gf[i].Path, bf[i].Path)
		}
		if !strings.HasSuffix(bf[i].Path, "/user-data") {
			continue
		}
		node := strings.Split(bf[i].Path, "/")[1]
		ba, ga := userDataFiles(t, base, node), userDataFiles(t, got, node)
		if len(ba) != len(ga) {
			t.Fatalf("user-data of %s writes %d files instead of %d", node, len(ga), len(ba))
		}
		for p, b := range ba {
			g, ok := ga[p]
			if !ok {
				t.Fatalf("user-data of %s does not write %s", node, p)
			}
			if strings.HasSuffix(p, ".service") {
				sameUnitShape(t, node+p, b.Data, g.Data)
			}
			if strings.HasSuffix(p, ".list") && strings.Count(string(b.Data), "\n") != strings.Count(string(g.Data), "\n") {
				t.Fatalf("%s%s has %d lines instead of %d", node, p, strings.Count(string(g.Data), "\n"), strings.Count(string(b.Data), "\n"))
			}
		}
	}
}

func sameUnitShape(t *testing.T, name string, base, got []byte) {
	t.Helper()
	bu, err := unitfile.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	gu, err := unitfile.Parse(got)
	if err != nil {
		t.Fatalf("%s does not parse: %v", name, err)
	}
	if len(bu.Sections) != len(gu.Sections) {
		t.Fatalf("%s has %d sections instead of %d", name, len(gu.Sections), len(bu.Sections))
	}
	for i, s := range bu.Sections {
		g := gu.Sections[i]
		if len(s.Directives) != len(g.Directives) {
			t.Fatalf("%s [%s] has %d directives instead of %d", name, s.Name, len(g.Directives), len(s.Directives))
		}
		for j, d := range s.Directives {
			if d.Key != g.Directives[j].Key {
				t.Fatalf("%s [%s] has %s instead of %s", name, s.Name, g.Directives[j].Key, d.Key)
			}
			if d.Command != nil && len(d.Command.Argv) != len(g.Directives[j].Command.Argv) {
				t.Fatalf("%s %s has %d arguments instead of %d", name, d.Key, len(g.Directives[j].Command.Argv), len(d.Command.Argv))
			}
		}
	}
}
