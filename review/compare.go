package review

import (
	"bytes"
	"fmt"
	"github.com/kcompile/kcompile/internal/unitfile"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/picture"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/cloudinit"
	"github.com/kcompile/kcompile/targets/ignition"
)

// Status is what happened to a file or node.
type Status string

const (
	Added    Status = "added"
	Removed  Status = "removed"
	Modified Status = "modified"
)

// FileChange is one file that differs.
type FileChange struct {
	Path string `json:"path"`
	// Node is the node the file belongs to, "" for cluster files.
	Node    string `json:"node,omitempty"`
	Status  Status `json:"status"`
	Kind    Kind   `json:"kind"`
	OldMode string `json:"oldMode,omitempty"`
	NewMode string `json:"newMode,omitempty"`
	// Details are the semantic lines: certificate fields, unit
	// directives, kubeconfig entries, hashes of secrets.
	Details []string `json:"details,omitempty"`
	// Unified is a unified diff that `patch -p1` applies in the base
	// tree; empty for kinds shown by their details only (secrets,
	// certificates, kubeconfigs, user-data, binaries).
	Unified string `json:"unified,omitempty"`
}

// NodeChange is what a change does to one node.
type NodeChange struct {
	Node   string `json:"node"`
	Status Status `json:"status"`
	Files  int    `json:"files"`
	// Restarts are the units whose file, or a file they read, changed;
	// Starts are new units and Stops removed ones.
	Restarts []string `json:"restarts,omitempty"`
	Starts   []string `json:"starts,omitempty"`
	Stops    []string `json:"stops,omitempty"`
	// Reprovision is set when the node's cloud-init user-data or Ignition
	// config changed: both apply it on the first boot only. Affects are the units
	// the change touches, as Restarts would be for the files themselves.
	Reprovision bool     `json:"reprovision,omitempty"`
	Affects     []string `json:"affects,omitempty"`
}

// Report is the whole comparison.
type Report struct {
	Base  string       `json:"base"`
	Head  string       `json:"head"`
	Nodes []NodeChange `json:"nodes"`
	// ClusterFiles counts changed files outside every node's tree.
	ClusterFiles int         `json:"clusterFiles"`
	Etcd         *EtcdChange `json:"etcd,omitempty"`
	// Endpoint is the API endpoint and what serves it, when that
	// changed.
	Endpoint *EndpointChange `json:"endpoint,omitempty"`
	// Topology is what the change does to the cluster's shape (nodes
	// added, removed, moved between zones or changed; endpoint; etcd),
	// drawn above the Markdown summary; nil when it does nothing to it.
	Topology *picture.Change `json:"topology,omitempty"`
	Notes    []string        `json:"notes,omitempty"`
	// Steps are what the change needs beyond its restarts, in order, for
	// settings a restart does not apply.
	Steps []Step `json:"steps,omitempty"`
	// ChecksCompared and PoliciesChecked say which findings both sides
	// were compared by: kcompile's check diagnostics, the organisation
	// policies' violations.
	ChecksCompared  bool `json:"checksCompared,omitempty"`
	PoliciesChecked bool `json:"policiesChecked,omitempty"`
	// Findings are the check diagnostics and policy violations the change
	// introduces, then those it fixes.
	Findings []FindingChange `json:"findings,omitempty"`
	// Waivers are the policy waivers the change adds, removes or changes
	// the reason of, when policies were checked.
	Waivers []WaiverChange `json:"waivers,omitempty"`
	// NotCompared says what the comparison left out and why; empty when
	// nothing was.
	NotCompared []string     `json:"notCompared,omitempty"`
	Files       []FileChange `json:"files"`
}

// Equal reports whether the sides had no difference: no file, no etcd
// membership, no zone's outcome and no finding.
func (r *Report) Equal() bool {
	return len(r.Files) == 0 && (r.Etcd == nil || !r.Etcd.Changed()) && len(r.Findings) == 0 && len(r.Waivers) == 0 &&
		(r.Topology == nil || len(r.Topology.Zones) == 0)
}

