package nspawn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"unicode"

	"github.com/kcompile/kcompile/compiler/ir"
)

// KindNftTable is an nftables table of up's (family inet), deleted whole.
const KindNftTable = "nft-table"

// egress is up --egress: the nodes' IPv4 traffic to anything beyond the
// bridge is forwarded out of the host's uplink and masqueraded there,
// by an nftables table of up's own. up changes no host-wide setting for
// it: forwarding is turned on for its own bridge only, and the uplink's
// must already be on.
type egress struct {
	uplink string
	// table is the inet table's name: up's prefix and id.
	table string
	// sources are the node networks masqueraded (IPv4).
	sources []netip.Prefix
	// resolvers are the host's name servers, which the machines use
	// when the spec names none (resolvConf).
	resolvers []netip.Addr
}

// planEgress checks the host for egress through uplink (empty: the
// device of the main table's default route), before anything is made.
func planEgress(ctx context.Context, c *ir.Cluster, p *plan, uplink string) (*egress, []string) {
	var why []string
	if uplink == "" {
		dev, err := defaultRouteDevice(ctx)
		if err != nil {
			return nil, []string{fmt.Sprintf("--egress: %v; name the uplink with --uplink", err)}
		}
		uplink = dev
	}
	if err := linkName(uplink); err != nil {
		return nil, []string{fmt.Sprintf("--egress: %v (--uplink)", err)}
	}
	e := &egress{uplink: uplink, table: p.bridge + "-egress", resolvers: hostResolvers()}
	if !linkExists(uplink) {
		why = append(why, fmt.Sprintf("--egress: the host has no device %s to send the nodes' traffic out of (--uplink)", uplink))
	} else if on, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + uplink + "/forwarding"); err != nil {
		why = append(why, fmt.Sprintf("--egress: %v", err))
	} else if strings.TrimSpace(string(on)) != "1" {
		why = append(why, fmt.Sprintf("--egress: the uplink %s does not forward IPv4 (net.ipv4.conf.%s.forwarding = 0), so the answers to the nodes would be dropped; up changes no host-wide setting: turn it on first (sysctl -w net.ipv4.conf.%s.forwarding=1)", uplink, uplink, uplink))
	}
	for _, nw := range c.Network.NodeNetworks {
		if nw.Addr().Is4() {
			e.sources = append(e.sources, nw)
		}
	}
	if len(e.sources) == 0 {
		why = append(why, "--egress: the node networks are IPv6 only, and up masquerades IPv4")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		why = append(why, "--egress: nft is not installed (Debian: nftables)")
	}
	return e, why
}

// linkName refuses what Linux would not take for a device name
// (dev_valid_name: 1 to 15 bytes, not . or .., no slash, colon or white
// space) and what an nft string cannot hold (quotes, backslashes): it
// becomes a path under /proc/sys and a word of the table's script.
func linkName(name string) error {
	if name == "" || len(name) > 15 || name == "." || name == ".." || strings.ContainsAny(name, "/:\"\\") || strings.IndexFunc(name, unicode.IsSpace) >= 0 {
		return fmt.Errorf("%q is not a network device name", name)
	}
	return nil
}

// defaultRouteDevice is the device of the main table's IPv4 default
// route.
func defaultRouteDevice(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", "-j", "-4", "route", "show", "default").Output()
	if err != nil {
		return "", fmt.Errorf("ip route show default: %v", err)
	}
	var routes []struct {
		Dev string `json:"dev"`
	}
	if err := json.Unmarshal(out, &routes); err != nil {
		return "", fmt.Errorf("ip -j route show default: %v", err)
	}
	for _, r := range routes {
		if r.Dev != "" {
			return r.Dev, nil
		}
	}
	return "", fmt.Errorf("the host has no IPv4 default route")
}

// hostResolvers are the name servers of the host's /etc/resolv.conf
// that a machine can reach: not loopback ones (a local stub answers
// only the host).
func hostResolvers() []netip.Addr {
	data, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	var out []netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && !a.IsLoopback() {
				out = append(out, a)
			}
		}
	}
	return out
}

// ruleset is the table's nft script.
func (e *egress) ruleset(bridge string) string {
	var srcs []string
	for _, s := range e.sources {
		srcs = append(srcs, s.String())
	}
	return fmt.Sprintf(`table inet %s {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		iifname "%s" oifname "%s" ip saddr { %s } masquerade
	}
}
`, e.table, bridge, e.uplink, strings.Join(srcs, ", "))
}

// startEgress turns forwarding on for up's bridge and makes the table,
// each journalled first.
func (c *Cluster) startEgress() error {
	e := c.p.egress
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+c.p.bridge+"/forwarding", []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("forwarding on %s: %v", c.p.bridge, err)
	}
	if err := c.j.record(Resource{Kind: KindNftTable, Name: e.table}); err != nil {
		return err
	}
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(e.ruleset(c.p.bridge))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f -: %v: %s", err, strings.TrimSpace(string(out)))
	}
	c.logf("egress: the nodes' IPv4 traffic leaves through %s, masqueraded (nft table inet %s)", e.uplink, e.table)
	return nil
}

// nftTableExists says whether the inet table name exists.
func nftTableExists(name string) bool {
	return exec.Command("nft", "list", "table", "inet", name).Run() == nil
}

// deleteNftTable deletes the inet table name, if it exists.
func deleteNftTable(name string) error {
	if !nftTableExists(name) {
		return nil
	}
	if out, err := exec.Command("nft", "delete", "table", "inet", name).CombinedOutput(); err != nil && nftTableExists(name) {
		return fmt.Errorf("nft delete table inet %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
