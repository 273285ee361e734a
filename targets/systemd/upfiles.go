package systemd

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/unitfile"
	"github.com/kcompile/kcompile/layout"
)

// UpOverrides are the changes kcompile up makes to a node's compiled
// files for the host it boots the node on. The zero value changes
// nothing.
type UpOverrides struct {
	// KubeletArgs are appended to the kubelet's command line.
	KubeletArgs []string
	// KubeletWhy says why, in the header of the drop-in that does it.
	KubeletWhy string
	// RestrictOOMScoreAdj sets containerd's restrict_oom_score_adj.
	RestrictOOMScoreAdj bool
	// RegistryHosts makes containerd read the registry hosts files
	// under layout.ContainerdHostsDir, where up writes mirrors of its
	// own: the compiled configuration names the directory only when the
	// spec names mirrors.
	RegistryHosts bool
	// ContainerdWhy says why containerd's configuration is changed, in
	// the headers of the copy and of the drop-in that gives it to
	// containerd.
	ContainerdWhy string
	// DropCapabilities are capabilities the addons' containers must not
	// add, because the host cannot give them (a container asking for
	// one outside the runtime's bounding set does not start).
	DropCapabilities []corev1.Capability
	// CapabilitiesWhy says why, in the header of the addons' copies.
	CapabilitiesWhy string
}

// UpAddons are up's copies of the addon manifests the overrides o change,
// by their path in the cluster tree (layout.ClusterTree("addons/...")):
// the objects as compiled, rendered again without the capabilities
// o.DropCapabilities in any container. The compiled files are left as they
// are; up applies a copy in place of its compiled file. A manifest o
// changes nothing in has no copy.
func UpAddons(c *ir.Cluster, o UpOverrides) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(o.DropCapabilities) == 0 {
		return out, nil
	}
	sets, err := addonSets(c)
	if err != nil {
		return nil, err
	}
	for _, s := range sets {
		var changed []string
		for _, obj := range s.objs {
			var spec *corev1.PodSpec
			var name string
			switch w := obj.(type) {
			case *appsv1.DaemonSet:
				spec, name = &w.Spec.Template.Spec, w.Kind+" "+w.Name
			case *appsv1.Deployment:
				spec, name = &w.Spec.Template.Spec, w.Kind+" "+w.Name
			default:
				continue
			}
			for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
				for i := range list {
					sc := list[i].SecurityContext
					if sc == nil || sc.Capabilities == nil {
						continue
					}
					kept := slices.DeleteFunc(slices.Clone(sc.Capabilities.Add), func(c corev1.Capability) bool {
						return slices.Contains(o.DropCapabilities, c)
					})
					if len(kept) != len(sc.Capabilities.Add) {
						sc.Capabilities.Add = kept
						changed = append(changed, name+" container "+list[i].Name)
					}
				}
			}
		}
		if len(changed) == 0 {
			continue
		}
		data, err := manifest(s.objs...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		caps := make([]string, len(o.DropCapabilities))
		for i, c := range o.DropCapabilities {
			caps[i] = string(c)
		}
		header := "Written by kcompile up: its copy of " + s.name + ", as compiled but without\ncapabilities " + strings.Join(caps, ", ") + " in " + strings.Join(changed, ", ") + "." + because(o.CapabilitiesWhy)
		out[layout.ClusterTree("addons/"+s.name)] = append([]byte("# "+strings.ReplaceAll(header, "\n", "\n# ")+"\n"), data...)
	}
	return out, nil
}

// UpFiles are the files that make the overrides o on node n, whose tree
// was built with opts, by root-relative path: drop-ins of its units and
// a copy of its runtime's configuration, each beside the compiled file
// it changes, never over it, so that every compiled file reaches the
// machine as compiled. They are rendered from the cluster by the code
// that renders the tree, not read back from it: a drop-in's command is
// the compiled unit's, built again with the override as a parameter.
// Each file's header says kcompile up wrote it, and why. A node o
// changes nothing on gets none.
func UpFiles(c *ir.Cluster, n ir.Node, opts Options, o UpOverrides) (map[string][]byte, error) {
	out := map[string][]byte{}
	if !n.RunsPods() {
		return out, nil
	}
	l := opts.placement(n)
	if len(o.KubeletArgs) > 0 {
		compiled := l.extraArgs
		kl := l
		kl.extraArgs = func(comp ir.Component) []string {
			if comp == ir.ComponentKubelet {
				return append(slices.Clone(compiled(comp)), o.KubeletArgs...)
			}
			return compiled(comp)
		}
		header := "Written by kcompile up: kubelet.service's command as compiled, with " + strings.Join(o.KubeletArgs, " ") + "." + because(o.KubeletWhy)
		if err := addExecDropIn(out, c, n, kl, "kubelet.service", header); err != nil {
			return nil, err
		}
	}
	_, doc, changed, err := runtimeDoc(c, n, o)
	if err != nil {
		return nil, err
	}
	if len(changed) == 0 {
		return out, nil
	}
	compiled := layout.Abs(layout.ContainerdConfig)
	header := "Written by kcompile up: its copy of " + compiled + ", as compiled but with\n" + strings.Join(changed, " and ") + "." + because(o.ContainerdWhy) +
		"\nThe compiled file is left as it is: a drop-in of containerd.service\n(" + layout.UpDropIn + ") gives containerd this copy."
	data, err := encodeTOML("# "+strings.ReplaceAll(header, "\n", "\n# ")+"\n", doc)
	if err != nil {
		return nil, err
	}
	out[layout.ContainerdUpConfig] = data
	cl := l
	cl.containerdConfig = layout.ContainerdUpConfig
	header = "Written by kcompile up: containerd.service's command as compiled, but reading\n" + layout.Abs(layout.ContainerdUpConfig) + ", kcompile up's copy of " + compiled + "." + because(o.ContainerdWhy)
	if err := addExecDropIn(out, c, n, cl, "containerd.service", header); err != nil {
		return nil, err
	}
	return out, nil
}

// because is the line of a header saying why, if the caller said.
func because(why string) string {
	if why == "" {
		return ""
	}
	return "\nWhy: " + why + "."
}

// addExecDropIn adds the drop-in of unit that replaces its command with
// the one the unit has when built with l.
func addExecDropIn(out map[string][]byte, c *ir.Cluster, n ir.Node, l placement, unit, header string) error {
	for _, u := range nodeUnits(c, n, l) {
		if u.Name != unit {
			continue
		}
		cmds := u.Unit.Commands("Service", "ExecStart")
		if len(cmds) != 1 {
			return fmt.Errorf("kcompile bug: %s of node %s has %d commands", unit, n.Name, len(cmds))
		}
		d := unitfile.File{Header: header, Sections: []unitfile.Section{{Name: "Service", Directives: []unitfile.Directive{
			// An empty ExecStart= drops the compiled command: a service
			// runs one.
			{Key: "ExecStart", Value: ""},
			{Key: "ExecStart", Command: &cmds[0]},
		}}}}
		data, err := d.Render()
		if err != nil {
			return fmt.Errorf("kcompile bug: the drop-in of %s of node %s: %w", unit, n.Name, err)
		}
		out[layout.UnitDropIn(unit, layout.UpDropIn)] = data
		return nil
	}
	return fmt.Errorf("node %s has no %s", n.Name, unit)
}
