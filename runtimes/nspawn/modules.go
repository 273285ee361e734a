package nspawn

import (
	"bufio"
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

	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
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
		"wireguard":    "CONFIG_WIREGUARD",
		"ipip":         "CONFIG_NET_IPIP",
	}
}

// treeModules are the modules any node's modules-load.d names.
func treeModules(tree *targets.Tree) []string {
	var mods []string
	for _, f := range tree.Files() {
		if _, rel, ok := layout.SplitTree(f.Path); !ok || !strings.HasPrefix(rel, layout.ModulesLoadDir) {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(f.Data))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line != "" && line[0] != '#' && line[0] != ';' {
				mods = append(mods, line)
			}
		}
	}
	slices.Sort(mods)
	return slices.Compact(mods)
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

// builtinModules splits the tree's modules into those this kernel has
// (built in, or loaded: /sys/module lists them) and those it lacks.
func builtinModules(tree *targets.Tree) (have, lack []string, err error) {
	cfg, err := kernelConfig()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	syms := moduleSymbols()
	for _, m := range treeModules(tree) {
		_, loaded := os.Stat("/sys/module/" + m)
		switch {
		case loaded == nil, cfg[syms[m]] == "y":
			have = append(have, m)
		default:
			lack = append(lack, m)
		}
	}
	return have, lack, nil
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
