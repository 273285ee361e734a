// Package systemd renders a cluster as per-node root trees: systemd units
// running the upstream binaries with their flags, component configurations
// written with the upstream Kubernetes types, the node's certificates,
// keys and kubeconfigs in kubeadm's paths, runtime and CNI configuration,
// sysctls and kernel modules. Every file is parsed back with the parser
// its consumer uses before the tree leaves the target.
package systemd

import (
	"fmt"
	"path"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
)

// nodeFiles adds every file of every node, and the cluster-wide PKI files,
// to the tree.
func nodeFiles(m *pki.Material, tree *targets.Tree, rc *renderCache, opts Options) error {
	c := m.Cluster
	pkiFiles, err := pki.Files(m)
	if err != nil {
		return err
	}
	for _, f := range pkiFiles {
		p := layout.ClusterTree(f.Path)
		if f.Node != "" {
			p = layout.NodeTree(f.Node, f.Path)
		}
		if err := tree.Add(p, f.Data, f.Mode); err != nil {
			return err
		}
	}
	// Every runtime of the cluster shares them.
	mirrors, err := MirrorFiles(c.Runtime.Engine, c.Runtime.Mirrors)
	if err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if opts.Trees != nil && !opts.Trees(n) {
			continue
		}
		l := opts.placement(n)
		add := func(p string, data []byte, mode uint32) error {
			return tree.Add(layout.NodeTree(n.Name, p), data, fileMode(mode))
		}
		units := nodeUnits(c, n, l)
		for _, u := range units {
			data, err := u.Unit.Render()
			if err != nil {
				return fmt.Errorf("kcompile bug: %s of node %s: %w", u.Name, n.Name, err)
			}
			// Units carry the components' command lines, which name
			// every key: owner-only, as CIS 1.1.1-1.1.8 and 4.1.1 ask
			// of the files that start the components.
			p := path.Join(layout.UnitDir, u.Name)
			if err := add(p, data, 0o600); err != nil {
				return err
			}
			rc.units[layout.NodeTree(n.Name, p)] = u.Unit
		}
		if len(units) > 0 {
			boot := bootUnit(units)
			data, err := boot.Render()
			if err != nil {
				return fmt.Errorf("kcompile bug: %s of node %s: %w", layout.BootDropIn, n.Name, err)
			}
			if err := add(layout.BootDropIn, data, 0o644); err != nil {
				return err
			}
			rc.units[layout.NodeTree(n.Name, layout.BootDropIn)] = boot
			if err := add(l.lib(layout.StartScript), []byte(startScriptText), 0o755); err != nil {
				return err
			}
		}
		if n.RunsPods() && c.Network.CNI.Plugin == "flannel" {
			if err := add(layout.FlannelTmpfilesConf, []byte(flannelTmpfiles), 0o644); err != nil {
				return err
			}
		}
		if n.Runs(ir.ComponentEtcd) {
			if err := add(layout.EtcdSysusersConf, []byte(etcdSysusers), 0o644); err != nil {
				return err
			}
			if err := add(layout.EtcdTmpfilesConf, []byte(etcdTmpfiles), 0o644); err != nil {
				return err
			}
			if b := c.Etcd.Backup; b != nil {
				if err := add(layout.EtcdBackupTmpfilesConf, []byte(backupTmpfiles(b)), 0o644); err != nil {
					return err
				}
				if err := add(l.lib(layout.EtcdBackupScript), []byte(backupScriptText), 0o755); err != nil {
					return err
				}
			}
		}
		efiles, err := endpointFiles(c, n, l)
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		for _, p := range sortedPaths(efiles) {
			if err := add(p, efiles[p].data, efiles[p].mode); err != nil {
				return err
			}
		}
		list, err := binariesList(c, n)
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		if err := add(l.lib(layout.BinariesList), list, 0o644); err != nil {
			return err
		}
		if err := add(l.lib(layout.InstallScript), []byte(installScriptText), 0o755); err != nil {
			return err
		}
		configs := map[string]any{}
		if n.RunsPods() {
			configs[layout.KubeletConfig] = kubeletConfig(c, n, l)
			if n.Runs(ir.ComponentKubeProxy) {
				configs[layout.KubeProxyConfig] = kubeProxyConfig(c, l)
			}
			rp, rc, err := runtimeConfig(c, n)
			if err != nil {
				return err
			}
			type file struct {
				p string
				b []byte
			}
			files := []file{{rp, rc}, {layout.SysctlConf, sysctlConf(c)}, {layout.ModulesConf, modulesConf(c, n)}}
			if c.Network.CNI.Plugin != "flannel" {
				cp, cc, err := cniConfList(c, n)
				if err != nil {
					return err
				}
				files = append(files, file{cp, cc})
			}
			for _, f := range files {
				if err := add(f.p, f.b, 0o644); err != nil {
					return err
				}
			}
			for _, p := range sortedPaths(mirrors) {
				if err := add(p, mirrors[p], 0o644); err != nil {
					return err
				}
			}
		}
		if n.Runs(ir.ComponentAPIServer) {
			configs[layout.SchedulerConfig] = schedulerConfig(l)
			if c.Security.Audit.Enabled {
				configs[layout.AuditPolicy] = auditPolicy()
			}
		}
		for _, p := range sortedPaths(configs) {
			data, err := rc.marshal(configs[p])
			if err != nil {
				return fmt.Errorf("%s on %s: %w", p, n.Name, err)
			}
			// Component configurations are for root only (CIS 4.1.9).
			if err := add(p, data, 0o600); err != nil {
				return err
			}
		}
		if n.Runs(ir.ComponentAPIServer) && c.Security.EncryptionAtRest {
			// The encryption key opens every Secret: owner-only.
			data, err := rc.marshal(encryptionConfig(c, m.Bundle.EncryptionKey))
			if err != nil {
				return err
			}
			if err := add(layout.EncryptionConfig, data, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}
