// Command flannel is a stand-in for flannel's CNI plugin
// (github.com/flannel-io/cni-plugin, shipped in the flannel-cni-plugin
// image), which the Go module proxy refuses to serve, so that it cannot be
// built for the machines of kcompile up. It behaves as that plugin does: a
// meta-plugin that reads flanneld's /run/flannel/subnet.env, turns the
// delegate settings of its network configuration into a configuration of
// the bridge plugin for the node's subnet and MTU with host-local IPAM,
// keeps that configuration for DEL, and delegates to the bridge plugin;
// CHECK succeeds without looking, as upstream's does.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// Upstream's defaults for the subnetFile and dataDir settings.
const (
	defaultSubnetFile = "/run/flannel/subnet.env"
	defaultDataDir    = "/var/lib/cni/flannel"
)

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Del: del, Check: check}, version.All,
		"CNI Plugin flannel (kcompile stand-in)")
}

// netConf is the plugin's network configuration.
type netConf struct {
	types.NetConf
	// IPAM replaces types.NetConf's, to keep settings it does not know.
	IPAM          map[string]any `json:"ipam,omitempty"`
	SubnetFile    string         `json:"subnetFile"`
	DataDir       string         `json:"dataDir"`
	Delegate      map[string]any `json:"delegate"`
	RuntimeConfig map[string]any `json:"runtimeConfig,omitempty"`
}

func loadNetConf(data []byte) (*netConf, error) {
	n := &netConf{SubnetFile: defaultSubnetFile, DataDir: defaultDataDir}
	if err := json.Unmarshal(data, n); err != nil {
		return nil, fmt.Errorf("failed to load netconf: %w", err)
	}
	return n, nil
}

// subnetEnv is what flanneld wrote about the node's lease.
type subnetEnv struct {
	networks, networks6 []*net.IPNet
	subnet, subnet6     *net.IPNet
	mtu                 *uint
	ipMasq              *bool
}