// Options tune a comparison.
type Options struct {
	// IgnoreModes compares contents only: git keeps no file modes, so a
	// golden directory has none.
	IgnoreModes bool
	// ThrowawayKeys says both sides were compiled with one bundle made for
	// the comparison, not the cluster's: key material is not compared (a
	// hash of a throwaway key tells a reviewer nothing), and certificates
	// only by identity (subject, issuer, SANs, usages, validity length).
	ThrowawayKeys bool
}

// Side is one side of a comparison: a tree and the cluster facts the
// summary reports.
type Side struct {
	Label string
	Tree  *targets.Tree
	Etcd  []EtcdMember
	// Endpoint says where clients reach the API and what serves it,
	// e.g. "https://10.0.0.10:6443, served by the only control-plane
	// node's API server".
	Endpoint string
	// Facts are the settings a restart does not apply; nil when the
	// side is a bare tree (a golden directory).
	Facts *Facts
	// Checks are the side's check diagnostics (warnings: a side with an
	// error does not compile); nil when the side was not checked (a bare
	// tree).
	Checks diag.List
	// Policies are the organisation policies' violations of the side, as
	// diagnostics under the policies' ids; nil when no policy was
	// checked.
	Policies diag.List
	// Waivers are the side's policy waivers, with the violations each
	// hides; nil when no policy was checked.
	Waivers []Waiver
	// Topology is the compiled cluster's shape, for the picture of what
	// the change touches; nil when the side is a bare tree.
	Topology *picture.Topology
}

// EndpointChange is the API endpoint before and after.
type EndpointChange struct {
	Before string `json:"before"`
	After  string `json:"after"`
}

// Compare compares two trees.
func Compare(base, head Side, opts Options) *Report {
	r := &Report{Base: base.Label, Head: head.Label, Files: []FileChange{}}
	v := viewer{throwaway: opts.ThrowawayKeys}
	a, b := files(base.Tree), files(head.Tree)
	for _, p := range unionKeys(a, b) {
		fa, inA := a[p]
		fb, inB := b[p]
		if inA && inB && bytes.Equal(fa.Data, fb.Data) && (opts.IgnoreModes || fa.Mode == fb.Mode) {
			continue
		}
		fc := FileChange{Path: p, Node: nodeOf(p), Status: Modified}
		var old, new []byte
		var modeA, modeB fs.FileMode
		if inA {
			old, modeA = fa.Data, fa.Mode
			fc.OldMode = fmt.Sprintf("%04o", modeA)
		} else {
			fc.Status = Added
		}
		if inB {
			new, modeB = fb.Data, fb.Mode
			fc.NewMode = fmt.Sprintf("%04o", modeB)
		} else {
			fc.Status = Removed
		}
		if opts.IgnoreModes {
			fc.OldMode, fc.NewMode, modeA, modeB = "", "", 0, 0
		}
		fc.Kind = fileKind(p, old, new)
		if fc.Status == Modified && !opts.IgnoreModes && modeA != modeB {
			fc.Details = append(fc.Details, fmt.Sprintf("mode: %04o → %04o", modeA, modeB))
		}
		if !bytes.Equal(old, new) || fc.Status != Modified {
			details, unified := v.view(fc.Kind, p, old, new, inA, inB)
			fc.Details = append(fc.Details, details...)
			fc.Unified = unified
		}
		r.Files = append(r.Files, fc)
	}
	r.summarise(a, b)
	if base.Endpoint != head.Endpoint {
		r.Endpoint = &EndpointChange{Before: base.Endpoint, After: head.Endpoint}
	}
	r.Etcd = compareEtcd(base.Etcd, head.Etcd)
	if r.Etcd != nil {
		r.Notes = append(r.Notes, r.Etcd.notes(r.Nodes)...)
	}
	r.Steps = effects(base, head, r.Etcd)
	if base.Topology != nil && head.Topology != nil {
		changed := map[string]string{}
		for _, n := range r.Nodes {
			if n.Status == Modified {
				changed[n.Node] = n.effect()
			}
		}
		if c := picture.Compare(base.Topology, head.Topology, changed); !c.Empty() {
			r.Topology = c
		}
	}
	if base.Checks != nil && head.Checks != nil {
		r.ChecksCompared = true
		r.Findings = append(r.Findings, compareFindings(SourceCheck, base.Checks, head.Checks)...)
	}
	if base.Policies != nil && head.Policies != nil {
		r.PoliciesChecked = true
		intro, waivedNow := waivedFindings(base.Policies, base.Waivers, head.Waivers)
		// A violation the base reports and the head waives is not fixed.
		for _, f := range compareFindings(SourcePolicy, base.Policies, head.Policies) {
			if i := slices.IndexFunc(waivedNow, func(d diag.Diagnostic) bool {
				return f.Change == Fixes && d.Code == f.Code && d.Path == f.Path && d.Message == f.Message
			}); i >= 0 {
				waivedNow = slices.Delete(waivedNow, i, i+1)
				continue
			}
			r.Findings = append(r.Findings, f)
		}
		r.Findings = append(r.Findings, intro...)
		r.Waivers = compareWaivers(base.Waivers, head.Waivers)
	}
	sortFindings(r.Findings)
	if r.Etcd != nil && r.Topology != nil {
		for _, z := range r.Topology.Zones {
			if z.Before.EtcdQuorumKept != z.After.EtcdQuorumKept {
				r.Etcd.Zones = append(r.Etcd.Zones, z)
			}
		}
	}
	if opts.ThrowawayKeys {
		r.NotCompared = []string{
			"key material (private keys, tokens, encryption keys, every file shown as a secret): both sides were compiled with one throwaway bundle, not the cluster's (no --secrets)",
			"certificates' keys, serial numbers, signatures and dates: certificates are compared by identity (subject, issuer, SANs, usages, validity length)",
		}
	}
	return r
}

