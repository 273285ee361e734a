package sim

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/kcompile/kcompile/compiler/ir"
)

// A simulation lives in a block of the loopback network, 127.B.0.0 and
// up: the API endpoint at 127.B.0.2, the nodes from 127.B.0.10 on, 250 per
// /24, 64,000 per block (more spill into the next). Simulations running
// at once (tests, two users) take different blocks.

// MaxBlock is the highest block a simulation may start in.
const MaxBlock = 200

// endpointAddr is where the simulation's load balancer serves the API
// endpoint.
func endpointAddr(block int) netip.Addr { return netip.AddrFrom4([4]byte{127, byte(block), 0, 2}) }

// nodeAddr is the loopback address of the i-th node.
func nodeAddr(block, i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(block + i/(250*256)), byte(i / 250 % 256), byte(10 + i%250)})
}

// EndpointAddr is where a simulation in block serves the API endpoint,
// for a caller choosing a free block.
func EndpointAddr(block int) netip.Addr { return endpointAddr(block) }

// AddressMap is how the simulation places a cluster on one machine:
// every node on its own loopback address, the API endpoint on another.
type AddressMap struct {
	// Nodes maps a node name to its simulated address.
	Nodes map[string]netip.Addr
	// Real maps a node name to its address in the spec.
	Real     map[string]netip.Addr
	Endpoint netip.Addr
}

// Remap returns a copy of the cluster in which every node address, the
// endpoint and everything derived from them (etcd URLs and initial
// cluster) are loopback addresses, so that the normal catalogue issues
// certificates for the addresses the simulation listens on. Second
// addresses (IPv6) are dropped: loopback has one IPv6 address only.
func Remap(c *ir.Cluster, block int) (*ir.Cluster, *AddressMap) {
	out := *c
	m := &AddressMap{Nodes: map[string]netip.Addr{}, Real: map[string]netip.Addr{}, Endpoint: endpointAddr(block)}
	out.Nodes = slices.Clone(c.Nodes)
	for i := range out.Nodes {
		n := &out.Nodes[i]
		m.Real[n.Name] = n.Address()
		m.Nodes[n.Name] = nodeAddr(block, i)
		n.Addresses = []netip.Addr{nodeAddr(block, i)}
	}
	out.Network.NodeNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	out.Network.Gateways, out.Network.Nameservers = nil, nil
	out.Endpoint = ir.Endpoint{Host: m.Endpoint.String(), Address: m.Endpoint, Port: c.Endpoint.Port,
		Mode: c.Endpoint.Mode, RouterID: c.Endpoint.RouterID, AdvertInterval: c.Endpoint.AdvertInterval, LocalPort: c.Endpoint.LocalPort}

	out.Etcd.Members = slices.Clone(c.Etcd.Members)
	for i := range out.Etcd.Members {
		em := &out.Etcd.Members[i]
		addr, ok := m.Nodes[em.Node]
		if !ok {
			panic(fmt.Sprintf("kcompile bug: etcd member %s on unknown node %s", em.Name, em.Node))
		}
		em.Address = addr
	}
	return &out, m
}
