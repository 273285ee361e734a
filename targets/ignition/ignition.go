// Package ignition renders the nodes that run an Ignition system (Flatcar
// Container Linux, Fedora CoreOS) as one Ignition config each, spec 3.4.0:
// the node's systemd tree as storage.files, its units enabled through
// systemd.units, its users, hostname and network. The systemd target
// renders the trees; this one only packs them, with the upstream Ignition
// types, and parses every config back with Ignition's own parser and
// validator.
//
// Spec 3.4.0 is the newest both families accept: Flatcar's stable Butane
// variant (flatcar 1.1.0) produces 3.4.0, and Fedora CoreOS, which reads
// 3.5.0 too, reads every earlier 3.x.
package ignition

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/netip"
	"path"
	"slices"
	"strings"

	v34 "github.com/coreos/ignition/v2/config/v3_4"
	"github.com/coreos/ignition/v2/config/v3_4/types"
	"github.com/coreos/vcontext/report"
	"github.com/vincent-petithory/dataurl"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
)

// ConfigName is each node's config in the tree: nodes/<node>/config.ign.
const ConfigName = "config.ign"

// Version is the Ignition spec version of every config.
const Version = "3.4.0"

// Build packs the systemd tree of every Ignition node (sd, built from m)
// into nodes/<node>/config.ign and keeps the cluster tree as it is. It
// has no diagnostics of its own (the pipeline adds CheckCoverage's for a
// build of this target alone). An error is a compiler bug: a config
// Ignition does not accept without a warning is one.
func Build(m *pki.Material, sd *targets.Tree) (*targets.Tree, diag.List, error) {
	c := m.Cluster
	out, perNode, err := targets.SplitNodes(sd)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range c.Nodes {
		if !n.OS.Ignition() {
			continue
		}
		cfg, err := nodeConfig(c, n, perNode[n.Name])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", n.Name, err)
		}
		raw, err := json.Marshal(cfg)
		if err != nil {
			return nil, nil, err
		}
		if err := Validate(raw); err != nil {
			return nil, nil, fmt.Errorf("the config of %s: %w", n.Name, err)
		}
		// It carries the node's private keys.
		if err := out.Add(layout.NodeTree(n.Name, ConfigName), raw, 0o600); err != nil {
			return nil, nil, err
		}
	}
	return out, nil, nil
}

