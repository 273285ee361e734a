package nspawn

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// preflight reads the host before up makes anything, so that what
// would become a boot that hangs for ten minutes is said at once, naming
// the host fact and the fix.
type preflight struct {
	// netns is the named network namespace the host is read in: "" is
	// the host's own; the tests make conditions in one of their own.
	netns string
	// earlier maps the bridges of other ups (by their alias) to their
	// work directories.
	earlier map[string]string
}

// findings are preflight's results: errors stop up, warnings are said.
type findings struct {
	errors, warnings []string
}

// output runs a command of the host's (in netns) and returns its output.
func (h preflight) output(ctx context.Context, name string, args ...string) ([]byte, error) {
	if h.netns != "" {
		args = append([]string{"netns", "exec", h.netns, name}, args...)
		name = "ip"
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// check reads addresses, routes, policy rules, the firewall and the
// listening sockets against the node networks and the addresses up will
// listen on.
func (h preflight) check(ctx context.Context, networks []netip.Prefix, listen []service) (findings, error) {
	var f findings
	var err error
	if h.earlier, err = h.upBridges(ctx); err != nil {
		return f, err
	}
	for _, step := range []func(context.Context, []netip.Prefix, *findings) error{h.addresses, h.routes, h.rules} {
		if err := step(ctx, networks, &f); err != nil {
			return f, err
		}
	}
	if err := h.firewall(ctx, &f); err != nil {
		return f, err
	}
	if err := h.ports(ctx, listen, &f); err != nil {
		return f, err
	}
	return f, nil
}

// overlapping is the node network p overlaps, if any.
func overlapping(p netip.Prefix, networks []netip.Prefix) (netip.Prefix, bool) {
	for _, nw := range networks {
		if p.Overlaps(nw) {
			return nw, true
		}
	}
	return netip.Prefix{}, false
}

// addresses finds addresses of any interface inside a node network: up
// would give the same addresses to its bridge and machines.
func (h preflight) addresses(ctx context.Context, networks []netip.Prefix, f *findings) error {
	out, err := h.output(ctx, "ip", "-j", "addr", "show")
	if err != nil {
		return err
	}
	var links []struct {
		Name  string `json:"ifname"`
		Addrs []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return fmt.Errorf("ip -j addr: %v", err)
	}
	for _, l := range links {
		for _, a := range l.Addrs {
			addr, err := netip.ParseAddr(a.Local)
			if err != nil {
				continue
			}
			p := netip.PrefixFrom(addr, a.PrefixLen).Masked()
			nw, ok := overlapping(p, networks)
			if !ok {
				continue
			}
			if work, ours := h.earlier[l.Name]; ours {
				f.errors = append(f.errors, earlierUp(l.Name, work, nw))
				break
			}
			f.errors = append(f.errors, fmt.Sprintf("interface %s has the address %s/%d, in or around the node network %s: up would give the same addresses to its bridge and machines; change the spec's network.nodes, or remove the address (ip addr del %s/%d dev %s)", l.Name, a.Local, a.PrefixLen, nw, a.Local, a.PrefixLen, l.Name))
		}
	}
	return nil
}

// upBridges reads the aliases of the host's devices for the bridges
// other ups made.
func (h preflight) upBridges(ctx context.Context) (map[string]string, error) {
	out, err := h.output(ctx, "ip", "-j", "link", "show")
	if err != nil {
		return nil, err
	}
	var links []struct {
		Name  string `json:"ifname"`
		Alias string `json:"ifalias"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return nil, fmt.Errorf("ip -j link: %v", err)
	}
	bridges := map[string]string{}
	for _, l := range links {
		if work, ok := aliasWork(l.Alias); ok && strings.HasPrefix(l.Name, namePrefix) {
			bridges[l.Name] = work
		}
	}
	return bridges, nil
}

// earlierUp is the finding for the bridge of another up in a node
// network: one line for the device, its addresses and routes, with the
// command that removes all it made.
func earlierUp(link, work string, nw netip.Prefix) string {
	state := "its up is gone (killed, or the host went down) without undoing what it made"
	if s, err := ReadState(work); err != nil {
		state = fmt.Sprintf("its journal cannot be read (%v)", err)
	} else if s.Owner.alive() {
		state = fmt.Sprintf("its up (pid %d) still runs cluster %s", s.Owner.PID, s.Cluster)
	}
	return fmt.Sprintf("interface %s, in the node network %s, is the bridge of the kcompile up whose work directory is %s, and %s: `kcompile down --work %s` removes it and everything else that up made, or change the spec's network.nodes", link, nw, work, state, work)
}

// routes finds routes of any table (blackholes and unreachables too)
// that overlap a node network: they would take the machines' traffic, or
// lose it. The local table is the addresses', read by addresses.
func (h preflight) routes(ctx context.Context, networks []netip.Prefix, f *findings) error {
	for _, family := range []string{"-4", "-6"} {
		out, err := h.output(ctx, "ip", "-j", family, "route", "show", "table", "all")
		if err != nil {
			return err
		}
		var routes []struct {
			Type  string `json:"type"`
			Dst   string `json:"dst"`
			Dev   string `json:"dev"`
			Table string `json:"table"`
		}
		if err := json.Unmarshal(out, &routes); err != nil {
			return fmt.Errorf("ip -j %s route: %v", family, err)
		}
		for _, r := range routes {
			if r.Dst == "default" || r.Dst == "" || r.Table == "local" || r.Type == "multicast" || r.Type == "broadcast" {
				continue
			}
			dst, ok := parsePrefix(r.Dst)
			if !ok {
				continue
			}
			nw, ok := overlapping(dst, networks)
			if _, ours := h.earlier[r.Dev]; !ok || ours {
				continue
			}
			what := "a route to " + r.Dst
			if r.Type != "" && r.Type != "unicast" {
				what = fmt.Sprintf("a %s route to %s", r.Type, r.Dst)
			}
			if r.Dev != "" {
				what += " (dev " + r.Dev + ")"
			}
			table := r.Table
			if table == "" {
				table = "main"
			}
			f.errors = append(f.errors, fmt.Sprintf("the host has %s in routing table %s, which overlaps the node network %s: the machines' traffic would follow it; change the spec's network.nodes, or remove the route (ip route del %s table %s)", what, table, nw, r.Dst, table))
		}
	}
	return nil
}

// rules finds policy routing rules that send traffic to a node network
// elsewhere, before any route of up's is consulted.
func (h preflight) rules(ctx context.Context, networks []netip.Prefix, f *findings) error {
	for _, family := range []string{"-4", "-6"} {
		out, err := h.output(ctx, "ip", "-j", family, "rule", "show")
		if err != nil {
			return err
		}
		var rules []struct {
			Priority int    `json:"priority"`
			Dst      string `json:"dst"`
			DstLen   *int   `json:"dstlen"`
			Table    string `json:"table"`
			Action   string `json:"action"`
		}
		if err := json.Unmarshal(out, &rules); err != nil {
			return fmt.Errorf("ip -j %s rule: %v", family, err)
		}
		for _, r := range rules {
			if r.Dst == "" || r.Dst == "all" {
				continue
			}
			dst, ok := parsePrefix(r.Dst)
			if r.DstLen != nil {
				a, err := netip.ParseAddr(r.Dst)
				ok = err == nil
				dst = netip.PrefixFrom(a, *r.DstLen)
			}
			if !ok {
				continue
			}
			nw, ok := overlapping(dst, networks)
			if !ok {
				continue
			}
			to := r.Action
			if r.Table != "" {
				to = "lookup " + r.Table
			}
			f.errors = append(f.errors, fmt.Sprintf("the policy routing rule %d 'to %s %s' overlaps the node network %s: the machines' traffic would be routed by it; change the spec's network.nodes, or remove the rule (ip rule del priority %d)", r.Priority, dst, to, nw, r.Priority))
		}
	}
	return nil
}

// firewall warns of base chains whose policy drops what up's machines
// send: the input hook drops their traffic to up's registry and
// endpoint on the bridge; the forward hook, where bridge netfilter hands
// bridged frames to it, their traffic to each other. Rules may accept
// it, which up cannot tell; so these are warnings.
func (h preflight) firewall(ctx context.Context, f *findings) error {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil
	}
	out, err := h.output(ctx, "nft", "-j", "list", "ruleset")
	if err != nil {
		return err
	}
	var ruleset struct {
		Items []struct {
			Chain *struct {
				Family, Table, Name, Hook, Policy string
			} `json:"chain"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &ruleset); err != nil {
		return fmt.Errorf("nft -j list ruleset: %v", err)
	}
	bridged := h.bridgeNetfilter(ctx)
	for _, it := range ruleset.Items {
		c := it.Chain
		if c == nil || c.Policy != "drop" {
			continue
		}
		name := fmt.Sprintf("%s %s %s", c.Family, c.Table, c.Name)
		switch {
		case c.Hook == "input" && c.Family != "bridge":
			f.warnings = append(f.warnings, fmt.Sprintf("the firewall chain %s (hook input) drops by default: unless a rule accepts them, the machines cannot reach up's image registry and API endpoint on its bridge, and nodes wait for images; accept the bridge's traffic first (nft insert rule %s %s iifname \"%s*\" accept)", name, c.Family+" "+c.Table, c.Name, namePrefix))
		case c.Hook == "forward" && (bridged || c.Family == "bridge"):
			f.warnings = append(f.warnings, fmt.Sprintf("the firewall chain %s (hook forward) drops by default and bridge netfilter passes bridged frames to it: unless a rule accepts them, the machines cannot reach each other (nodes stay NotReady, etcd finds no quorum); accept the bridge's traffic first (nft insert rule %s %s iifname \"%s*\" accept), or turn off net.bridge.bridge-nf-call-iptables", name, c.Family+" "+c.Table, c.Name, namePrefix))
		}
	}
	return nil
}

// bridgeNetfilter says whether bridged frames pass the IP hooks.
func (h preflight) bridgeNetfilter(ctx context.Context) bool {
	for _, k := range []string{"bridge-nf-call-iptables", "bridge-nf-call-ip6tables"} {
		out, err := h.output(ctx, "cat", "/proc/sys/net/bridge/"+k)
		if err == nil && strings.TrimSpace(string(out)) == "1" {
			return true
		}
	}
	return false
}

// service is an address up listens on, what it serves there, and the
// spec setting that moves it.
type service struct {
	at              netip.AddrPort
	what, setByPath string
}

// ports finds sockets already listening where up will: on the address
// itself, or on every address of its family.
func (h preflight) ports(ctx context.Context, listen []service, f *findings) error {
	if len(listen) == 0 {
		return nil
	}
	var socks []listening
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		out, err := h.output(ctx, "cat", table)
		if err != nil {
			return err
		}
		socks = append(socks, parseListening(out)...)
	}
	for _, want := range listen {
		for _, s := range socks {
			a := want.at.Addr()
			if s.at.Port() != want.at.Port() || !(s.at.Addr() == a || s.at.Addr().IsUnspecified() && (s.at.Addr().Is6() || a.Is4())) {
				continue
			}
			f.errors = append(f.errors, fmt.Sprintf("%s already listens on %s, so up cannot serve %s at %s: stop it, or change the spec (%s)", socketOwner(s.inode), s.at, want.what, want.at, want.setByPath))
		}
	}
	return nil
}

// listening is a listening TCP socket of /proc/net/tcp{,6}.
type listening struct {
	at    netip.AddrPort
	inode string
}

// parseListening reads the sockets in state LISTEN (0A) of a
// /proc/net/tcp table: addresses are hex in host byte order per 32-bit
// word.
func parseListening(table []byte) []listening {
	var out []listening
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		host, port, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		raw, err := hex.DecodeString(host)
		if err != nil || len(raw)%4 != 0 {
			continue
		}
		for i := 0; i < len(raw); i += 4 {
			raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
		}
		a, ok := netip.AddrFromSlice(raw)
		p, err := strconv.ParseUint(port, 16, 16)
		if !ok || err != nil {
			continue
		}
		out = append(out, listening{at: netip.AddrPortFrom(a.Unmap(), uint16(p)), inode: f[9]})
	}
	return out
}

// socketOwner names the process holding a socket, by its inode.
func socketOwner(inode string) string {
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && target == "socket:["+inode+"]" {
			pid := strings.Split(strings.TrimPrefix(fd, "/proc/"), "/")[0]
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			return fmt.Sprintf("%s (pid %s)", strings.TrimSpace(string(comm)), pid)
		}
	}
	return "a process"
}

// parsePrefix reads a route destination: a prefix, or an address.
func parsePrefix(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	return netip.Prefix{}, false
}
