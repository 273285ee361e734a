package terraform

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	ctyjson "github.com/zclconf/go-cty/cty/json"
	"golang.org/x/text/unicode/norm"

	"github.com/kcompile/kcompile/compiler/ir"
)

// fuzzCluster is a cluster of two roles and two nodes carrying s, the
// cluster name, two node names, a MAC, the Matchbox URL, a kernel, an
// initrd and a kernel argument, wherever the module writes a spec value.
func fuzzCluster(s ...string) *ir.Cluster {
	name, node1, node2, mac, url, kernel, initrd, arg := s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]
	if node1 == node2 {
		node2 += "2" // the compiler keeps node names unique
	}
	return &ir.Cluster{
		Name: name,
		Boot: &ir.Boot{MatchboxURL: url, Images: []ir.BootImage{
			{Role: ir.RoleControlPlane, Kernel: kernel, Initrd: []string{initrd, "/assets/initrd.img"}, Args: []string{arg, "console=ttyS0"}},
			{Role: ir.RoleWorker, Kernel: kernel + "-w", Args: []string{}},
		}},
		Nodes: []ir.Node{
			{Name: node1, Role: ir.RoleControlPlane, MAC: mac, Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.11")}},
			// An IPv6 zone is free text too.
			{Name: node2, Role: ir.RoleWorker, MAC: mac + "-w", Addresses: []netip.Addr{netip.MustParseAddr("fe80::1").WithZone(arg)}},
		},
	}
}

