package nspawn

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/targets/systemd"
)

// The machines share the host's kernel but have none of its modules
// (the host may have none on disk either), so modprobe, which the tree's
// modules-load.d and cloud-init's bootcmd run, fails even for a module
// built into the kernel. up writes a modules.builtin stand-in listing the
// tree's modules that this kernel has built in; modprobe then answers for
// them as it does on the host.

// moduleSymbols are the kernel configuration options that build the
// modules kcompile trees load.
func moduleSymbols() map[string]string {
	return map[string]string{
		"overlay":      "CONFIG_OVERLAY_FS",
		"br_netfilter": "CONFIG_BRIDGE_NETFILTER",
		"nf_tables":    "CONFIG_NF_TABLES",
		"nf_conntrack": "CONFIG_NF_CONNTRACK",
		"ip_vs":        "CONFIG_IP_VS",
		"ip_vs_rr":     "CONFIG_IP_VS_RR",
		"ip_vs_wrr":    "CONFIG_IP_VS_WRR",
		"ip_vs_sh":     "CONFIG_IP_VS_SH",
		"vxlan":        "CONFIG_VXLAN",
		"geneve":       "CONFIG_GENEVE",
		"wireguard":    "CONFIG_WIREGUARD",
		"ipip":         "CONFIG_NET_IPIP",
		// iptables mode.
		"ip_tables":      "CONFIG_IP_NF_IPTABLES",
		"iptable_nat":    "CONFIG_IP_NF_NAT",
		"iptable_filter": "CONFIG_IP_NF_FILTER",
	}
}

// clusterModules are the modules any node loads at boot.
func clusterModules(c *ir.Cluster) []string {
	var mods []string
	for _, n := range c.Nodes {
		mods = append(mods, systemd.Modules(c, n)...)
	}
	slices.Sort(mods)
	return slices.Compact(mods)
}

// tunnelModule is the module of the device the CNI plugin tunnels pod
// traffic through in mode cni.Mode, "" for none: the plugin makes the
// device itself, and a node's kernel loads the module on demand, which a
// machine's cannot.
func tunnelModule(cni ir.CNI) string {
	switch {
	case cni.Plugin == "flannel" && cni.Mode == "vxlan", cni.Plugin == "cilium" && cni.Mode == "vxlan":
		return "vxlan"
	case cni.Plugin == "cilium" && cni.Mode == "geneve":
		return "geneve"
	}
	return ""
}

// kernelFacts are what the host's kernel has of modules.
type kernelFacts struct {
	// release is uname -r: modprobe looks under it.
	release string
	// config is /proc/config.gz: option -> value ("y", "m"); empty
	// where the kernel does not publish it.
	config map[string]string
	// loaded are the modules /sys/module lists (built in, with
	// parameters, or loaded).
	loaded map[string]bool
}

// readKernelFacts reads this host's kernel.
func readKernelFacts() (kernelFacts, error) {
	var k kernelFacts
	var err error
	if k.release, err = kernelRelease(); err != nil {
		return k, err
	}
	if k.config, err = kernelConfig(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	entries, err := os.ReadDir("/sys/module")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	k.loaded = map[string]bool{}
	for _, e := range entries {
		k.loaded[e.Name()] = true
	}
	return k, nil
}

// split sorts mods into those the kernel has (loaded, or built in) and
// those it lacks: a machine can load none.
func (k kernelFacts) split(mods []string) (have, lack []string) {
	syms := moduleSymbols()
	for _, m := range mods {
		if sym, ok := syms[m]; k.loaded[m] || ok && k.config[sym] == "y" {
			have = append(have, m)
		} else {
			lack = append(lack, m)
		}
	}
	return have, lack
}

// kernelConfig reads /proc/config.gz: option -> value ("y", "m").
func kernelConfig() (map[string]string, error) {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(z)
	if err != nil {
		return nil, err
	}
	cfg := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(k, "#") {
			cfg[k] = v
		}
	}
	return cfg, nil
}

// kernelRelease is uname -r.
func kernelRelease() (string, error) {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String(), nil
}

// modulesBuiltin is the stand-in's modules.builtin.
func modulesBuiltin(mods []string) []byte {
	var b bytes.Buffer
	for _, m := range mods {
		fmt.Fprintf(&b, "kernel/%s.ko\n", m)
	}
	return b.Bytes()
}

// why says which modules the nodes load that this kernel lacks: a
// machine cannot load a module, so the host must have it first.
func (k kernelFacts) why(c *ir.Cluster) []string {
	_, lack := k.split(clusterModules(c))
	if len(lack) == 0 {
		return nil
	}
	var ipvs, other []string
	for _, m := range lack {
		if strings.HasPrefix(m, "ip_vs") {
			ipvs = append(ipvs, m)
		} else {
			other = append(other, m)
		}
	}
	var why []string
	if len(ipvs) > 0 {
		why = append(why, fmt.Sprintf("network.kubeProxy.mode ipvs: kube-proxy needs the kernel's IPVS (%s), which this host's kernel %s has neither built in nor loaded (%s), and a machine cannot load modules; use nftables or iptables here, or boot on a host whose kernel has IPVS",
			strings.Join(ipvs, ", "), k.release, k.state(ipvs)))
	}
	if len(other) > 0 {
		why = append(why, fmt.Sprintf("the nodes load the kernel modules %s, which this host's kernel %s has neither built in nor loaded (%s), and a machine cannot load modules",
			strings.Join(other, ", "), k.release, k.state(other)))
	}
	return why
}

// state says what the kernel's configuration says of mods, and the fix.
func (k kernelFacts) state(mods []string) string {
	if len(k.config) == 0 {
		return "the kernel publishes no /proc/config.gz to tell whether it could; modprobe " + strings.Join(mods, " ") + " on the host first, if it can"
	}
	syms := moduleSymbols()
	var loadable, absent []string
	for _, m := range mods {
		switch k.config[syms[m]] {
		case "m":
			loadable = append(loadable, m)
		default:
			absent = append(absent, syms[m])
		}
	}
	var s []string
	if len(absent) > 0 {
		s = append(s, "its configuration does not set "+strings.Join(absent, ", "))
	}
	if len(loadable) > 0 {
		s = append(s, "built as modules but not loaded: modprobe "+strings.Join(loadable, " ")+" on the host first")
	}
	return strings.Join(s, "; ")
}
