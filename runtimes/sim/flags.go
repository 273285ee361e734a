package sim

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/unitfile"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets/systemd"
)

// placement is how the simulation asks the systemd target for its trees:
// every node's files under the work directory, every node-local listener
// on the node's own loopback address, and what one process needs of the
// components besides their compiled flags: the API servers listen on
// their node's address (not on every address, where five of them would
// collide) without an endpoint reconciler (it refuses loopback
// addresses), and the controller-managers and schedulers serve no port
// (nothing probes them here).
//
// With more than one API server, none keeps a watch cache of Nodes and
// Leases (--watch-cache-sizes ...#0: they read and watch etcd): in one
// process every API server would decode every Node and Lease write into
// a cache of its own, the bulk of the memory of a five-server fleet
// (examples/large: 3.0 GiB at its peak with the caches, 2.3 without, as
// fast). One API server keeps them: it is the only reader, and without
// its cache 10,000 nodes took 157 s to be Ready instead of 83–105 s.
func placement(treeDir string, addrs *AddressMap, apiServers int) systemd.Options {
	server := []string{"--endpoint-reconciler-type=none"}
	if apiServers > 1 {
		server = append(server, "--watch-cache-sizes=leases.coordination.k8s.io#0,nodes#0")
	}
	return systemd.Options{
		Root:     func(node string) string { return filepath.Join(treeDir, layout.NodeTree(node, "")) },
		Loopback: func(node string) netip.Addr { return addrs.Nodes[node] },
		ExtraArgs: func(node string, c ir.Component) []string {
			switch c {
			case ir.ComponentAPIServer:
				return append([]string{"--bind-address=" + addrs.Nodes[node].String()}, server...)
			case ir.ComponentControllerManager, ir.ComponentScheduler:
				return []string{"--secure-port=0"}
			}
			return nil
		},
	}
}

// unit is one of a node's units as the systemd target built it.
func (s *Sim) unit(node, name string) (unitfile.File, error) {
	if n, ok := s.node(node); ok {
		for _, u := range systemd.NodeUnits(s.cluster, n, s.placement) {
			if u.Name == name {
				return u.Unit, nil
			}
		}
	}
	return unitfile.File{}, fmt.Errorf("kcompile bug: node %s has no %s", node, name)
}

// execArgs are the arguments of a unit's command line.
func (s *Sim) execArgs(node, name string) ([]string, error) {
	u, err := s.unit(node, name)
	if err != nil {
		return nil, err
	}
	exec := u.Commands("Service", "ExecStart")
	if len(exec) != 1 {
		return nil, fmt.Errorf("kcompile bug: %s of node %s has no single ExecStart", name, node)
	}
	return exec[0].Argv[1:], nil
}

// flagMap reads "--name=value" arguments into a map.
func flagMap(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		out[name] = value
	}
	return out
}

// restartPolicy reads a unit's Restart= and RestartSec= (seconds, as
// the compiled units write them): whether systemd starts the program
// again when it exits by itself, and after how long.
func (s *Sim) restartPolicy(node, name string) (bool, time.Duration) {
	u, err := s.unit(node, name)
	if err != nil {
		return false, 0
	}
	restart := false
	for _, v := range u.Get("Service", "Restart") {
		restart = v == "always" || v == "on-failure" || v == "on-abnormal" || v == "on-abort"
	}
	delay := 100 * time.Millisecond // systemd's default RestartSec
	for _, v := range u.Get("Service", "RestartSec") {
		if d, err := time.ParseDuration(v); err == nil {
			delay = d
		} else if n, err := strconv.ParseFloat(v, 64); err == nil {
			delay = time.Duration(n * float64(time.Second))
		}
	}
	return restart, delay
}