// fileKind is the kind of a file: a secret when either side is one.
func fileKind(p string, old, new []byte) Kind {
	var ka, kb Kind
	if old != nil {
		ka = classify(p, old)
	}
	if new != nil {
		kb = classify(p, new)
	}
	switch {
	case ka == "":
		return kb
	case kb == "" || ka == kb:
		return ka
	case ka == KindSecret || kb == KindSecret:
		return KindSecret
	case ka == KindUserData || kb == KindUserData || ka == KindIgnition || kb == KindIgnition || ka == KindKubeconfig || kb == KindKubeconfig:
		// They hold secrets; never fall back to a text diff.
		return KindSecret
	case ka == KindBinary || kb == KindBinary:
		return KindBinary
	}
	return KindText
}

// viewer shows changed files; throwaway is Options.ThrowawayKeys.
type viewer struct{ throwaway bool }

// view renders a changed file in its kind.
func (v viewer) view(k Kind, p string, old, new []byte, inA, inB bool) ([]string, string) {
	unified := func() string {
		oldName, newName := "a/"+p, "b/"+p
		if !inA {
			oldName = "/dev/null"
		}
		if !inB {
			newName = "/dev/null"
		}
		return Unified(oldName, newName, old, new, 3)
	}
	switch k {
	case KindSecret:
		return v.secretLines(old, new), ""
	case KindBinary:
		return []string{"content: " + change(hashOrEmpty(old), hashOrEmpty(new)) + " (binary)"}, ""
	case KindCertificate:
		return v.certLines(old, new), ""
	case KindKubeconfig:
		return v.kubeconfigLines(old, new), ""
	case KindUserData:
		return v.configLines(cloudinit.Decode, "write_files", old, new), ""
	case KindIgnition:
		return v.configLines(ignition.Decode, "storage.files", old, new), ""
	case KindUnit:
		if inA && inB {
			return unitLines(old, new), unified()
		}
	}
	return nil, unified()
}