// Validate parses a config with Ignition's own parser for spec 3.4.0 and
// fails on any error or warning it reports.
func Validate(raw []byte) error {
	_, rpt, err := v34.Parse(raw)
	if err != nil {
		if len(rpt.Entries) > 0 {
			return fmt.Errorf("%v: %s", err, rpt.String())
		}
		return err
	}
	var problems []string
	for _, e := range rpt.Entries {
		if e.Kind == report.Error || e.Kind == report.Warn {
			problems = append(problems, e.String())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the Ignition validator reports: %s", strings.Join(problems, "; "))
	}
	return nil
}

// nodeConfig is one node's config.
func nodeConfig(c *ir.Cluster, n ir.Node, files []targets.File) (types.Config, error) {
	cfg := types.Config{Ignition: types.Ignition{Version: Version}}
	cfg.Passwd = passwd(c, n)
	host, err := file(layout.Abs(layout.Hostname), []byte(n.Name+"\n"), 0o644)
	if err != nil {
		return cfg, err
	}
	cfg.Storage.Files = append(cfg.Storage.Files, host)
	net, err := networkFile(c, n)
	if err != nil {
		return cfg, err
	}
	cfg.Storage.Files = append(cfg.Storage.Files, net)
	for _, f := range files {
		if f.Path == layout.Abs(layout.Hostname) || f.Path == net.Path {
			return cfg, fmt.Errorf("kcompile bug: the systemd tree writes %s, which the Ignition target writes itself", f.Path)
		}
		// The units too are files, with the tree's modes (owner-only, as
		// the CIS benchmark asks): systemd.units would write them 0644.
		// systemd.units enables those with an [Install] section.
		sf, err := file(f.Path, f.Data, f.Mode)
		if err != nil {
			return cfg, err
		}
		cfg.Storage.Files = append(cfg.Storage.Files, sf)
		if dir, name := path.Split(f.Path); dir == layout.Abs(layout.UnitDir) && installable(f.Data) {
			cfg.Systemd.Units = append(cfg.Systemd.Units, types.Unit{Name: name, Enabled: ptr(true)})
		}
	}
	cfg.Storage.Files = append(cfg.Storage.Files, remoteArtifacts(c, n)...)
	return cfg, nil
}

// remoteArtifacts are the artifacts of install.source "download" the
// node needs, as Ignition remote files: Ignition fetches each before the
// first boot and refuses it unless it has the spec's sha256, as users of
// these systems get what the image lacks. A binary goes to its path; an
// archive, which Ignition cannot unpack, to the artifact cache by its
// sha256, where the install unit extracts its members from. The install
// unit then checks every binary as on any node, and downloads nothing.
func remoteArtifacts(c *ir.Cluster, n ir.Node) []types.File {
	if c.Install.Source != "download" {
		return nil
	}
	needed := map[string]bool{}
	for _, b := range n.Binaries {
		needed[b.Path] = !b.OS
	}
	var out []types.File
	cached := map[string]bool{}
	for _, a := range c.Install.Artifacts {
		dest, mode := a.Path, fs.FileMode(0o755)
		if dest == "" {
			uses := false
			for _, m := range a.Extract {
				uses = uses || needed[m.Value]
			}
			if !uses || cached[a.SHA256] {
				continue
			}
			cached[a.SHA256] = true
			dest, mode = layout.Abs(layout.ArtifactCacheDir)+a.SHA256, 0o644
		} else if !needed[dest] {
			continue
		}
		out = append(out, rootFile(dest, mode, types.Resource{
			Source:       ptr(a.URL),
			Verification: types.Verification{Hash: ptr("sha256-" + a.SHA256)},
		}))
	}
	return out
}

// installable says whether a unit file has an [Install] section, which
// enabling needs.
func installable(unit []byte) bool {
	for _, l := range strings.Split(string(unit), "\n") {
		if strings.TrimSpace(l) == "[Install]" {
			return true
		}
	}
	return false
}

// file is one storage.files entry: root's, replacing whatever the image
// has there, its content a data URL, gzip-compressed when that is
// smaller.
func file(p string, data []byte, mode fs.FileMode) (types.File, error) {
	src, compression, err := contents(data)
	if err != nil {
		return types.File{}, err
	}
	return rootFile(p, mode, types.Resource{Source: &src, Compression: compression}), nil
}

// rootFile is a storage.files entry of root's, replacing whatever the
// image has at p.
func rootFile(p string, mode fs.FileMode, contents types.Resource) types.File {
	return types.File{
		Node:          types.Node{Path: p, Overwrite: ptr(true), User: types.NodeUser{Name: ptr("root")}, Group: types.NodeGroup{Name: ptr("root")}},
		FileEmbedded1: types.FileEmbedded1{Mode: ptr(int(mode.Perm())), Contents: contents},
	}
}

func contents(data []byte) (string, *string, error) {
	gz, err := targets.Gzip(data)
	if err != nil {
		return "", nil, err
	}
	if len(gz) < len(data) {
		return "data:;base64," + base64.StdEncoding.EncodeToString(gz), ptr("gzip"), nil
	}
	return "data:;base64," + base64.StdEncoding.EncodeToString(data), nil, nil
}

// passwd adds the spec's users; sudo is the group that may use sudo
// without a password on each family ("sudo" on Flatcar, "wheel" on
// Fedora CoreOS).
func passwd(c *ir.Cluster, n ir.Node) types.Passwd {
	var p types.Passwd
	admin := types.Group("sudo")
	if n.OS == ir.OSFedoraCoreOS {
		admin = "wheel"
	}
	for _, u := range c.Users {
		pu := types.PasswdUser{Name: u.Name}
		for _, k := range u.SSHAuthorizedKeys {
			pu.SSHAuthorizedKeys = append(pu.SSHAuthorizedKeys, types.SSHAuthorizedKey(k))
		}
		if u.Sudo {
			pu.Groups = []types.Group{admin}
		}
		p.Users = append(p.Users, pu)
	}
	return p
}

// networkFile is the node's static network configuration in the form its
// OS reads: a systemd-networkd .network file on Flatcar, a NetworkManager
// keyfile on Fedora CoreOS; the interface is the one with the node's MAC.
// Without a MAC, networkd matches every Ethernet interface (e*) and
// NetworkManager the first it activates: a machine with several needs
// its mac in the spec.
func networkFile(c *ir.Cluster, n ir.Node) (types.File, error) {
	var addrs []netip.Prefix
	for _, a := range n.Addresses {
		for _, p := range c.Network.NodeNetworks {
			if p.Contains(a) {
				addrs = append(addrs, netip.PrefixFrom(a, p.Bits()))
				break
			}
		}
	}
	if n.OS == ir.OSFedoraCoreOS {
		data, err := keyfile(c, n, addrs)
		if err != nil {
			return types.File{}, err
		}
		// NetworkManager ignores a keyfile others may read.
		return file(layout.Abs(layout.NMConnection), data, 0o600)
	}
	data, err := networkd(c, n, addrs)
	if err != nil {
		return types.File{}, err
	}
	return file(layout.Abs(layout.NetworkdNetwork), data, 0o644)
}

// iniWriter writes the key=value files of systemd-networkd and of
// NetworkManager's keyfiles. Every value is an address, a MAC or a
// name the compiler checked; one that would need escaping in either
// syntax is a compiler bug.
type iniWriter struct {
	b   strings.Builder
	err error
}

func (w *iniWriter) section(name string) {
	if w.b.Len() > 0 {
		w.b.WriteByte('\n')
	}
	w.b.WriteString("[" + name + "]\n")
}

func (w *iniWriter) kv(key, value string) {
	if value == "" || strings.ContainsFunc(value, func(r rune) bool {
		return r <= ' ' || r == 0x7f || r == '#' || r == '\\' || r == '"' || r == '\'' || r == '%' || r == '$'
	}) {
		if w.err == nil {
			w.err = fmt.Errorf("kcompile bug: %q is not a plain configuration value", value)
		}
	}
	w.b.WriteString(key + "=" + value + "\n")
}

func networkd(c *ir.Cluster, n ir.Node, addrs []netip.Prefix) ([]byte, error) {
	w := &iniWriter{}
	w.b.WriteString("# Generated by kcompile: the node's addresses, routes and resolvers.\n")
	w.section("Match")
	if n.MAC != "" {
		w.kv("MACAddress", n.MAC)
	} else {
		w.kv("Type", "ether")
		w.kv("Name", "e*")
	}
	w.section("Network")
	for _, a := range addrs {
		w.kv("Address", a.String())
	}
	for _, g := range c.Network.Gateways {
		w.kv("Gateway", g.String())
	}
	for _, ns := range c.Network.Nameservers {
		w.kv("DNS", ns.String())
	}
	return []byte(w.b.String()), w.err
}

func keyfile(c *ir.Cluster, n ir.Node, addrs []netip.Prefix) ([]byte, error) {
	w := &iniWriter{}
	w.b.WriteString("# Generated by kcompile: the node's addresses, routes and resolvers.\n")
	w.section("connection")
	w.kv("id", "kcompile")
	w.kv("type", "ethernet")
	w.kv("autoconnect", "true")
	if n.MAC != "" {
		w.section("ethernet")
		w.kv("mac-address", strings.ToUpper(n.MAC))
	}
	for _, fam := range []struct {
		name string
		v4   bool
	}{{"ipv4", true}, {"ipv6", false}} {
		w.section(fam.name)
		i := 0
		for _, a := range addrs {
			if a.Addr().Is4() != fam.v4 {
				continue
			}
			i++
			entry := a.String()
			if i == 1 {
				for _, g := range c.Network.Gateways {
					if g.Is4() == fam.v4 {
						entry += "," + g.String()
					}
				}
			}
			w.kv(fmt.Sprintf("address%d", i), entry)
		}
		var dns []string
		for _, ns := range c.Network.Nameservers {
			if ns.Is4() == fam.v4 {
				dns = append(dns, ns.String()+";")
			}
		}
		switch {
		case i > 0:
			w.kv("method", "manual")
			if len(dns) > 0 {
				w.kv("dns", strings.Join(dns, ""))
			}
		case fam.v4:
			w.kv("method", "disabled")
		default:
			w.kv("method", "ignore")
		}
	}
	return []byte(w.b.String()), w.err
}

// Decode reads a config back into the files it writes (units included)
// and the rest of its config, as JSON with its keys sorted: two configs
// that write the same and configure the same compare equal. A config of
// spec 3.0.0 to 3.4.0 is read.
func Decode(raw []byte) (targets.Decoded, error) {
	cfg, _, err := v34.ParseCompatibleVersion(raw)
	if err != nil {
		return targets.Decoded{}, err
	}
	files := map[string]targets.File{}
	// A remote file is configuration (its URL and hash), not content
	// kcompile has: it stays in the rest of the config.
	var remote []types.File
	for _, f := range cfg.Storage.Files {
		if f.Contents.Source != nil && !strings.HasPrefix(*f.Contents.Source, "data:") {
			remote = append(remote, f)
			continue
		}
		data, err := decodeResource(f.Contents)
		if err != nil {
			return targets.Decoded{}, fmt.Errorf("%s: %w", f.Path, err)
		}
		mode := fs.FileMode(0o644)
		if f.Mode != nil {
			mode = fs.FileMode(*f.Mode)
		}
		files[f.Path] = targets.File{Path: f.Path, Data: data, Mode: mode}
	}
	// Units with contents are files too, written 0644 by Ignition.
	var units []types.Unit
	for _, u := range cfg.Systemd.Units {
		if u.Contents != nil {
			p := layout.Abs(layout.UnitDir + u.Name)
			files[p] = targets.File{Path: p, Data: []byte(*u.Contents), Mode: 0o644}
		}
		for _, d := range u.Dropins {
			if d.Contents != nil {
				p := layout.Abs(layout.UnitDropIn(u.Name, d.Name))
				files[p] = targets.File{Path: p, Data: []byte(*d.Contents), Mode: 0o644}
			}
		}
		u.Contents, u.Dropins = nil, nil
		units = append(units, u)
	}
	slices.SortFunc(units, func(a, b types.Unit) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(remote, func(a, b types.File) int { return strings.Compare(a.Path, b.Path) })
	cfg.Storage.Files = remote
	cfg.Systemd.Units = units
	restJSON, err := json.Marshal(cfg)
	if err != nil {
		return targets.Decoded{}, err
	}
	// Through a map: sorted keys, indented, for a line diff.
	var doc any
	if err := json.Unmarshal(restJSON, &doc); err != nil {
		return targets.Decoded{}, err
	}
	rest, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return targets.Decoded{}, err
	}
	return targets.Decoded{Files: files, Rest: append(rest, '\n')}, nil
}

// decodeResource reads a data URL's content.
func decodeResource(r types.Resource) ([]byte, error) {
	if r.Source == nil {
		return nil, nil
	}
	u, err := dataurl.DecodeString(*r.Source)
	if err != nil {
		return nil, fmt.Errorf("not a data URL (%v)", err)
	}
	if r.Compression != nil && *r.Compression == "gzip" {
		return targets.Gunzip(u.Data)
	}
	return u.Data, nil
}

func ptr[T any](v T) *T { return &v }
