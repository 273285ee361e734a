// Package cloudinit renders every node as cloud-init configuration: a
// #cloud-config user-data that lays the node's systemd tree on its root
// file system and starts its units in dependency order, a meta-data and a
// version 2 network-config. The systemd target renders the trees; this one
// only packs them.
package cloudinit

import (
	"encoding/base64"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
)

// startScript is systemd.StartScript, the systemd tree's one command that
// starts a node on the boot that laid its tree, on every system
// cloud-init starts: all keep kcompile's scripts in layout.LibDir
// (Flatcar, whose /usr is read-only, boots with Ignition). This package
// cannot import targets/systemd: its tests use review, which imports
// this package. A test holds the two to one value.
const startScript = "/" + layout.LibDir + "/" + layout.StartScript

// writeFile is one entry of write_files.
type writeFile struct {
	Path        string `json:"path"`
	Permissions string `json:"permissions"`
	Owner       string `json:"owner"`
	Encoding    string `json:"encoding,omitempty"`
	Content     string `json:"content"`
}

// user is one entry of users.
type user struct {
	Name              string   `json:"name"`
	SSHAuthorizedKeys []string `json:"ssh_authorized_keys,omitempty"`
	Sudo              string   `json:"sudo,omitempty"`
	Shell             string   `json:"shell"`
	LockPasswd        bool     `json:"lock_passwd"`
}

// metaData is the NoCloud meta-data of a node.
type metaData struct {
	InstanceID    string `json:"instance-id"`
	LocalHostname string `json:"local-hostname"`
}

// userData is the part of #cloud-config kcompile writes.
type userData struct {
	Hostname         string      `json:"hostname"`
	PreserveHostname bool        `json:"preserve_hostname"`
	Users            []user      `json:"users,omitempty"`
	WriteFiles       []writeFile `json:"write_files"`
	Bootcmd          [][]string  `json:"bootcmd,omitempty"`
	Runcmd           [][]string  `json:"runcmd"`
}

// Build packs the systemd tree of every cloud-init node (sd, built from m) into its
// cloud-init files under nodes/<node>/ (user-data, meta-data,
// network-config) and keeps the cluster tree as it is. The diagnostics
// are the target's own: a user-data over the spec's limit (the tree is
// returned all the same, for the size report). An error is a compiler
// bug.
func Build(m *pki.Material, sd *targets.Tree) (*targets.Tree, diag.List, error) {
	tree, err := pack(m, sd)
	if err != nil {
		return nil, nil, err
	}
	return tree, append(CheckSizes(m.Cluster, Sizes(m.Cluster, tree)), CheckRoutes(m.Cluster)...), nil
}