// FuzzHCL writes main.tf for clusters whose spec strings are hostile and
// parses it back with HCL: every value reads back exactly, the locals are
// literals, and every other block, attribute and expression is the same
// as for a benign cluster, so no value added or changed any.
func FuzzHCL(f *testing.F) {
	benign := []string{"prod", "cp1", "w1", "52:54:00:00:00:11", "http://m:8080", "/k", "/i", "ip=dhcp"}
	// Strings that break text pasted into HCL, comments or a terminal, or
	// read as keywords when bare; the seeds rotate them through the
	// positions, so that each is tried in each.
	hostile := []string{
		"", "\n", "\r\n", `"`, `\`, `\"`, "${x}", "$${x}", "%{if x}", "%%{x}", "$", "%", "${", "%{", "}",
		"# c", "// c", "/* c", "*/", "<<EOF\nx\nEOF\n", "a = 1\nb", "\"\n}\nresource \"x\" \"y\" {\n#",
		"for", "null", "ünï €", "\u00a0\u200b\u2028\u202e\ufeff\U0001f600", "\x00\x01\x1b[31m\x7f", "\t",
	}
	add := func(s []string) { f.Add(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]) }
	for i := range hostile {
		s := make([]string, len(benign))
		for k := range s {
			s[k] = hostile[(i+k)%len(hostile)]
		}
		add(s)
	}
	// HCL cannot carry these unchanged (not NFC, not UTF-8): the writer
	// must refuse them wherever they are.
	for _, bad := range []string{"e\u0301", "\u212b", "\xff"} {
		for k := range benign {
			s := slices.Clone(benign)
			s[k] = bad
			add(s)
		}
	}
	benignTF, err := mainTF(fuzzCluster(benign...))
	if err != nil {
		f.Fatal(err)
	}
	_, wantCode, _ := parseModule(f, benignTF)
	wantShape := []string{
		"provider matchbox: ca client_cert client_key endpoint",
		"locals: cluster nocloud nodes roles seed",
		"resource matchbox_profile role: args for_each generic_config initrd kernel name",
		"resource matchbox_group node: for_each metadata name profile selector",
	}
	benignReadme := readme(fuzzCluster(benign...))

	f.Fuzz(func(t *testing.T, name, node1, node2, mac, url, kernel, initrd, arg string) {
		c := fuzzCluster(name, node1, node2, mac, url, kernel, initrd, arg)
		n1, n2 := c.Nodes[0], c.Nodes[1]
		// The initrds named on the command line (TestNamedInitrds).
		_, named := NamedInitrds(c.Boot.Images[0])
		cpArgs := []any{}
		for _, a := range named {
			cpArgs = append(cpArgs, a)
		}
		want := map[string]any{
			"cluster": name,
			"nocloud": nocloudTemplate,
			"seed":    "ds=nocloud-net;s=" + url + "/generic?mac=${mac:hexhyp}&file=%s",
			"roles": map[string]any{
				"control-plane": map[string]any{"kernel": kernel, "initrd": []any{initrd, "/assets/initrd.img"}, "args": cpArgs},
				"worker":        map[string]any{"kernel": kernel + "-w", "initrd": []any{}, "args": []any{}},
			},
			"nodes": map[string]any{
				n1.Name: map[string]any{"role": "control-plane", "mac": mac, "address": n1.Address().String()},
				n2.Name: map[string]any{"role": "worker", "mac": mac + "-w", "address": n2.Address().String()},
			},
		}

		checkReadme(t, readme(c), benignReadme)

		data, err := mainTF(c)
		exact := true
		for _, s := range append([]string{name, n1.Name, n2.Name, mac, mac + "-w", n2.Address().String(), kernel, initrd, arg, want["seed"].(string)}, named...) {
			exact = exact && utf8.ValidString(s) && norm.NFC.IsNormalString(s)
		}
		if !exact {
			if err == nil {
				t.Fatalf("a value HCL cannot carry unchanged was written:\n%s", data)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		shape, code, locals := parseModule(t, data)
		if !slices.Equal(shape, wantShape) {
			t.Errorf("blocks and attributes\n%q\nwant\n%q\nin\n%s", shape, wantShape, data)
		}
		if !reflect.DeepEqual(code, wantCode) {
			t.Errorf("expressions\n%q\nwant\n%q\nin\n%s", code, wantCode, data)
		}
		if !reflect.DeepEqual(locals, want) {
			t.Errorf("locals\n%#v\nwant\n%#v\nin\n%s", locals, want, data)
		}
	})
}

// parseModule parses main.tf and returns its shape (each block's type,
// labels and attribute names), the source of every expression outside
// locals, and the locals evaluated without variables or functions, so
// that a reference or a call there is an error.
func parseModule(t testing.TB, data []byte) (shape []string, code map[string]string, locals map[string]any) {
	t.Helper()
	file, diags := hclsyntax.ParseConfig(data, "main.tf", hcl.InitialPos)
	if len(diags) > 0 {
		t.Fatalf("%s\n%s", diags.Error(), data)
	}
	body := file.Body.(*hclsyntax.Body)
	for name := range body.Attributes {
		shape = append(shape, "attribute "+name)
	}
	code = map[string]string{}
	locals = map[string]any{}
	for _, b := range body.Blocks {
		id := strings.Join(append([]string{b.Type}, b.Labels...), " ")
		var names []string
		for name, a := range b.Body.Attributes {
			names = append(names, name)
			if b.Type != "locals" {
				code[id+"."+name] = string(a.Expr.Range().SliceBytes(data))
				continue
			}
			v, diags := a.Expr.Value(nil)
			if len(diags) > 0 {
				t.Fatalf("local %s: %s\n%s", name, diags.Error(), data)
			}
			j, err := ctyjson.Marshal(v, v.Type())
			if err != nil {
				t.Fatal(err)
			}
			var x any
			if err := json.Unmarshal(j, &x); err != nil {
				t.Fatal(err)
			}
			locals[name] = x
		}
		slices.Sort(names)
		shape = append(shape, id+": "+strings.Join(names, " "))
		for _, nested := range b.Body.Blocks {
			shape = append(shape, id+" has block "+nested.Type)
		}
	}
	return shape, code, locals
}

// checkReadme: spec values in the README are quoted, so that none adds a
// line or a control character to what a terminal shows.
func checkReadme(t *testing.T, got, benign string) {
	t.Helper()
	if strings.Count(got, "\n") != strings.Count(benign, "\n") {
		t.Errorf("README has %d lines, want %d:\n%s", strings.Count(got, "\n"), strings.Count(benign, "\n"), got)
	}
	if i := strings.IndexFunc(got, func(r rune) bool { return r != '\n' && !unicode.IsPrint(r) }); i >= 0 {
		t.Errorf("README has %q at byte %d:\n%s", got[i:], i, got)
	}
}
