package nspawn

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
)

// namePrefix starts every device and namespace up makes on the host, so
// that a journal naming anything else is refused.
const namePrefix = "kc"

// plan is where every machine of one cluster goes on this host.
type plan struct {
	cluster *ir.Cluster
	// id tells this up's devices from another's: a hash of the work
	// directory.
	id string
	// bridge joins the machines; the host holds the gateway on it.
	bridge   string
	gateways []netip.Prefix
	// endpoint is the API endpoint when no node holds its address: up
	// serves it on the bridge, balancing over the API servers.
	endpoint netip.AddrPort
	machines []*machine
	mtu      int
	// hosts are names the machines resolve through /etc/hosts: an
	// endpoint given by name.
	hosts []hostEntry
	// egress is up --egress; nil without.
	egress *egress
}

type hostEntry struct {
	addr netip.Addr
	name string
}

// newPlan lays the cluster out on the host. work is the absolute work
// directory.
func newPlan(c *ir.Cluster, work string) (*plan, error) {
	sum := sha256.Sum256([]byte(work))
	id := hex.EncodeToString(sum[:])[:6]
	p := &plan{cluster: c, id: id, bridge: namePrefix + id, mtu: c.Network.MTU}
	taken := map[netip.Addr]string{}
	for i, n := range c.Nodes {
		m := &machine{
			name:     n.Name,
			node:     n,
			netns:    fmt.Sprintf("%s%s-%s", namePrefix, id, n.Name),
			hostLink: fmt.Sprintf("%s%s-%d", namePrefix, id, i),
			mac:      n.MAC,
		}
		if len(m.hostLink) > 15 {
			return nil, fmt.Errorf("%d nodes: more than up can name devices for", len(c.Nodes))
		}
		for _, a := range n.Addresses {
			pfx, ok := networkOf(c, a)
			if !ok {
				return nil, fmt.Errorf("node %s: address %s lies in no node network", n.Name, a)
			}
			m.addrs = append(m.addrs, netip.PrefixFrom(a, pfx.Bits()))
			taken[a] = n.Name
		}
		p.machines = append(p.machines, m)
	}
	// The gateways: the spec's, or the first free address of each node
	// network (the host must hold an address there to reach the nodes).
	gws := slices.Clone(c.Network.Gateways)
	for _, nw := range c.Network.NodeNetworks {
		has := false
		for _, g := range gws {
			if nw.Contains(g) {
				has = true
			}
		}
		if has {
			continue
		}
		g, ok := freeAddress(nw, taken, c.Endpoint.Address)
		if !ok {
			return nil, fmt.Errorf("node network %s has no free address for the host's side of the bridge", nw)
		}
		gws = append(gws, g)
	}
	for _, g := range gws {
		if who, clash := taken[g]; clash {
			return nil, fmt.Errorf("gateway %s is node %s's address", g, who)
		}
		nw, ok := networkOf(c, g)
		if !ok {
			return nil, fmt.Errorf("gateway %s lies in no node network", g)
		}
		p.gateways = append(p.gateways, netip.PrefixFrom(g, nw.Bits()))
	}
	// In mode vip the control-plane nodes hold the address themselves.
	if a := c.Endpoint.Address; a.IsValid() && c.Endpoint.Mode != ir.EndpointVIP {
		if _, node := taken[a]; !node {
			p.endpoint = netip.AddrPortFrom(a, uint16(c.Endpoint.Port))
		}
	}
	return p, nil
}

// named serves an endpoint given by name at the address a it resolved
// to, as newPlan does an endpoint address: up's balancer there, unless a
// node holds it. It refuses an address up itself holds on the bridge.
func (p *plan) named(c *ir.Cluster, a netip.Addr) error {
	for _, g := range p.gateways {
		if g.Addr() == a {
			return fmt.Errorf("controlPlane.endpoint.host %q resolves to %s, the host's own address on up's bridge (the nodes' gateway): map it to a free address of the node network", c.Endpoint.Host, a)
		}
	}
	p.hosts = append(p.hosts, hostEntry{addr: a, name: c.Endpoint.Host})
	for _, m := range p.machines {
		for _, ma := range m.addrs {
			if ma.Addr() == a {
				return nil
			}
		}
	}
	if c.Endpoint.Mode != ir.EndpointVIP {
		p.endpoint = netip.AddrPortFrom(a, uint16(c.Endpoint.Port))
	}
	return nil
}

// networkOf is the node network holding a.
func networkOf(c *ir.Cluster, a netip.Addr) (netip.Prefix, bool) {
	for _, nw := range c.Network.NodeNetworks {
		if nw.Contains(a) {
			return nw, true
		}
	}
	return netip.Prefix{}, false
}

// freeAddress is the first host address of nw that is neither a node's
// nor the endpoint's.
func freeAddress(nw netip.Prefix, taken map[netip.Addr]string, endpoint netip.Addr) (netip.Addr, bool) {
	a := nw.Masked().Addr().Next()
	for i := 0; i < 1024 && nw.Contains(a); i++ {
		if _, t := taken[a]; !t && a != endpoint && !(a.Is4() && isBroadcast(nw, a)) {
			return a, true
		}
		a = a.Next()
	}
	return netip.Addr{}, false
}

func isBroadcast(nw netip.Prefix, a netip.Addr) bool {
	if nw.Bits() >= 31 {
		return false
	}
	b := a.As4()
	host := 32 - nw.Bits()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return v&(1<<host-1) == 1<<host-1
}

// gatewayFor is the gateway of a's family, if any.
func (p *plan) gatewayFor(a netip.Addr) (netip.Addr, bool) {
	for _, g := range p.gateways {
		if g.Addr().Is4() == a.Is4() {
			return g.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// machineID is a node's stable /etc/machine-id (and nspawn --uuid): the
// kubelet reports it, and it must survive a reboot.
func machineID(cluster, node string) string {
	sum := sha256.Sum256([]byte("kcompile up\x00" + cluster + "\x00" + node))
	return hex.EncodeToString(sum[:16])
}

// uuid formats a 32-hex-digit id the way nspawn --uuid takes it.
func uuid(id string) string {
	return strings.Join([]string{id[0:8], id[8:12], id[12:16], id[16:20], id[20:32]}, "-")
}

// workPathOK refuses a work directory overlayfs options cannot name.
func workPathOK(work string) error {
	if !filepath.IsAbs(work) {
		return fmt.Errorf("work directory %s is not absolute", work)
	}
	if strings.ContainsAny(work, ",:\\\n") {
		return fmt.Errorf("work directory %s: overlayfs cannot take a path with ',', ':', '\\' or a newline; choose another with --work", strconv.Quote(work))
	}
	return nil
}

// kubelets is how many machines run a kubelet.
func (p *plan) kubelets() int {
	n := 0
	for _, m := range p.machines {
		if m.node.RunsPods() {
			n++
		}
	}
	return n
}
