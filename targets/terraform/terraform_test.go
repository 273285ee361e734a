package terraform_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/internal/writer"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/terraform"
)

// externalBoot turns examples/external-etcd into a spec this target
// accepts, with a boot image of its own for the etcd members.
const externalBoot = `
workers: pools: compute: macs: ["52:54:00:10:02:10", "52:54:00:10:02:11", "52:54:00:10:02:12", "52:54:00:10:02:13"]
boot: {
	matchboxURL: "https://matchbox.example.com:8443/"
	kernel: "https://images.example.com/debian/vmlinuz"
	initrd: ["https://images.example.com/debian/initrd.img", "/assets/firmware.cpio.gz"]
	args: ["console=ttyS0", "pct=%{x}"]
	roles: etcd: {kernel: "/assets/etcd/vmlinuz", args: []}
}
`

// compile compiles an example, with extra CUE in a file of its own when
// given, and issues its PKI with the test bundle.
func compile(t *testing.T, name, extra string) *pki.Material {
	t.Helper()
	var files map[string]string
	if extra != "" {
		files = map[string]string{"zz_extra.cue": "package cluster\n" + extra}
	}
	return fixture.Material(t, name, files)
}

// build builds an example's module through the pipeline, as kcompile
// build --target terraform does, with the cloud-init and Ignition trees
// it serves, and returns the pipeline's output.
func build(t *testing.T, name, extra string) *pipeline.Output {
	t.Helper()
	src := pipeline.Source{Dir: fixture.Path("examples/" + name)}
	if extra != "" {
		src.Overlay = map[string][]byte{"zz_extra.cue": []byte("package cluster\n" + extra)}
	}
	out, err := pipeline.Run(pipeline.Input{Source: src, Bundle: fixture.Bundle(t), Now: now,
		Targets: []pipeline.Target{pipeline.Terraform, pipeline.CloudInit, pipeline.Ignition}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// module is the Terraform module of a build that succeeded.
func module(t *testing.T, out *pipeline.Output) *targets.Tree {
	t.Helper()
	tree, ok := out.Trees[pipeline.Terraform]
	if !ok {
		t.Fatalf("no module: %v", out.Diagnostics)
	}
	return tree
}

// now is the clock the bundle's CAs are checked with.
var now = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

// console evaluates expr with tofu console in dir and decodes the JSON
// it encodes into v; base64 keeps the console's own quoting out of it.
func console(t *testing.T, dir string, env []string, expr string, v any) {
	t.Helper()
	out := tofu(t, dir, env, "base64encode(jsonencode("+expr+"))\n", "console")
	var b64 string
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &b64); err != nil {
		t.Fatalf("tofu console printed %q: %v", out, err)
	}
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

// bin is a program scripts/tools built into .bin.
func bin(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs("../../.bin/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run scripts/tools first", p)
	}
	return p
}

// tofuEnv is an environment in which tofu installs the Matchbox provider
// from the mirror scripts/tools fills, and from nowhere else.
func tofuEnv(t *testing.T) []string {
	t.Helper()
	mirror := bin(t, "providers")
	rc := filepath.Join(t.TempDir(), "tofurc")
	cfg := `provider_installation {
  filesystem_mirror {
    path    = "` + mirror + `"
    include = ["registry.opentofu.org/poseidon/matchbox"]
  }
}
`
	if err := os.WriteFile(rc, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
}

func tofu(t *testing.T, dir string, env []string, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin(t, "tofu"), args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tofu %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestModuleValidates has OpenTofu itself judge the generated modules:
// init with the real provider, validate against its schema, and fmt
// finds nothing to change.
func TestModuleValidates(t *testing.T) {
	env := tofuEnv(t)
	for _, ex := range [][2]string{{"ha-stacked", ""}, {"external-etcd", externalBoot}, {"flatcar", ""}, {"ha-stacked", mixed}} {
		tree := module(t, build(t, ex[0], ex[1]))
		dir := filepath.Join(t.TempDir(), "terraform")
		if _, err := writer.Write(dir, tree, writer.Options{}); err != nil {
			t.Fatal(err)
		}
		tofu(t, dir, env, "", "init", "-input=false", "-backend=false", "-no-color")
		tofu(t, dir, env, "", "validate", "-no-color")
		tofu(t, dir, env, "", "fmt", "-check", "-diff", "-recursive", "-no-color")
	}
}

// TestModuleValues evaluates the module's locals with tofu console and
// finds the spec's boot images, with role overrides applied, a template
// introducer surviving the HCL quoting (the compiler refuses quotes and $
// in kernel arguments; FuzzHCL and TestQuoteRoundTrip try the rest), and
// the seed argument.
func TestModuleValues(t *testing.T) {
	out := build(t, "external-etcd", externalBoot)
	tree := module(t, out)
	dir := filepath.Join(t.TempDir(), "terraform")
	if _, err := writer.Write(dir, tree, writer.Options{}); err != nil {
		t.Fatal(err)
	}
	env := tofuEnv(t)
	tofu(t, dir, env, "", "init", "-input=false", "-no-color")
	var got struct {
		Roles map[string]struct {
			Kernel string   `json:"kernel"`
			Initrd []string `json:"initrd"`
			Args   []string `json:"args"`
		} `json:"roles"`
		Seed    string                       `json:"seed"`
		Nocloud string                       `json:"nocloud"`
		Nodes   map[string]map[string]string `json:"nodes"`
	}
	console(t, dir, env, "{roles = local.roles, seed = local.seed, nocloud = local.nocloud, nodes = local.nodes}", &got)
	// Each initrd is named on the command line, for UEFI's EFI stub.
	named := []string{"initrd=initrd.img", "initrd=firmware.cpio.gz"}
	wantArgs := append(slices.Clone(named), "console=ttyS0", "pct=%{x}")
	for role, want := range map[string]struct {
		kernel string
		args   []string
	}{
		"control-plane": {"https://images.example.com/debian/vmlinuz", wantArgs},
		"etcd":          {"/assets/etcd/vmlinuz", named},
		"worker":        {"https://images.example.com/debian/vmlinuz", wantArgs},
	} {
		r, ok := got.Roles[role]
		if !ok {
			t.Errorf("no profile for role %s: %v", role, got.Roles)
			continue
		}
		if r.Kernel != want.kernel || strings.Join(r.Args, " ") != strings.Join(want.args, " ") {
			t.Errorf("role %s: kernel %q args %q, want %q %q", role, r.Kernel, r.Args, want.kernel, want.args)
		}
		if strings.Join(r.Initrd, " ") != "https://images.example.com/debian/initrd.img /assets/firmware.cpio.gz" {
			t.Errorf("role %s: initrd %q", role, r.Initrd)
		}
	}
	if want := "ds=nocloud-net;s=https://matchbox.example.com:8443/generic?mac=${mac:hexhyp}&file=%s"; got.Seed != want {
		t.Errorf("seed %q, want %q", got.Seed, want)
	}
	if got.Nocloud != terraform.NocloudTemplate {
		t.Errorf("nocloud template %q, want %q", got.Nocloud, terraform.NocloudTemplate)
	}
	if len(got.Nodes) != len(out.Cluster.Nodes) {
		t.Errorf("%d nodes in the module, %d in the cluster", len(got.Nodes), len(out.Cluster.Nodes))
	}
	for _, n := range out.Cluster.Nodes {
		g := got.Nodes[n.Name]
		if g["mac"] != n.MAC || g["role"] != string(n.Role) || g["address"] != n.Address().String() {
			t.Errorf("node %s: %v", n.Name, g)
		}
	}
}

// TestQuoteRoundTrip has tofu, whose HCL is a fork of the one FuzzHCL
// parses with, read back the value tokens of strings of every awkward
// kind.
func TestQuoteRoundTrip(t *testing.T) {
	in := []string{"", `a"b`, `back\slash`, "line\nfeed\r\ttab", "${x}", "$${x}", "$$${x}", "%{if}", "%%{x}",
		"$", "%", "${", "%{", "end$", "end%", "}", "# x", "// x", "/* x", "<<EOF\nx\nEOF", "unicode ünï €",
		"ctl\x00\x01\x1b[31m\x1f\x7f", "\u00a0\u200b\u2028\ufeff\U0001f600", "{{.user_data}}"}
	list, bad := terraform.QuoteList(in)
	if bad != nil {
		t.Fatalf("%q refused", *bad)
	}
	var got []string
	console(t, t.TempDir(), tofuEnv(t), string(list), &got)
	if len(got) != len(in) {
		t.Fatalf("got %q", got)
	}
	for i := range in {
		if got[i] != in[i] {
			t.Errorf("%q came back as %q (the list written: %s)", in[i], got[i], list)
		}
	}
}

// TestNodeFilesAreTheCloudInitTarget: the module serves exactly what the
// cloudinit target builds, and keeps it private.
func TestNodeFilesAreTheCloudInitTarget(t *testing.T) {
	out := build(t, "ha-stacked", "")
	tree, ci := module(t, out), out.Trees[pipeline.CloudInit]
	n := 0
	for _, f := range tree.Files() {
		if !strings.HasPrefix(f.Path, "nodes/") {
			continue
		}
		n++
		want, ok := ci.Get(f.Path)
		if !ok || !bytes.Equal(f.Data, want.Data) {
			t.Errorf("%s differs from the cloudinit target's", f.Path)
		}
		if f.Mode != 0o600 {
			t.Errorf("%s has mode %o, want 600", f.Path, f.Mode)
		}
	}
	if want := 3 * len(out.Cluster.Nodes); n != want {
		t.Errorf("%d node files, want %d", n, want)
	}
}

func TestCheck(t *testing.T) {
	// single-node has no boot section.
	c := compile(t, "single-node", "").Cluster
	d := terraform.Check(c)
	if len(d) != 1 || d[0].Code != terraform.CodeNoBoot || !d[0].Primary().IsValid() {
		t.Errorf("single-node: %v", d)
	}
	// A pool without macs is one diagnostic at the pool.
	c = compile(t, "external-etcd", "boot: {matchboxURL: \"http://m:8080\", kernel: \"/assets/k\"}\n").Cluster
	d = terraform.Check(c)
	if len(d) != 1 || d[0].Code != terraform.CodeNoMAC || d[0].Path != "workers.pools.compute" ||
		!strings.Contains(d[0].Message, "4 nodes (compute-1, compute-2, compute-3, compute-4)") || d[0].Primary().File == "" {
		t.Errorf("external-etcd without pool macs: %v", d)
	}
	c = compile(t, "external-etcd", externalBoot).Cluster
	if d := terraform.Check(c); len(d) != 0 {
		t.Errorf("a complete spec: %v", d)
	}
	if out := build(t, "single-node", ""); out.Trees[pipeline.Terraform] != nil || !out.Diagnostics.HasErrors() {
		t.Error("Build built a module for a spec without boot")
	}
	// Debian and Flatcar nodes, neither with a kernel of its own: one
	// kernel for both is an error at boot.kernel; one family with its
	// own kernel is enough.
	c = compile(t, "ha-stacked", `workers: pools: general: os: "flatcar"`+"\n"+fixture.Downloads("http://10.0.0.5/assets")).Cluster
	if d := terraform.Check(c); len(d) != 1 || d[0].Code != terraform.CodeOSKernel || d[0].Path != "boot.kernel" || !d[0].Primary().IsValid() ||
		!strings.Contains(d[0].Message, "debian and flatcar") {
		t.Errorf("two families, one kernel: %v", d)
	}
	if d := terraform.Check(compile(t, "ha-stacked", mixed).Cluster); len(d) != 0 {
		t.Errorf("a kernel for Flatcar: %v", d)
	}
}

// mixed puts ha-stacked's workers on Flatcar: the module serves both
// cloud-init and Ignition.
var mixed = `workers: pools: general: os: "flatcar"
boot: os: flatcar: {kernel: "/assets/flatcar/vmlinuz", initrd: ["/assets/flatcar/initrd.cpio.gz"]}
` + fixture.Downloads("http://10.0.0.5/assets")

// TestConfigTooLarge: a node configuration Matchbox's API would refuse
// is an error at the node, for either kind.
func TestConfigTooLarge(t *testing.T) {
	for _, tc := range []struct{ example, node, file, path string }{
		{"flatcar", "w2", "config.ign", "workers.pools.edge"},
		{"ha-stacked", "cp2", "user-data", "controlPlane.nodes.cp2"},
	} {
		out := build(t, tc.example, "")
		tree := module(t, out)
		if out.Diagnostics.HasErrors() {
			t.Fatalf("%s: %v", tc.example, out.Diagnostics)
		}
		if d := terraform.CheckSizes(out.Cluster, tree); len(d) > 0 {
			t.Fatalf("%s: %v", tc.example, d)
		}
		big := targets.NewTree()
		for _, f := range tree.Files() {
			if f.Path == layout.NodeTree(tc.node, tc.file) {
				f.Data = bytes.Repeat([]byte("x"), terraform.MaxConfigBytes+1)
			}
			if err := big.Add(f.Path, f.Data, f.Mode); err != nil {
				t.Fatal(err)
			}
		}
		d := terraform.CheckSizes(out.Cluster, big)
		if len(d) != 1 || d[0].Code != terraform.CodeTooLarge || d[0].Path != tc.path || len(d[0].Positions) != 1 || !strings.Contains(d[0].Message, "node "+tc.node+" ") {
			t.Errorf("%s: %v", tc.example, d)
		}
	}
}

// TestNamedInitrds: each initrd is named on the kernel command line by
// the name iPXE gives it (its URL's last segment, or --name), as the
// distributions' iPXE documentation and Matchbox's and Typhoon's
// profiles write it: Flatcar's by file name, Fedora CoreOS's live
// initramfs as "main"; an initrd= the spec gives already is not
// repeated, and the spec's arguments follow in their order.
func TestNamedInitrds(t *testing.T) {
	for _, tc := range []struct {
		img                  ir.BootImage
		wantInitrd, wantArgs string
	}{
		{ir.BootImage{OS: ir.OSFlatcar, Initrd: []string{"/assets/flatcar/flatcar_production_pxe_image.cpio.gz"}, Args: []string{"console=ttyS0"}},
			"/assets/flatcar/flatcar_production_pxe_image.cpio.gz", "initrd=flatcar_production_pxe_image.cpio.gz console=ttyS0"},
		{ir.BootImage{OS: ir.OSFedoraCoreOS, Initrd: []string{"https://builds.example.com/fcos/fedora-coreos-live-initramfs.x86_64.img"}},
			"--name main https://builds.example.com/fcos/fedora-coreos-live-initramfs.x86_64.img", "initrd=main"},
		{ir.BootImage{OS: ir.OSDebian, Initrd: []string{"https://example.com/d/initrd.gz?v=2#x", "/assets/fw.cpio"}, Args: []string{"initrd=fw.cpio", "quiet"}},
			"https://example.com/d/initrd.gz?v=2#x /assets/fw.cpio", "initrd=initrd.gz initrd=fw.cpio quiet"},
		{ir.BootImage{OS: ir.OSDebian}, "", ""},
	} {
		initrd, args := terraform.NamedInitrds(tc.img)
		if got := strings.Join(initrd, " "); got != tc.wantInitrd {
			t.Errorf("%s %v: initrd %q, want %q", tc.img.OS, tc.img.Initrd, got, tc.wantInitrd)
		}
		if got := strings.Join(args, " "); got != tc.wantArgs {
			t.Errorf("%s %v: args %q, want %q", tc.img.OS, tc.img.Initrd, got, tc.wantArgs)
		}
	}
}
