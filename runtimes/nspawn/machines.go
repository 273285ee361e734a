package nspawn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/targets"
)

// A running cluster gains and loses machines as kcompile apply performs
// a plan's "add" and "remove" steps. apply, which holds the secrets
// bundle, lays the new node's compiled tree under the work directory
// (WriteNodeTree) and asks the up that runs the cluster, over its
// control socket, to boot a machine from it; the state the step leaves
// comes with the request, so that up lays the machine out (its
// addresses, up's own files) from the same cluster apply built.

// nodeTreeDir is where a node's compiled tree lies under the work
// directory: the top layer of its machine's root.
func nodeTreeDir(work, node string) string {
	return filepath.Join(work, "tree", layout.NodeTree(node, ""))
}

// WriteNodeTree writes node's files of tree (a state's systemd tree)
// where a machine booted for it reads them, replacing what an earlier,
// interrupted attempt left: into a directory beside it, renamed into
// place, so that a machine never boots from half a tree.
func WriteNodeTree(work string, tree *targets.Tree, node string) error {
	dir := nodeTreeDir(work, node)
	if _, err := os.Stat(filepath.Join(work, "tree")); err != nil {
		return fmt.Errorf("the cluster in %s has no compiled tree to add node %s to (it was booted from cloud-init seeds?): %v", work, node, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+node+".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	prefix := layout.NodeTree(node, "")
	n := 0
	for _, f := range tree.Files() {
		rel, ok := strings.CutPrefix(f.Path, prefix)
		if !ok {
			continue
		}
		p := filepath.Join(tmp, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Data, f.Mode.Perm()); err != nil {
			return err
		}
		// WriteFile's mode passes through the umask.
		if err := os.Chmod(p, f.Mode.Perm()); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("the state's tree has no files for node %s", node)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := removeDir(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// writeClusterFiles brings the cluster part of the tree up wrote into
// the work directory (the kubeconfigs up names, the addons) to tree's,
// the state a step of apply left, removing those only prev had: the
// admin kubeconfig up named keeps reaching the cluster through a
// rotation, whose end trusts the new CAs only. A cluster of no such
// tree (bare metal, through SSH) has nothing to bring.
func writeClusterFiles(work string, prev, tree *targets.Tree) error {
	root := filepath.Join(work, "tree")
	if _, err := os.Stat(root); err != nil {
		return nil
	}
	prefix := layout.ClusterTree("")
	for _, f := range tree.Files() {
		if !strings.HasPrefix(f.Path, prefix) {
			continue
		}
		if data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f.Path))); err == nil && bytes.Equal(data, f.Data) {
			continue
		}
		// Renamed into place: a reader finds the old file or the new one.
		if err := writeInto(root, f); err != nil {
			return err
		}
	}
	for _, f := range prev.Files() {
		if _, ok := tree.Get(f.Path); ok || !strings.HasPrefix(f.Path, prefix) {
			continue
		}
		if err := os.Remove(filepath.Join(root, filepath.FromSlash(f.Path))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// MachineRequest asks a running up to boot a machine for one node of a
// state of a plan, whose tree WriteNodeTree laid.
type MachineRequest struct {
	Node string `json:"node"`
	// State is the state's spec file text (compiler.StateText), and
	// Tolerate the codes of errors the step's state may have.
	State    string   `json:"state"`
	Tolerate []string `json:"tolerate,omitempty"`
	// Binaries, when set, is the absolute path of a directory of the
	// programs the node's install unit checks, by name (apply's
	// --binaries): a machine added after an upgrade boots the new
	// versions, not those up was started with.
	Binaries string `json:"binaries,omitempty"`
}

// stateCluster compiles a state sent with a request, bounded as up's own
// evaluations are.
func (c *Cluster) stateCluster(state string, tolerate []string) (*ir.Cluster, error) {
	src := compiler.Source{Dir: filepath.Join(c.cfg.Work, SpecDir), Overlay: map[string][]byte{compiler.StateFile: []byte(state)},
		OverlayOnly: true, Tolerate: tolerate, Bound: c.cfg.Bound}
	cl, diags := compiler.Compile(src)
	if diags.HasErrors() {
		return nil, fmt.Errorf("the state does not compile: %v", diags.Errors())
	}
	return cl, nil
}

// AddMachine boots a machine for a node the cluster does not run yet,
// from its tree under the work directory and the state it belongs to.
func (c *Cluster) AddMachine(ctx context.Context, req MachineRequest) error {
	if c.cfg.Target != pipeline.Systemd {
		return fmt.Errorf("the cluster was booted from %s seeds: apply adds machines only to a cluster booted from systemd trees", c.cfg.Target)
	}
	cl, err := c.stateCluster(req.State, req.Tolerate)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(cl.Nodes, func(n ir.Node) bool { return n.Name == req.Node })
	if i < 0 {
		return fmt.Errorf("the state has no node %s", req.Node)
	}
	n := cl.Nodes[i]
	if _, err := os.Stat(nodeTreeDir(c.cfg.Work, n.Name)); err != nil {
		return fmt.Errorf("node %s has no tree to boot from: %v", n.Name, err)
	}
	c.changing.Lock()
	defer c.changing.Unlock()
	if c.machine(n.Name) != nil {
		return fmt.Errorf("the cluster already runs a machine %s", n.Name)
	}
	m, err := c.newMachine(cl, n)
	if err != nil {
		return err
	}
	if req.Binaries != "" {
		if !filepath.IsAbs(req.Binaries) {
			return fmt.Errorf("binaries %q: not an absolute path", req.Binaries)
		}
		if st, err := os.Stat(req.Binaries); err != nil || !st.IsDir() {
			return fmt.Errorf("binaries %s: not a directory", req.Binaries)
		}
		m.binaries = req.Binaries
	}
	if limit := readInotifyLimit(); limit > 0 {
		if why := inotifyWhy(limit, inotifyInUse(), 1); why != "" {
			return fmt.Errorf("machine %s: %s", n.Name, why)
		}
	}
	c.jmu.Lock()
	err = c.layout(cl, m)
	c.jmu.Unlock()
	if err != nil {
		return fmt.Errorf("machine %s: %v", n.Name, err)
	}
	// Booted and listed at once: a Down halts it, or it never boots.
	c.mmu.Lock()
	defer c.mmu.Unlock()
	if c.downed {
		return errors.New("the cluster is going down")
	}
	if err := c.launch(m); err != nil {
		return err
	}
	c.p.machines = append(c.p.machines, m)
	c.live = cl
	c.updateBalancer()
	c.logf("node %s added: machine started", n.Name)
	return nil
}

// newMachine places node n of state cl on the host beside the machines
// that run: its own namespace, and a host link no machine has.
func (c *Cluster) newMachine(cl *ir.Cluster, n ir.Node) (*machine, error) {
	running := c.machines()
	used := map[string]bool{}
	for _, m := range running {
		used[m.hostLink] = true
	}
	m := &machine{name: n.Name, node: n, netns: fmt.Sprintf("%s%s-%s", namePrefix, c.p.id, n.Name), mac: n.MAC}
	for i := 0; m.hostLink == ""; i++ {
		link := fmt.Sprintf("%s%s-%d", namePrefix, c.p.id, i)
		if len(link) > 15 {
			return nil, fmt.Errorf("node %s: up has no device name left for it", n.Name)
		}
		if !used[link] && !linkExists(link) {
			m.hostLink = link
		}
	}
	if netnsExists(m.netns) {
		return nil, fmt.Errorf("node %s: the host already has a network namespace %s", n.Name, m.netns)
	}
	for _, a := range n.Addresses {
		pfx, ok := networkOf(cl, a)
		if !ok {
			return nil, fmt.Errorf("node %s: address %s lies in no node network", n.Name, a)
		}
		if !slices.ContainsFunc(c.p.gateways, func(g netip.Prefix) bool { return g.Contains(a) }) {
			return nil, fmt.Errorf("node %s: address %s lies in no network up's bridge serves (%s): a node network added to a running cluster needs a new kcompile up", n.Name, a, ir.Join(c.p.gateways, ", "))
		}
		for _, o := range running {
			if slices.ContainsFunc(o.addrs, func(p netip.Prefix) bool { return p.Addr() == a }) {
				return nil, fmt.Errorf("node %s: address %s is machine %s's", n.Name, a, o.name)
			}
		}
		m.addrs = append(m.addrs, netip.PrefixFrom(a, pfx.Bits()))
	}
	return m, nil
}

// RemoveMachine powers a machine off as its operator would (the kubelet's
// graceful shutdown first), then removes everything up made for it: its
// namespace and link (gone with its boot), its cgroups, its directory and
// its tree. The rest of the cluster goes on as state (the cluster the
// step leaves) says.
func (c *Cluster) RemoveMachine(ctx context.Context, req MachineRequest) error {
	cl, err := c.stateCluster(req.State, req.Tolerate)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(cl.Nodes, func(n ir.Node) bool { return n.Name == req.Node }) {
		return fmt.Errorf("the state still has node %s", req.Node)
	}
	c.changing.Lock()
	defer c.changing.Unlock()
	m := c.machine(req.Node)
	if m == nil {
		return fmt.Errorf("the cluster has no machine %s", req.Node)
	}
	m.mu.Lock()
	running := m.proc.alive()
	m.mu.Unlock()
	if running {
		if grace, forced := m.powerOff(ctx, cl.Kubelet.ShutdownGrace); forced {
			c.logf("machine %s did not power off within %s: stopped by force", m.name, grace)
		}
	}
	if m.done != nil {
		select {
		case <-m.done:
		case <-ctx.Done():
			return fmt.Errorf("machine %s does not stop: %w", m.name, ctx.Err())
		}
	}
	c.jmu.Lock()
	defer c.jmu.Unlock()
	for _, dir := range machineCgroups(c.adjust.cgroups, c.p.bridge, m.name) {
		if err := removeCgroup(dir); err != nil {
			return err
		}
		if err := c.j.forget(KindCgroup, dir); err != nil {
			return err
		}
	}
	if err := removeDir(m.dir); err != nil {
		return err
	}
	if err := c.j.forget(KindDir, m.dir); err != nil {
		return err
	}
	if err := removeDir(nodeTreeDir(c.cfg.Work, m.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	c.mmu.Lock()
	c.p.machines = slices.DeleteFunc(c.p.machines, func(o *machine) bool { return o == m })
	c.live = cl
	c.updateBalancer()
	c.mmu.Unlock()
	c.logf("node %s removed: machine powered off, its directory, cgroups and network gone", m.name)
	return nil
}

// updateBalancer points up's endpoint, when it serves one, at the API
// servers of the machines the cluster now has. The caller holds mmu.
func (c *Cluster) updateBalancer() {
	if c.bal == nil {
		return
	}
	var backends []netip.AddrPort
	for _, m := range c.p.machines {
		if m.node.Runs(ir.ComponentAPIServer) {
			backends = append(backends, netip.AddrPortFrom(m.node.Address(), uint16(c.live.Endpoint.Port)))
		}
	}
	c.bal.set(backends)
}
