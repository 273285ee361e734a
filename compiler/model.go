package compiler

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"cuelang.org/go/cue"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

// model is the decoded spec the semantic checks and the lowering read: the
// spec's values, its nodes with worker pools expanded, and the way back from
// every value to the place the user wrote it.
type model struct {
	l    *loaded
	spec specCluster
	// nodes are every machine: control-plane nodes, external etcd members
	// and workers (explicit and expanded from pools), in spec order of
	// role, then name.
	nodes []*mnode
	// severity of each rule code, from the rule table.
	severity map[string]diag.Severity
	diags    diag.List
	// prefixes caches parsed CIDRs by spec path; invalid ones are stored
	// as the zero Prefix after being reported.
	prefixes map[string]netip.Prefix
	// profile is Source.Profile.
	profile string
	// mirrors are the registry mirrors the checks parsed, by registry.
	mirrors map[string][]*url.URL
	// unexpanded is set when a pool's nodes could not be computed, so
	// that checks counting nodes keep quiet.
	unexpanded bool
}

// mnode is one machine before lowering.
type mnode struct {
	name string
	role ir.Role
	spec specNode
	// path is the spec path of the node, or of the pool it came from.
	path string
	// pool and index locate a node expanded from a pool.
	pool  string
	index int
	// addrs are the parsed addresses (primary first); invalid ones are
	// reported by the address checks and left out.
	addrs []netip.Addr
	// own lists the fields a pool's node sets for itself (the pool's
	// nodes map) rather than taking them from the pool.
	own map[string]bool
}

// fieldPath is the spec path that holds the node's field: the node's own
// field, or for pool nodes the pool field it was computed from.
func (n *mnode) fieldPath(field string) string {
	if n.pool == "" {
		return n.path + "." + field
	}
	if n.own[field] {
		return n.path + ".nodes." + quoteLabel(n.name) + "." + field
	}
	switch field {
	case "address":
		return n.path + ".firstAddress"
	case "secondaryAddress":
		return n.path + ".firstSecondaryAddress"
	case "mac":
		return fmt.Sprintf("%s.macs[%d]", n.path, n.index)
	case "name":
		return n.path + ".namePattern"
	case "zone":
		return n.path + ".zones"
	case "rack":
		return n.path + ".racks"
	}
	return n.path + "." + field
}

// runsPods reports whether the node has a kubelet (and so a pod CIDR).
func (n *mnode) runsPods() bool { return n.role != ir.RoleEtcd }

// at returns the positions the user wrote path at (or its nearest written
// ancestor), converted for diagnostics.
func (m *model) at(path string) []diag.Pos {
	ps := m.l.userPositions(path)
	if len(ps) == 0 && strings.Contains(path, "[") {
		ps = m.l.userPositions(path[:strings.LastIndex(path, "[")])
	}
	return convertPositions(ps)
}

// written reports whether the user set path (as opposed to a default).
func (m *model) written(path string) bool {
	_, ok := m.l.written[path]
	return ok
}

// report adds a diagnostic for a rule. The primary path is where the
// diagnostic is reported; more paths add their positions when the user
// wrote them (a default has no position worth showing).
func (m *model) report(code, path, msg, hint string, more ...string) {
	m.reportAt(code, path, m.at(path), msg, hint, more...)
}

// reportKey is report for problems with a key (a node, driver or label
// name): the diagnostic points at the key, not at its value.
func (m *model) reportKey(code, path, msg, hint string, more ...string) {
	ps := convertPositions(m.l.labels[path])
	if len(ps) == 0 {
		ps = m.at(path)
	}
	m.reportAt(code, path, ps, msg, hint, more...)
}

func (m *model) reportAt(code, path string, ps []diag.Pos, msg, hint string, more ...string) {
	sev, ok := m.severity[code]
	if !ok {
		panic("kcompile bug: diagnostic code " + code + " is not in the rule table")
	}
	for _, p := range more {
		if m.writtenOrElement(p) {
			ps = append(ps, m.at(p)...)
		}
	}
	m.diags.Add(diag.Diagnostic{Code: code, Severity: sev, Path: path, Message: msg, Positions: ps, Hint: hint})
}

// writtenOrElement reports whether the user wrote path, or the list that
// holds it.
func (m *model) writtenOrElement(path string) bool {
	if m.written(path) {
		return true
	}
	if i := strings.LastIndex(path, "["); i > 0 && strings.HasSuffix(path, "]") {
		return m.written(path[:i])
	}
	return false
}

// newModel decodes a validated spec and expands worker pools.
func newModel(l *loaded) (*model, diag.List) {
	m := &model{l: l, severity: map[string]diag.Severity{}}
	for _, r := range Rules() {
		m.severity[r.Code] = r.Severity
	}
	if err := l.value.Decode(&m.spec); err != nil {
		return nil, diag.List{{Code: CodeInternal, Severity: diag.Error,
			Message: "internal error: validated spec does not decode: " + err.Error()}}
	}
	s := &m.spec
	for _, name := range sortedKeys(s.ControlPlane.Nodes) {
		m.nodes = append(m.nodes, &mnode{name: name, role: ir.RoleControlPlane, spec: s.ControlPlane.Nodes[name],
			path: "controlPlane.nodes." + quoteLabel(name)})
	}
	if s.Etcd.Topology == "external" {
		for _, name := range sortedKeys(s.Etcd.Members) {
			mem := s.Etcd.Members[name]
			m.nodes = append(m.nodes, &mnode{name: name, role: ir.RoleEtcd,
				spec: specNode{Address: mem.Address, MAC: mem.MAC, Zone: mem.Zone, Rack: mem.Rack},
				path: "etcd.members." + quoteLabel(name)})
		}
	}
	for _, name := range sortedKeys(s.Workers.Nodes) {
		m.nodes = append(m.nodes, &mnode{name: name, role: ir.RoleWorker, spec: s.Workers.Nodes[name],
			path: "workers.nodes." + quoteLabel(name)})
	}
	for _, name := range sortedKeys(s.Workers.Pools) {
		m.expandPool(name, s.Workers.Pools[name])
	}
	for _, n := range m.nodes {
		for _, a := range []string{n.spec.Address, n.spec.SecondaryAddress} {
			if ip, err := netip.ParseAddr(a); err == nil {
				n.addrs = append(n.addrs, ip)
			}
		}
	}
	sort.SliceStable(m.nodes, func(i, j int) bool {
		a, b := m.nodes[i], m.nodes[j]
		if a.role.Rank() != b.role.Rank() {
			return a.role.Rank() < b.role.Rank()
		}
		return a.name < b.name
	})
	return m, nil
}