func files(t *targets.Tree) map[string]targets.File {
	out := map[string]targets.File{}
	if t == nil {
		return out
	}
	for _, f := range t.Files() {
		out[f.Path] = f
	}
	return out
}

// nodeOf is the node a tree path belongs to: the component after
// "nodes/", under an optional target directory.
func nodeOf(p string) string { n, _ := splitNode(p); return n }

// nodeRoot is the part of a path inside its node's root file system.
func nodeRoot(p string) string { _, r := splitNode(p); return r }

// splitNode splits a tree path into its node and the absolute path on the
// node; both are "" for cluster files.
func splitNode(p string) (node, root string) {
	parts := strings.Split(p, "/")
	for i := 0; i+2 < len(parts) && i < 2; i++ {
		if parts[i] == "nodes" {
			return parts[i+1], "/" + strings.Join(parts[i+2:], "/")
		}
	}
	return "", ""
}

// summarise fills in the per-node summary.
func (r *Report) summarise(a, b map[string]targets.File) {
	nodesA, nodesB := nodeFiles(a), nodeFiles(b)
	changed := map[string][]FileChange{}
	for _, f := range r.Files {
		if f.Node == "" {
			r.ClusterFiles++
			continue
		}
		changed[f.Node] = append(changed[f.Node], f)
	}
	var names []string
	for n := range changed {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		nc := NodeChange{Node: n, Status: Modified, Files: len(changed[n])}
		switch {
		case nodesA[n] == nil:
			nc.Status = Added
		case nodesB[n] == nil:
			nc.Status = Removed
		}
		for _, f := range changed[n] {
			if f.Kind == KindUserData && nc.Status == Modified {
				nc.Reprovision = true
				nc.Affects = configAffects(cloudinit.Decode, a[f.Path].Data, b[f.Path].Data)
			}
			if f.Kind == KindIgnition && nc.Status == Modified {
				nc.Reprovision = true
				nc.Affects = configAffects(ignition.Decode, a[f.Path].Data, b[f.Path].Data)
			}
		}
		if nc.Status == Modified {
			changedRoots := map[string]bool{}
			for _, f := range changed[n] {
				changedRoots[nodeRoot(f.Path)] = true
			}
			nc.Restarts, nc.Starts, nc.Stops = restarts(nodesA[n], nodesB[n], changedRoots)
		} else if nc.Status == Added {
			skip := triggered(nodesB[n])
			for root := range nodesB[n] {
				if isUnit(root) && !skip[unitName(root)] {
					nc.Starts = append(nc.Starts, unitName(root))
				}
			}
			slices.Sort(nc.Starts)
			nc.Starts = slices.Compact(nc.Starts)
		}
		r.Nodes = append(r.Nodes, nc)
	}
}

// nodeFiles groups files by node, keyed by their path on the node.
func nodeFiles(fs map[string]targets.File) map[string]map[string][]byte {
	out := map[string]map[string][]byte{}
	for p, f := range fs {
		n := nodeOf(p)
		if n == "" {
			continue
		}
		if out[n] == nil {
			out[n] = map[string][]byte{}
		}
		out[n][nodeRoot(p)] = f.Data
	}
	return out
}

func isUnit(root string) bool {
	rest, ok := strings.CutPrefix(root, layout.Abs(layout.UnitDir))
	return ok && (strings.HasSuffix(root, ".service") || strings.HasSuffix(root, ".timer")) && !strings.Contains(rest, "/")
}

// triggered are the services the node's timers start (their Unit=, or
// the timer's own name): nothing of theirs runs between runs, so a
// change is read at the next run and restarts, starts or stops nothing
// but the timer.
func triggered(files ...map[string][]byte) map[string]bool {
	out := map[string]bool{}
	for _, m := range files {
		for root, data := range m {
			if !isUnit(root) || !strings.HasSuffix(root, ".timer") {
				continue
			}
			name := strings.TrimSuffix(unitName(root), ".timer") + ".service"
			if u, err := unitfile.Parse(data); err == nil {
				if v := u.Get("Timer", "Unit"); len(v) > 0 {
					name = v[len(v)-1]
				}
			}
			out[name] = true
		}
	}
	return out
}