func pack(m *pki.Material, sd *targets.Tree) (*targets.Tree, error) {
	out, perNode, err := targets.SplitNodes(sd)
	if err != nil {
		return nil, err
	}
	for _, n := range m.Cluster.Nodes {
		// Ignition systems are the ignition target's.
		if n.OS.Ignition() {
			continue
		}
		ud, err := nodeUserData(m.Cluster, n, perNode[n.Name])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name, err)
		}
		md, err := yaml.Marshal(metaData{InstanceID: m.Cluster.Name + "-" + n.Name, LocalHostname: n.Name})
		if err != nil {
			return nil, err
		}
		nc, err := networkConfig(m.Cluster, n)
		if err != nil {
			return nil, err
		}
		for name, data := range map[string][]byte{layout.UserData: ud, layout.MetaData: md, layout.NetworkConfig: nc} {
			// user-data holds private keys.
			if err := out.Add(layout.NodeTree(n.Name, name), data, 0o600); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// nodeUserData lays the node's files down and starts its units.
func nodeUserData(c *ir.Cluster, n ir.Node, files []targets.File) ([]byte, error) {
	ud := userData{Hostname: n.Name}
	for _, u := range c.Users {
		cu := user{Name: u.Name, SSHAuthorizedKeys: u.SSHAuthorizedKeys, Shell: layout.Abs(layout.LoginShell), LockPasswd: true}
		if u.Sudo {
			// Keys only, no password: sudo cannot ask for one.
			cu.Sudo = "ALL=(ALL) NOPASSWD:ALL"
		}
		ud.Users = append(ud.Users, cu)
	}
	var modules []string
	start := false
	for _, f := range files {
		wf, err := encodeFile(f)
		if err != nil {
			return nil, err
		}
		ud.WriteFiles = append(ud.WriteFiles, wf)
		start = start || f.Path == startScript
		if f.Path == layout.Abs(layout.ModulesConf) {
			for _, l := range strings.Split(string(f.Data), "\n") {
				if l != "" && !strings.HasPrefix(l, "#") {
					modules = append(modules, l)
				}
			}
		}
	}
	for _, mod := range modules {
		// Early, so that the runtime and kube-proxy find them on the first
		// boot; modules-load.d covers later boots.
		ud.Bootcmd = append(ud.Bootcmd, []string{"modprobe", mod})
	}
	if !start {
		return nil, fmt.Errorf("kcompile bug: the node's tree has no %s", startScript)
	}
	// One command: runcmd's exit status, which cloud-init reports, is
	// its last command's. The tree's drop-in starts the units on later
	// boots, where runcmd does not run.
	ud.Runcmd = [][]string{{startScript}}
	body, err := yaml.Marshal(ud)
	if err != nil {
		return nil, err
	}
	return append([]byte("#cloud-config\n"), body...), nil
}

// encodeFile writes a file as text, or gzip+base64 when that is smaller or
// the content is not text.
func encodeFile(f targets.File) (writeFile, error) {
	wf := writeFile{Path: f.Path, Permissions: fmt.Sprintf("%04o", f.Mode.Perm()), Owner: "root:root"}
	gz, err := targets.Gzip(f.Data)
	if err != nil {
		return wf, err
	}
	packed := base64.StdEncoding.EncodeToString(gz)
	if !isText(f.Data) || len(packed) < len(f.Data) {
		wf.Encoding, wf.Content = "gz+b64", packed
	} else {
		wf.Content = string(f.Data)
	}
	return wf, nil
}

// Decode reads a user-data back into the files it writes and the rest of
// its config (YAML with sorted keys, without write_files). It reads every write_files encoding cloud-init does, not
// only the one encodeFile writes, and permissions it cannot parse read as
// 0, so that a tree kcompile did not write (an older one, one edited by
// hand) still compares.
func Decode(userData []byte) (targets.Decoded, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(userData, &doc); err != nil {
		return targets.Decoded{}, err
	}
	var ud struct {
		WriteFiles []writeFile `json:"write_files"`
	}
	if err := yaml.Unmarshal(userData, &ud); err != nil {
		return targets.Decoded{}, err
	}
	files := map[string]targets.File{}
	for _, wf := range ud.WriteFiles {
		data, err := decodeContent(wf)
		if err != nil {
			return targets.Decoded{}, fmt.Errorf("%s: %w", wf.Path, err)
		}
		mode, _ := strconv.ParseUint(wf.Permissions, 8, 32)
		files[wf.Path] = targets.File{Path: wf.Path, Data: data, Mode: fs.FileMode(mode)}
	}
	delete(doc, "write_files")
	rest, err := yaml.Marshal(doc)
	if err != nil {
		return targets.Decoded{}, err
	}
	return targets.Decoded{Files: files, Rest: rest}, nil
}

// decodeContent undoes a write_files encoding, under every name
// cloud-init accepts for base64 and for gzip+base64; any other content
// reads as text.
func decodeContent(wf writeFile) ([]byte, error) {
	switch wf.Encoding {
	case "b64", "base64":
		return base64.StdEncoding.DecodeString(wf.Content)
	case "gz+b64", "gzip+base64", "gz+base64", "gzip+b64":
		raw, err := base64.StdEncoding.DecodeString(wf.Content)
		if err != nil {
			return nil, err
		}
		return targets.Gunzip(raw)
	}
	return []byte(wf.Content), nil
}

func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 && c != '\n' && c != '\t' {
			return false
		}
	}
	return true
}

// networkConfig is the node's version 2 network configuration: its
// addresses with their node network's prefix on the interface with its
// MAC, or on the first Ethernet interface when the spec gives none.
func networkConfig(c *ir.Cluster, n ir.Node) ([]byte, error) {
	var addrs []string
	for _, a := range n.Addresses {
		for _, p := range c.Network.NodeNetworks {
			if p.Contains(a) {
				addrs = append(addrs, fmt.Sprintf("%s/%d", a, p.Bits()))
				break
			}
		}
	}
	eth := map[string]any{"addresses": addrs}
	var routes []any
	for _, g := range c.Network.Gateways {
		to := "0.0.0.0/0"
		if g.Is6() {
			to = "::/0"
		}
		routes = append(routes, map[string]any{"to": to, "via": g.String()})
	}
	if len(routes) > 0 {
		eth["routes"] = routes
	}
	if len(c.Network.Nameservers) > 0 {
		var ns []string
		for _, a := range c.Network.Nameservers {
			ns = append(ns, a.String())
		}
		eth["nameservers"] = map[string]any{"addresses": ns}
	}
	if n.MAC != "" {
		eth["match"] = map[string]any{"macaddress": n.MAC}
	} else {
		eth["match"] = map[string]any{"name": "e*"}
	}
	doc := map[string]any{"version": 2, "ethernets": map[string]any{"primary": eth}}
	return yaml.Marshal(doc)
}
