// Package terraform renders a cluster as an OpenTofu/Terraform root module
// that provisions its bare-metal machines through Matchbox, selected by
// MAC address: for cloud-init nodes a matchbox_profile per role carries
// the kernel, initrds and kernel arguments of the spec's boot section and
// a matchbox_group per node serves its cloud-init (user-data, meta-data,
// network-config) from the cloudinit target; an Ignition node gets a
// profile of its own carrying its family's boot image and its Ignition
// config from the ignition target. Runner drives the module with
// terraform-exec.
//
// The module is written with hclwrite: spec values only as value tokens,
// which hclwrite escapes, and expressions of our own as code, a type no
// spec string becomes without a visible conversion.
package terraform

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/ignition"
)

// StateDir is where the module keeps its state, relative to the module:
// beside it, so that building the module again never touches the state.
const StateDir = "../terraform-state"

// The provider the module uses. Its version is the one the tests run.
const (
	providerSource  = "poseidon/matchbox"
	providerVersion = "~> 0.5.4"
)

// nodeFiles are the cloud-init files each node's group serves, and the
// metadata key each is stored under (Matchbox metadata keys are template
// variables: no '-').
var nodeFiles = []struct{ file, key string }{
	{layout.UserData, "user_data"},
	{"meta-data", "meta_data"},
	{"network-config", "network_config"},
}

// Build renders the module around ci and ign, the cloud-init and
// Ignition trees built from m. The diagnostics are the target's own checks
// (Check, CheckSizes); with an error among them there is no tree. An
// error is a compiler bug.
func Build(m *pki.Material, ci, ign *targets.Tree) (*targets.Tree, diag.List, error) {
	c := m.Cluster
	if diags := Check(c); diags.HasErrors() {
		return nil, diags, nil
	}
	tree, err := module(c, ci, ign)
	if err != nil {
		return nil, nil, err
	}
	if diags := CheckSizes(c, tree); diags.HasErrors() {
		return nil, diags, nil
	}
	return tree, nil, nil
}