var namePatternVerb = regexp.MustCompile(`%0?[0-9]*d`)

// expandPool turns a pool into its nodes. Problems with the pool itself
// (bad pattern, bad first address, wrong number of MACs) are reported once,
// at the pool, and the pool is not expanded further.
func (m *model) expandPool(name string, p specPool) {
	path := "workers.pools." + quoteLabel(name)
	expanded := false
	defer func() { m.unexpanded = m.unexpanded || !expanded }()
	pattern := p.NamePattern
	literal := strings.ReplaceAll(pattern, "%%", "")
	verbs := namePatternVerb.FindAllStringIndex(literal, -1)
	rest := namePatternVerb.ReplaceAllString(literal, "")
	if len(verbs) != 1 || strings.Contains(rest, "%") {
		m.report(CodePoolPattern, path+".namePattern",
			fmt.Sprintf("name pattern %s must contain exactly one integer verb such as %%d or %%02d", diag.Quote(pattern)),
			`write the pattern like "w%02d" or "gpu-%d"`)
		return
	}
	first, err := netip.ParseAddr(p.FirstAddress)
	if err != nil {
		m.report(CodeAddressParse, path+".firstAddress", fmt.Sprintf("first address %s is not an IP address", diag.Quote(p.FirstAddress)),
			`write an IPv4 or IPv6 address such as "10.0.1.10"`)
		return
	}
	var second netip.Addr
	if p.FirstSecondaryAddress != "" {
		second, err = netip.ParseAddr(p.FirstSecondaryAddress)
		if err != nil {
			m.report(CodeAddressParse, path+".firstSecondaryAddress", fmt.Sprintf("first secondary address %s is not an IP address", diag.Quote(p.FirstSecondaryAddress)),
				`write an address of the other IP family, such as "fd00::10"`)
			return
		}
	}
	if p.MACs != nil && len(p.MACs) != p.Count {
		m.report(CodePoolMACs, path+".macs", fmt.Sprintf("pool has %d nodes but %d MAC addresses", p.Count, len(p.MACs)),
			"give one MAC address per node, in node order, or leave macs out")
		return
	}
	addr, addr2 := first, second
	for i := 0; i < p.Count; i++ {
		if i > 0 {
			addr = addr.Next()
			if second.IsValid() {
				addr2 = addr2.Next()
			}
			if !addr.IsValid() || (second.IsValid() && !addr2.IsValid()) {
				m.report(CodeAddressNetwork, path+".firstAddress",
					fmt.Sprintf("pool of %d nodes starting at %s runs past the end of the address space", p.Count, first),
					"lower count or choose a lower first address")
				return
			}
		}
		n := &mnode{name: fmt.Sprintf(pattern, p.Start+i), role: ir.RoleWorker, path: path, pool: name, index: i,
			spec: specNode{specNodeCommon: p.specNodeCommon, Address: addr.String()}}
		if second.IsValid() {
			n.spec.SecondaryAddress = addr2.String()
		}
		if p.MACs != nil {
			n.spec.MAC = p.MACs[i]
		}
		if len(p.Zones) > 0 {
			n.spec.Zone = p.Zones[i%len(p.Zones)]
		}
		if len(p.Racks) > 0 {
			n.spec.Rack = p.Racks[i%len(p.Racks)]
		}
		if o, ok := p.Nodes[n.name]; ok {
			n.own = map[string]bool{}
			if o.KubeletVersion != "" {
				n.spec.KubeletVersion, n.own["kubeletVersion"] = o.KubeletVersion, true
			}
			if o.KubeProxyVersion != "" {
				n.spec.KubeProxyVersion, n.own["kubeProxyVersion"] = o.KubeProxyVersion, true
			}
		}
		m.nodes = append(m.nodes, n)
	}
	expanded = true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var identifier = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// quoteLabel writes a field name as it appears in a CUE path, exactly as
// cue.Path.String writes it, so that paths built here find the positions
// recorded from CUE.
func quoteLabel(s string) string {
	if identifier.MatchString(s) && !strings.HasPrefix(s, "_") && !strings.HasPrefix(s, "#") {
		return s
	}
	return cue.MakePath(cue.Str(s)).String()
}

func firstPos(ps []diag.Pos) ir.Pos {
	if len(ps) == 0 {
		return ir.Pos{}
	}
	return ir.Pos{File: ps[0].File, Line: ps[0].Line, Column: ps[0].Column}
}

// onceSet remembers keys, so that a problem shared by many nodes of one
// source (a pool) is reported once.
type onceSet map[string]bool

// first reports whether key is seen for the first time.
func (o onceSet) first(key string) bool {
	if o[key] {
		return false
	}
	o[key] = true
	return true
}
