package nspawn

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/targets/systemd"
)

// defaultRegistryPort is where up serves images when the spec names no
// mirror it can serve at.
const defaultRegistryPort = 5000

// mirrorAddress is where up serves the cluster's images, and the
// adjustment it needs (empty when the spec's mirrors already point at an
// address up can serve on).
//
// An endpoint of the spec's mirrors that is a plain-HTTP address in a
// node network and no node's is served by up itself; registries the spec
// names no mirror for get one written into the machines, at the first
// such endpoint or else the gateway's port 5000.
func (c *Cluster) mirrorAddress() (netip.AddrPort, string, error) {
	if c.cfg.Registry == nil {
		return netip.AddrPort{}, "", nil
	}
	nodes := map[netip.Addr]bool{}
	for _, n := range c.cfg.Cluster.Nodes {
		for _, a := range n.Addresses {
			nodes[a] = true
		}
	}
	var at netip.AddrPort
	var unservable []string
	for _, reg := range c.cfg.Registry.Registries() {
		m, ok := specMirror(c.cfg.Cluster, reg)
		if !ok {
			continue
		}
		found := false
		for _, e := range m.Endpoints {
			a, ok := servable(c.cfg.Cluster, e, nodes)
			if !ok {
				continue
			}
			if at.IsValid() && a != at {
				return at, "", fmt.Errorf("runtime.mirrors point at %s and %s: up serves its registry at one address; use the same endpoint for every registry", at, a)
			}
			at, found = a, true
			break
		}
		if !found {
			unservable = append(unservable, fmt.Sprintf("%s (%s)", reg, strings.Join(m.URLs(), ", ")))
		}
	}
	if len(unservable) > 0 {
		return at, "", fmt.Errorf("runtime.mirrors of %s name no endpoint up can serve: add one of the form http://ADDRESS:PORT with an address of a node network that no node has (up serves the images there)", strings.Join(unservable, ", "))
	}
	if !at.IsValid() {
		g := c.p.gateways[0].Addr()
		at = netip.AddrPortFrom(g, defaultRegistryPort)
	}
	missing := c.mirrorRegistries()
	if len(missing) == 0 {
		return at, "", nil
	}
	return at, strings.Join(missing, ", ") + " → http://" + at.String(), nil
}

// mirrorRegistries are the registries the cluster pulls from that the
// spec names no mirror for.
func (c *Cluster) mirrorRegistries() []string {
	if c.cfg.Registry == nil {
		return nil
	}
	var out []string
	for _, reg := range c.cfg.Registry.Registries() {
		if _, ok := specMirror(c.cfg.Cluster, reg); !ok {
			out = append(out, reg)
		}
	}
	slices.Sort(out)
	return out
}

func specMirror(c *ir.Cluster, registry string) (ir.Mirror, bool) {
	for _, m := range c.Runtime.Mirrors {
		if m.Registry == registry {
			return m, true
		}
	}
	return ir.Mirror{}, false
}

// servable says whether up can serve a mirror endpoint: http, an IP
// address of a node network that is no node's.
func servable(c *ir.Cluster, u *url.URL, nodes map[netip.Addr]bool) (netip.AddrPort, bool) {
	if u.Scheme != "http" {
		return netip.AddrPort{}, false
	}
	a, err := netip.ParseAddr(u.Hostname())
	if err != nil || nodes[a] {
		return netip.AddrPort{}, false
	}
	if _, ok := networkOf(c, a); !ok {
		return netip.AddrPort{}, false
	}
	port := 80
	if p := u.Port(); p != "" {
		port, err = strconv.Atoi(p)
		if err != nil {
			return netip.AddrPort{}, false
		}
	}
	return netip.AddrPortFrom(a, uint16(port)), true
}

// mirrorFiles are the containerd hosts.toml files pointing registries
// the spec has no mirror for at up's registry, written by the systemd
// target's own encoder.
func (c *Cluster) mirrorFiles() (map[string][]byte, error) {
	missing := c.mirrorRegistries()
	if len(missing) == 0 {
		return nil, nil
	}
	var mirrors []ir.Mirror
	for _, reg := range missing {
		mirrors = append(mirrors, ir.Mirror{Registry: reg, Endpoints: []*url.URL{{Scheme: "http", Host: c.mirror.String()}}})
	}
	return systemd.MirrorFiles(c.cfg.Cluster.Runtime.Engine, mirrors)
}