func module(c *ir.Cluster, ci, ign *targets.Tree) (*targets.Tree, error) {
	out := targets.NewTree()
	for _, n := range c.Nodes {
		if n.OS.Ignition() {
			p := layout.NodeTree(n.Name, ignition.ConfigName)
			src, ok := ign.Get(p)
			if !ok {
				return nil, fmt.Errorf("kcompile bug: ignition target wrote no %s", p)
			}
			if err := out.Add(p, src.Data, src.Mode); err != nil {
				return nil, err
			}
			continue
		}
		for _, f := range nodeFiles {
			p := layout.NodeTree(n.Name, f.file)
			src, ok := ci.Get(p)
			if !ok {
				return nil, fmt.Errorf("kcompile bug: cloudinit target wrote no %s", p)
			}
			if err := out.Add(p, src.Data, src.Mode); err != nil {
				return nil, err
			}
		}
	}
	main, err := mainTF(c)
	if err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{
		"versions.tf":  versionsTF(),
		"variables.tf": variablesTF(),
		"main.tf":      main,
		"outputs.tf":   outputsTF(c),
		"README":       []byte(readme(c)),
	} {
		if err := out.Add(name, data, 0o644); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SeedArg is the kernel argument that points cloud-init's NoCloud data
// source at Matchbox. iPXE replaces ${mac:hexhyp} with the booting
// interface's MAC; cloud-init replaces %s with the file it wants
// (user-data, meta-data, vendor-data).
func SeedArg(b *ir.Boot) string {
	return "ds=nocloud-net;s=" + b.MatchboxURL + "/generic?mac=${mac:hexhyp}&file=%s"
}

// nocloudTemplate is each profile's generic config. Matchbox renders it
// with the matching group's metadata for GET /generic?mac=...&file=NAME;
// vendor-data (and any other name) is empty, and a request without file
// gets the user-data. index, unlike a field reference, yields "" for an
// absent query parameter under Matchbox's missingkey=error.
const nocloudTemplate = `{{- $file := index .request.query "file" -}}` +
	`{{- if or (eq $file "") (eq $file "user-data") -}}{{.user_data}}` +
	`{{- else if eq $file "meta-data" -}}{{.meta_data}}` +
	`{{- else if eq $file "network-config" -}}{{.network_config}}` +
	`{{- end -}}`

// code is HCL source of ours: a comment, or an expression (references,
// calls, templates) that holds no spec value. Spec strings are plain
// strings and reach a file only through value tokens.
type code string

// tokens lexes c. Every code is a constant of this package, and every
// build lexes all of them, so an error is a bug no test can miss.
func (c code) tokens() hclwrite.Tokens {
	f, diags := hclwrite.ParseConfig([]byte("x = "+c+"\n"), "", hcl.InitialPos)
	if diags.HasErrors() {
		panic(fmt.Sprintf("kcompile bug: terraform target's HCL %q: %s", c, diags.Error()))
	}
	return f.Body().GetAttribute("x").Expr().BuildTokens(nil)
}

func comment(lines ...code) hclwrite.Tokens {
	var toks hclwrite.Tokens
	for _, l := range lines {
		toks = append(toks, &hclwrite.Token{Type: hclsyntax.TokenComment, Bytes: []byte("# " + l + "\n")})
	}
	return toks
}

// newFile starts a file with the generated-file header.
func newFile() *hclwrite.File {
	f := hclwrite.NewEmptyFile()
	f.Body().AppendUnstructuredTokens(comment("Generated by kcompile. Do not edit: change the spec and build again."))
	f.Body().AppendNewline()
	return f
}

// render lays the file out as tofu fmt does, so that fmt finds nothing
// to change.
func render(f *hclwrite.File) []byte { return hclwrite.Format(f.Bytes()) }

func versionsTF() []byte {
	f := newFile()
	tf := f.Body().AppendNewBlock("terraform", nil).Body()
	tf.AppendNewBlock("required_providers", nil).Body().SetAttributeValue("matchbox", cty.ObjectVal(map[string]cty.Value{
		"source":  cty.StringVal(providerSource),
		"version": cty.StringVal(providerVersion),
	}))
	tf.AppendNewline()
	tf.AppendUnstructuredTokens(comment(
		"The state holds every node's user-data, private keys included:",
		"keep it beside the module (a rebuild replaces the module directory)",
		"and readable by you alone."))
	tf.AppendNewBlock("backend", []string{"local"}).Body().SetAttributeValue("path", cty.StringVal(StateDir+"/terraform.tfstate"))
	return render(f)
}

func variablesTF() []byte {
	f := newFile()
	for i, v := range []struct{ name, desc string }{
		{"matchbox_endpoint", "Matchbox's gRPC API as host:port (matchbox -rpc-address)."},
		{"matchbox_ca", "Path of the PEM CA certificate that signed Matchbox's gRPC server certificate."},
		{"matchbox_client_cert", "Path of the PEM client certificate Matchbox's gRPC API accepts."},
		{"matchbox_client_key", "Path of the PEM private key of the client certificate."},
	} {
		if i > 0 {
			f.Body().AppendNewline()
		}
		b := f.Body().AppendNewBlock("variable", []string{v.name}).Body()
		b.SetAttributeValue("description", cty.StringVal(v.desc))
		b.SetAttributeRaw("type", code("string").tokens())
	}
	return render(f)
}

// profileName and groupName are the Matchbox ids; the cluster name keeps
// several clusters apart on one Matchbox. The module builds the same
// names from local.cluster.
func profileName(c *ir.Cluster, r ir.Role) string { return c.Name + "-" + string(r) }
func groupName(c *ir.Cluster, node string) string { return c.Name + "-" + node }

// nodeProfileName is the profile of one Ignition node. The module builds
// the same names.
func nodeProfileName(c *ir.Cluster, node string) string { return c.Name + "-node-" + node }

// values makes the value tokens of spec strings, and remembers the first
// one HCL would not read back unchanged: HCL reads text as NFC-normalized
// UTF-8, and a spec value silently altered on the way to Matchbox is worse
// than none.
type values struct{ bad *string }

func (v *values) str(s string) hclwrite.Tokens {
	val := cty.StringVal(s)
	if v.bad == nil && (!utf8.ValidString(s) || val.AsString() != s) {
		v.bad = &s
	}
	return hclwrite.TokensForValue(val)
}

func (v *values) list(xs []string) hclwrite.Tokens {
	elems := make([]hclwrite.Tokens, len(xs))
	for i, x := range xs {
		elems[i] = v.str(x)
	}
	return hclwrite.TokensForTuple(elems)
}

// attr is an object attribute named by us.
func attr(name string, value hclwrite.Tokens) hclwrite.ObjectAttrTokens {
	return hclwrite.ObjectAttrTokens{Name: hclwrite.TokensForIdentifier(name), Value: value}
}

// inline is an object on one line, so that a node is a line of the file.
func inline(attrs ...hclwrite.ObjectAttrTokens) hclwrite.Tokens {
	toks := hclwrite.Tokens{{Type: hclsyntax.TokenOBrace, Bytes: []byte("{")}}
	for i, a := range attrs {
		if i > 0 {
			toks = append(toks, &hclwrite.Token{Type: hclsyntax.TokenComma, Bytes: []byte(",")})
		}
		toks = append(toks, a.Name...)
		toks = append(toks, &hclwrite.Token{Type: hclsyntax.TokenEqual, Bytes: []byte("=")})
		toks = append(toks, a.Value...)
	}
	return append(toks, &hclwrite.Token{Type: hclsyntax.TokenCBrace, Bytes: []byte("}")})
}

// IgnitionArgs are the kernel arguments kcompile appends for a node of an
// Ignition system: its family's first-boot switch and the URL Ignition
// fetches the config from, the node's group selected by the MAC iPXE
// writes into ${mac:hexhyp}.
func IgnitionArgs(b *ir.Boot, os ir.OS) []string {
	url := "ignition.config.url=" + b.MatchboxURL + "/ignition?mac=${mac:hexhyp}"
	if os == ir.OSFlatcar {
		return []string{"flatcar.first_boot=yes", url}
	}
	return []string{"ignition.firstboot", "ignition.platform.id=metal", url}
}

// NamedInitrds are a boot image's initrds as Matchbox hands them to
// iPXE, and its kernel arguments with an initrd=NAME for each, first: a
// UEFI kernel's EFI stub loads only the initrds its command line names
// (iPXE puts each in a virtual file system under the name of its URL's
// last segment, or --name), and a BIOS boot, which hands them over
// through the boot protocol, ignores the argument. Fedora CoreOS's
// live initramfs is named "main" as its documentation, Matchbox's
// examples and Typhoon name it; Flatcar's keeps its file name
// (initrd=flatcar_production_pxe_image.cpio.gz, as theirs do).
func NamedInitrds(img ir.BootImage) (initrd, args []string) {
	for i, f := range img.Initrd {
		u := strings.SplitN(strings.SplitN(f, "?", 2)[0], "#", 2)[0]
		name := path.Base(u)
		if img.OS == ir.OSFedoraCoreOS && i == 0 {
			name, f = "main", "--name main "+f
		}
		initrd = append(initrd, f)
		if arg := "initrd=" + name; !slices.Contains(args, arg) && !slices.Contains(img.Args, arg) {
			args = append(args, arg)
		}
	}
	return initrd, append(args, img.Args...)
}

// IgnitionProfile is the kernel, the initrds and the kernel arguments of
// the Matchbox profile of an Ignition node: its role's image for its
// family, the initrds named, and Ignition's arguments last.
func IgnitionProfile(c *ir.Cluster, n ir.Node) (kernel string, initrd, args []string, err error) {
	img, err := image(c, n.Role, n.OS)
	if err != nil {
		return "", nil, nil, err
	}
	initrd, args = NamedInitrds(img)
	return img.Kernel, initrd, append(args, IgnitionArgs(c.Boot, n.OS)...), nil
}

// image is the boot image of a role's nodes of one family.
func image(c *ir.Cluster, role ir.Role, os ir.OS) (ir.BootImage, error) {
	for _, img := range c.Boot.Images {
		if img.Role == role && img.OS == os {
			return img, nil
		}
	}
	return ir.BootImage{}, fmt.Errorf("kcompile bug: no boot image for %s nodes on %s", role, os)
}

func mainTF(c *ir.Cluster) ([]byte, error) {
	var v values
	f := newFile()
	body := f.Body()
	var cloud, ign []ir.Node
	for _, n := range c.Nodes {
		if n.OS.Ignition() {
			ign = append(ign, n)
		} else {
			cloud = append(cloud, n)
		}
	}
	body.AppendUnstructuredTokens(comment(
		"Network boot of the cluster through Matchbox: machines iPXE-boot the",
		"profile of their group, selected by the machine's MAC address;",
		"cloud-init (NoCloud) or Ignition then fetches the node's configuration",
		"from Matchbox."))
	body.AppendNewline()

	provider := body.AppendNewBlock("provider", []string{"matchbox"}).Body()
	provider.SetAttributeRaw("endpoint", code("var.matchbox_endpoint").tokens())
	provider.SetAttributeRaw("ca", code("file(var.matchbox_ca)").tokens())
	provider.SetAttributeRaw("client_cert", code("file(var.matchbox_client_cert)").tokens())
	provider.SetAttributeRaw("client_key", code("file(var.matchbox_client_key)").tokens())
	body.AppendNewline()

	// Keys are always quoted, unlike in TokensForValue's objects: bare, a
	// node named "for" would start a for expression.
	var roles, nodes, ignNodes []hclwrite.ObjectAttrTokens
	for _, img := range c.Boot.Images {
		if img.OS.Ignition() {
			continue
		}
		initrd, args := NamedInitrds(img)
		roles = append(roles, hclwrite.ObjectAttrTokens{Name: v.str(string(img.Role)), Value: hclwrite.TokensForObject([]hclwrite.ObjectAttrTokens{
			attr("kernel", v.str(img.Kernel)),
			attr("initrd", v.list(initrd)),
			attr("args", v.list(args)),
		})})
	}
	for _, n := range cloud {
		nodes = append(nodes, hclwrite.ObjectAttrTokens{Name: v.str(n.Name), Value: inline(
			attr("role", v.str(string(n.Role))),
			attr("mac", v.str(n.MAC)),
			attr("address", v.str(n.Address().String())),
		)})
	}
	for _, n := range ign {
		kernel, initrd, args, err := IgnitionProfile(c, n)
		if err != nil {
			return nil, err
		}
		ignNodes = append(ignNodes, hclwrite.ObjectAttrTokens{Name: v.str(n.Name), Value: hclwrite.TokensForObject([]hclwrite.ObjectAttrTokens{
			attr("role", v.str(string(n.Role))),
			attr("os", v.str(string(n.OS))),
			attr("mac", v.str(n.MAC)),
			attr("address", v.str(n.Address().String())),
			attr("kernel", v.str(kernel)),
			attr("initrd", v.list(initrd)),
			attr("args", v.list(args)),
		})})
	}
	locals := body.AppendNewBlock("locals", nil).Body()
	locals.AppendUnstructuredTokens(comment(
		"Every Matchbox id starts with the cluster's name, so that clusters",
		"can share one Matchbox."))
	locals.SetAttributeRaw("cluster", v.str(c.Name))
	if len(cloud) > 0 {
		locals.AppendNewline()
		locals.AppendUnstructuredTokens(comment(
			"Served to cloud-init's NoCloud data source, which asks for",
			"/generic?mac=MAC&file=user-data, meta-data and vendor-data."))
		locals.SetAttributeValue("nocloud", cty.StringVal(nocloudTemplate))
		locals.AppendNewline()
		locals.AppendUnstructuredTokens(comment("The kernel argument that points cloud-init at Matchbox."))
		locals.SetAttributeRaw("seed", v.str(SeedArg(c.Boot)))
		locals.AppendNewline()
		locals.SetAttributeRaw("roles", hclwrite.TokensForObject(roles))
		locals.AppendNewline()
		locals.SetAttributeRaw("nodes", hclwrite.TokensForObject(nodes))
	}
	if len(ign) > 0 {
		locals.AppendNewline()
		locals.AppendUnstructuredTokens(comment(
			"The nodes of an Ignition system: a profile each, whose Ignition",
			"config Matchbox serves at /ignition?mac=MAC, and whose kernel",
			"arguments point Ignition there."))
		locals.SetAttributeRaw("ignition_nodes", hclwrite.TokensForObject(ignNodes))
	}
	body.AppendNewline()

	if len(cloud) > 0 {
		profile := body.AppendNewBlock("resource", []string{"matchbox_profile", "role"}).Body()
		profile.SetAttributeRaw("for_each", code("local.roles").tokens())
		profile.AppendNewline()
		profile.SetAttributeRaw("name", code(`"${local.cluster}-${each.key}"`).tokens())
		profile.SetAttributeRaw("kernel", code("each.value.kernel").tokens())
		profile.SetAttributeRaw("initrd", code("each.value.initrd").tokens())
		profile.SetAttributeRaw("args", code("concat(each.value.args, [local.seed])").tokens())
		profile.SetAttributeRaw("generic_config", code("local.nocloud").tokens())
		body.AppendNewline()

		group := body.AppendNewBlock("resource", []string{"matchbox_group", "node"}).Body()
		group.SetAttributeRaw("for_each", code("local.nodes").tokens())
		group.AppendNewline()
		group.SetAttributeRaw("name", code(`"${local.cluster}-${each.key}"`).tokens())
		group.SetAttributeRaw("profile", code("matchbox_profile.role[each.value.role].name").tokens())
		group.SetAttributeRaw("selector", code("{ mac = each.value.mac }").tokens())
		var metadata []hclwrite.ObjectAttrTokens
		for _, nf := range nodeFiles {
			// nodeFiles is ours: the file names are no spec values.
			read := code(`file("${path.module}/nodes/${each.key}/` + nf.file + `")`)
			if nf.file == layout.UserData {
				// It carries the node's private keys: never shown in a plan.
				read = "sensitive(" + read + ")"
			}
			metadata = append(metadata, attr(nf.key, read.tokens()))
		}
		group.SetAttributeRaw("metadata", hclwrite.TokensForObject(metadata))
	}
	if len(ign) > 0 {
		if len(cloud) > 0 {
			body.AppendNewline()
		}
		profile := body.AppendNewBlock("resource", []string{"matchbox_profile", "ignition"}).Body()
		profile.SetAttributeRaw("for_each", code("local.ignition_nodes").tokens())
		profile.AppendNewline()
		// "node-": a node named like a role ("worker") must not take
		// the role profile's id.
		profile.SetAttributeRaw("name", code(`"${local.cluster}-node-${each.key}"`).tokens())
		profile.SetAttributeRaw("kernel", code("each.value.kernel").tokens())
		profile.SetAttributeRaw("initrd", code("each.value.initrd").tokens())
		profile.SetAttributeRaw("args", code("each.value.args").tokens())
		profile.AppendUnstructuredTokens(comment("It carries the node's private keys: never shown in a plan."))
		profile.SetAttributeRaw("raw_ignition", code(`sensitive(file("${path.module}/nodes/${each.key}/`+ignition.ConfigName+`"))`).tokens())
		body.AppendNewline()

		group := body.AppendNewBlock("resource", []string{"matchbox_group", "ignition"}).Body()
		group.SetAttributeRaw("for_each", code("local.ignition_nodes").tokens())
		group.AppendNewline()
		group.SetAttributeRaw("name", code(`"${local.cluster}-${each.key}"`).tokens())
		group.SetAttributeRaw("profile", code("matchbox_profile.ignition[each.key].name").tokens())
		group.SetAttributeRaw("selector", code("{ mac = each.value.mac }").tokens())
	}

	if v.bad != nil {
		return nil, fmt.Errorf("kcompile bug: the spec value %s reached the terraform target, but HCL cannot carry it unchanged (it reads text as NFC-normalized UTF-8)", diag.Quote(*v.bad))
	}
	return render(f), nil
}

func outputsTF(c *ir.Cluster) []byte {
	cloud, ign := false, false
	for _, n := range c.Nodes {
		cloud = cloud || !n.OS.Ignition()
		ign = ign || n.OS.Ignition()
	}
	var parts []string
	if cloud {
		parts = append(parts, `{
    for name, n in local.nodes : name => merge(n, {
      group   = matchbox_group.node[name].name
      profile = matchbox_group.node[name].profile
    })
  }`)
	}
	if ign {
		parts = append(parts, `{
    for name, n in local.ignition_nodes : name => {
      role    = n.role
      mac     = n.mac
      address = n.address
      group   = matchbox_group.ignition[name].name
      profile = matchbox_group.ignition[name].profile
    }
  }`)
	}
	value := parts[0]
	if len(parts) > 1 {
		value = "merge(" + strings.Join(parts, ", ") + ")"
	}
	f := newFile()
	out := f.Body().AppendNewBlock("output", []string{"nodes"}).Body()
	out.SetAttributeValue("description", cty.StringVal("Every node: its role, MAC address, address and Matchbox group and profile."))
	out.SetAttributeRaw("value", code(value).tokens())
	return render(f)
}

// readme quotes every spec value with diag.Quote: the README is read on
// terminals, where a control character in a name would act.
func readme(c *ir.Cluster) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Network boot of cluster %s through Matchbox, generated by kcompile.\n\n", diag.Quote(c.Name))
	b.WriteString("Provision with kcompile, which runs init, plan and apply and asks before\napplying:\n\n")
	b.WriteString("  kcompile provision SPEC -s SECRETS --matchbox-endpoint HOST:PORT \\\n")
	b.WriteString("    --matchbox-ca ca.crt --matchbox-cert client.crt --matchbox-key client.key\n\n")
	b.WriteString("or by hand from this directory:\n\n")
	b.WriteString("  tofu init\n")
	b.WriteString("  tofu apply -var matchbox_endpoint=HOST:PORT -var matchbox_ca=ca.crt \\\n")
	b.WriteString("    -var matchbox_client_cert=client.crt -var matchbox_client_key=client.key\n\n")
	fmt.Fprintf(&b, "The state is kept in %s, beside this directory, and holds the\n", StateDir)
	b.WriteString("nodes' private keys: keep that directory private.\n\n")
	b.WriteString("Machines must chain-load Matchbox's iPXE endpoint (/boot.ipxe); the kernel\n")
	b.WriteString("arguments that point cloud-init or Ignition at Matchbox use iPXE's\n")
	b.WriteString("${mac:hexhyp}. The same profiles boot BIOS machines (undionly.kpxe) and\n")
	b.WriteString("UEFI ones (ipxe.efi): each initrd is named on the kernel command line\n")
	b.WriteString("(initrd=NAME), which a UEFI kernel needs and a BIOS boot ignores.\n")
	fmt.Fprintf(&b, "Matchbox serves each node's configuration under %s:\n\n", diag.Quote(c.Boot.MatchboxURL))
	cloud, ign := false, false
	for _, n := range c.Nodes {
		cloud = cloud || !n.OS.Ignition()
		ign = ign || n.OS.Ignition()
	}
	if cloud {
		b.WriteString("  /generic?mac=MAC&file=user-data|meta-data|network-config  (cloud-init)\n")
	}
	if ign {
		b.WriteString("  /ignition?mac=MAC  (Ignition)\n")
	}
	b.WriteString("\nProfiles (one per role of the cloud-init nodes, one per Ignition node):\n\n")
	for _, img := range c.Boot.Images {
		if !img.OS.Ignition() {
			fmt.Fprintf(&b, "  %s: kernel %s\n", diag.Quote(profileName(c, img.Role)), diag.Quote(img.Kernel))
		}
	}
	for _, n := range c.Nodes {
		if n.OS.Ignition() {
			img, _ := image(c, n.Role, n.OS)
			fmt.Fprintf(&b, "  %s: kernel %s (%s)\n", diag.Quote(nodeProfileName(c, n.Name)), diag.Quote(img.Kernel), n.OS.Name())
		}
	}
	b.WriteString("\nGroups (one per node, selected by MAC):\n\n")
	names := make([]string, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		profile := profileName(c, n.Role)
		if n.OS.Ignition() {
			profile = nodeProfileName(c, n.Name)
		}
		names = append(names, fmt.Sprintf("  %s: mac %s, profile %s", diag.Quote(groupName(c, n.Name)), diag.Quote(n.MAC), diag.Quote(profile)))
	}
	sort.Strings(names)
	b.WriteString(strings.Join(names, "\n"))
	b.WriteString("\n")
	return b.String()
}