// loadSubnetEnv reads flanneld's subnet file: KEY=VALUE lines, networks
// as comma-separated CIDRs.
func loadSubnetEnv(file string) (*subnetEnv, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var se subnetEnv
	cidrs := func(v string) ([]*net.IPNet, error) {
		var out []*net.IPNet
		for _, c := range strings.Split(v, ",") {
			_, n, err := net.ParseCIDR(c)
			if err != nil {
				return nil, err
			}
			if !containsNet(out, n) {
				out = append(out, n)
			}
		}
		return out, nil
	}
	s := bufio.NewScanner(f)
	for s.Scan() {
		key, value, _ := strings.Cut(s.Text(), "=")
		switch key {
		case "FLANNEL_NETWORK":
			se.networks, err = cidrs(value)
		case "FLANNEL_IPV6_NETWORK":
			se.networks6, err = cidrs(value)
		case "FLANNEL_SUBNET":
			_, se.subnet, err = net.ParseCIDR(value)
		case "FLANNEL_IPV6_SUBNET":
			_, se.subnet6, err = net.ParseCIDR(value)
		case "FLANNEL_MTU":
			var mtu uint64
			mtu, err = strconv.ParseUint(value, 10, 32)
			se.mtu = new(uint(mtu))
		case "FLANNEL_IPMASQ":
			se.ipMasq = new(value == "true")
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", file, key, err)
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	var missing []string
	if len(se.networks) == 0 && len(se.networks6) == 0 {
		missing = append(missing, "FLANNEL_NETWORK", "FLANNEL_IPV6_NETWORK")
	}
	if se.subnet == nil && se.subnet6 == nil {
		missing = append(missing, "FLANNEL_SUBNET", "FLANNEL_IPV6_SUBNET")
	}
	if se.mtu == nil {
		missing = append(missing, "FLANNEL_MTU")
	}
	if se.ipMasq == nil {
		missing = append(missing, "FLANNEL_IPMASQ")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s is missing %s", file, strings.Join(missing, ", "))
	}
	return &se, nil
}

func containsNet(nets []*net.IPNet, n *net.IPNet) bool {
	for _, m := range nets {
		if m.String() == n.String() {
			return true
		}
	}
	return false
}

func add(args *skel.CmdArgs) error {
	n, err := loadNetConf(args.StdinData)
	if err != nil {
		return err
	}
	se, err := loadSubnetEnv(n.SubnetFile)
	if err != nil {
		return fmt.Errorf("failed to load flannel 'subnet.env' file: %w (check the flannel pod log for this node)", err)
	}
	delegate, err := delegateConf(n, se)
	if err != nil {
		return err
	}
	data, err := json.Marshal(delegate)
	if err != nil {
		return fmt.Errorf("error serializing delegate netconf: %w", err)
	}
	// DEL gets only the runtime's configuration: keep what was delegated.
	if err := os.MkdirAll(n.DataDir, 0o700); err != nil {
		return err
	}
	if err := writeSynced(filepath.Join(n.DataDir, args.ContainerID), data); err != nil {
		return err
	}
	result, err := invoke.DelegateAdd(context.TODO(), delegate["type"].(string), data, nil)
	if err != nil {
		return fmt.Errorf("failed to delegate add: %w", err)
	}
	return result.Print()
}

// delegateConf is the delegate plugin's configuration: the conflist's
// delegate settings, completed from flanneld's lease as upstream does.
func delegateConf(n *netConf, se *subnetEnv) (map[string]any, error) {
	d := n.Delegate
	if d == nil {
		d = map[string]any{}
	}
	if t, ok := d["type"]; ok {
		if _, ok := t.(string); !ok {
			return nil, errors.New("'delegate' dictionary, if present, must have (string) 'type' field")
		}
	}
	for _, k := range []string{"name", "ipam"} {
		if _, ok := d[k]; ok {
			return nil, fmt.Errorf("'delegate' dictionary must not have '%s' field, it'll be set by flannel", k)
		}
	}
	if n.RuntimeConfig != nil {
		d["runtimeConfig"] = n.RuntimeConfig
	}
	d["name"] = n.Name
	setDefault(d, "type", "bridge")
	// Pods masquerade themselves when flanneld does not do it for them.
	setDefault(d, "ipMasq", !*se.ipMasq)
	setDefault(d, "mtu", *se.mtu)
	if d["type"] == "bridge" {
		setDefault(d, "isGateway", true)
	}
	if n.CNIVersion != "" {
		d["cniVersion"] = n.CNIVersion
	}

	ipam := n.IPAM
	if ipam == nil {
		ipam = map[string]any{}
	}
	setDefault(ipam, "type", "host-local")
	var ranges [][]map[string]any
	for _, s := range []*net.IPNet{se.subnet, se.subnet6} {
		if s != nil {
			ranges = append(ranges, []map[string]any{{"subnet": s.String()}})
		}
	}
	ipam["ranges"] = ranges
	routes := []types.Route{}
	if r, ok := ipam["routes"]; ok {
		b, err := json.Marshal(r)
		if err == nil {
			err = json.Unmarshal(b, &routes)
		}
		if err != nil {
			return nil, fmt.Errorf("failed to parse ipam.routes: %w", err)
		}
	}
	for _, nw := range append(se.networks, se.networks6...) {
		routes = append(routes, types.Route{Dst: *nw})
	}
	ipam["routes"] = routes
	d["ipam"] = ipam
	return d, nil
}

func setDefault(m map[string]any, key string, value any) {
	if _, ok := m[key]; !ok {
		m[key] = value
	}
}

func writeSynced(file string, data []byte) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// del delegates DEL with the configuration ADD kept, and forgets it once
// the delegate succeeded. Nothing kept means nothing to delete.
func del(args *skel.CmdArgs) error {
	n, err := loadNetConf(args.StdinData)
	if err != nil {
		return err
	}
	file := filepath.Join(n.DataDir, args.ContainerID)
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var kept types.NetConf
	if err := json.Unmarshal(data, &kept); err != nil {
		// The interface stays on the bridge until the node reboots, as
		// upstream leaves it.
		fmt.Fprintf(os.Stderr, "failed to parse netconf: %v", err)
		return nil
	}
	if err := invoke.DelegateDel(context.TODO(), kept.Type, data, nil); err != nil {
		return err
	}
	// The CNI specification lets DEL go on past a file it cannot remove.
	_ = os.Remove(file)
	return nil
}

// check does nothing, as upstream's does.
func check(*skel.CmdArgs) error { return nil }