// unitName is the unit a unit file or drop-in belongs to.
func unitName(root string) string {
	rest := strings.TrimPrefix(root, layout.Abs(layout.UnitDir))
	if d, _, ok := strings.Cut(rest, ".d/"); ok {
		return d
	}
	return rest
}

// pathRef finds absolute paths in a file: flags, config fields, drop-ins.
var pathRef = regexp.MustCompile(`/(?:[A-Za-z0-9._@+-]+/)*[A-Za-z0-9._@+-]+`)

// restarts works out which units of a changed node restart: a unit
// restarts when its own file changed or a file it reads did, directly
// (a path on its command line) or through another file (a path in its
// config). A directory the unit itself names with at least three
// components stands for the files in it (a runtime's drop-in directory).
func restarts(a, b map[string][]byte, changedRoots map[string]bool) (restart, start, stop []string) {
	units := map[string]bool{}
	skip := triggered(a, b)
	for _, m := range []map[string][]byte{a, b} {
		for root := range m {
			if isUnit(root) && !skip[unitName(root)] {
				units[unitName(root)] = true
			}
		}
	}
	all := map[string]bool{}
	for root := range a {
		all[root] = true
	}
	for root := range b {
		all[root] = true
	}
	for u := range units {
		file, dropIns := layout.Abs(layout.UnitDir+u), layout.Abs(layout.UnitDropIn(u, ""))
		_, inA := a[file]
		_, inB := b[file]
		switch {
		case !inA:
			start = append(start, u)
			continue
		case !inB:
			stop = append(stop, u)
			continue
		}
		// The unit's own files: the unit and its drop-ins.
		seen := map[string]bool{}
		var queue []string
		for root := range all {
			if root == file || strings.HasPrefix(root, dropIns) {
				seen[root] = true
				queue = append(queue, root)
			}
		}
		hit := false
		for len(queue) > 0 && !hit {
			root := queue[0]
			queue = queue[1:]
			if changedRoots[root] && !(u == etcdUnit && root == file && bootstrapOnly(a[root], b[root])) {
				hit = true
				break
			}
			// A directory counts only on the unit's own lines: a runtime
			// reloads the CNI directory its config names by itself.
			dirs := root == file || strings.HasPrefix(root, dropIns)
			for _, m := range []map[string][]byte{a, b} {
				for _, ref := range pathRef.FindAllString(string(m[root]), -1) {
					for _, target := range resolve(ref, all, dirs) {
						if !seen[target] {
							seen[target] = true
							queue = append(queue, target)
						}
					}
				}
			}
		}
		if hit {
			restart = append(restart, u)
		}
	}
	slices.Sort(restart)
	slices.Sort(start)
	slices.Sort(stop)
	return restart, start, stop
}

const etcdUnit = "etcd.service"

// etcdBootstrapFlag are the flags etcd reads only when it bootstraps a
// member, its data directory empty; a member that restarts ignores them.
var etcdBootstrapFlag = regexp.MustCompile(`--initial-cluster(-state|-token)?=\S*`)

// bootstrapOnly says two etcd unit files differ only in the flags etcd
// reads when it bootstraps a member: a change of the membership's list
// (a member added or removed elsewhere) is laid, and restarts nothing.
func bootstrapOnly(a, b []byte) bool {
	return bytes.Equal(etcdBootstrapFlag.ReplaceAll(a, nil), etcdBootstrapFlag.ReplaceAll(b, nil))
}

// resolve is the node files a referenced path names: the file itself, or
// the files under a directory deep enough not to be a catch-all.
func resolve(ref string, all map[string]bool, dirs bool) []string {
	if all[ref] {
		return []string{ref}
	}
	if !dirs || strings.Count(ref, "/") < 3 {
		return nil
	}
	var out []string
	for root := range all {
		if strings.HasPrefix(root, ref+"/") {
			out = append(out, root)
		}
	}
	return out
}

// decoder reads a node config back into what it configures.
type decoder func([]byte) (targets.Decoded, error)

// configAffects is the units a node config's change touches: the
// restarts its files would cause on a running node.
func configAffects(decode decoder, old, new []byte) []string {
	da, errA := decode(old)
	db, errB := decode(new)
	if errA != nil || errB != nil {
		return nil
	}
	a, b := map[string][]byte{}, map[string][]byte{}
	changedRoots := map[string]bool{}
	for p, f := range da.Files {
		a[p] = f.Data
		if g, ok := db.Files[p]; !ok || !bytes.Equal(f.Data, g.Data) || f.Mode != g.Mode {
			changedRoots[p] = true
		}
	}
	for p, f := range db.Files {
		b[p] = f.Data
		if _, ok := da.Files[p]; !ok {
			changedRoots[p] = true
		}
	}
	restart, start, stop := restarts(a, b, changedRoots)
	out := append(append(restart, start...), stop...)
	slices.Sort(out)
	return out
}

// configLines describes a node config (user-data, Ignition) by the files
// it writes, each in its own kind, and then the rest of its config, which
// names its files' field.
func (v viewer) configLines(decode decoder, filesField string, old, new []byte) []string {
	da, errA := decodeOrEmpty(decode, old)
	db, errB := decodeOrEmpty(decode, new)
	if errA != nil || errB != nil {
		if v.throwaway {
			return []string{"content: " + notCompared + " (not decodable)"}
		}
		return []string{"content: " + change(hashOrEmpty(old), hashOrEmpty(new)) + " (not decodable; holds secrets, not shown)"}
	}
	var out []string
	for _, p := range unionKeys(da.Files, db.Files) {
		a, inA := da.Files[p]
		b, inB := db.Files[p]
		if inA && inB && bytes.Equal(a.Data, b.Data) && a.Mode == b.Mode {
			continue
		}
		status := Modified
		switch {
		case !inA:
			status = Added
		case !inB:
			status = Removed
		}
		k := fileKind(p, a.Data, b.Data)
		out = append(out, fmt.Sprintf("writes %s: %s, %s", p, k, status))
		if inA && inB && a.Mode != b.Mode {
			out = append(out, fmt.Sprintf("  mode: %04o → %04o", a.Mode, b.Mode))
		}
		if bytes.Equal(a.Data, b.Data) {
			continue
		}
		details, unified := v.view(k, strings.TrimPrefix(p, "/"), a.Data, b.Data, inA, inB)
		for _, d := range details {
			out = append(out, "  "+d)
		}
		for _, l := range unifiedBody(unified) {
			out = append(out, "  "+l)
		}
	}
	if !bytes.Equal(da.Rest, db.Rest) {
		out = append(out, "config (besides "+filesField+"):")
		for _, l := range unifiedBody(Unified("a", "b", da.Rest, db.Rest, 3)) {
			out = append(out, "  "+l)
		}
	}
	if len(out) == 0 {
		if v.throwaway {
			return []string{"content: the same files and config, encoded differently"}
		}
		out = append(out, "content: "+change(hashOrEmpty(old), hashOrEmpty(new))+" (the same files and config, encoded differently)")
	}
	return out
}

// decodeOrEmpty reads a config that is not there (nil) as one that
// writes nothing and configures nothing.
func decodeOrEmpty(decode decoder, b []byte) (targets.Decoded, error) {
	if b == nil {
		return targets.Decoded{}, nil
	}
	return decode(b)
}

// unifiedBody is a unified diff without its file headers, for showing
// inside another file's details (where patch must not see headers).
func unifiedBody(u string) []string {
	if u == "" {
		return nil
	}
	lines := strings.Split(strings.TrimSuffix(u, "\n"), "\n")
	if len(lines) >= 2 && strings.HasPrefix(lines[0], "--- ") && strings.HasPrefix(lines[1], "+++ ") {
		lines = lines[2:]
	}
	return lines
}
