package compiler

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/zones"
)

// facts mirrors #Facts (schema/v1alpha1/policy.cue) field by field; the
// policy check unifies it with that definition, so a field missing here
// or there fails every policy check at once.
type facts struct {
	Version string `json:"version"`
	Nodes   struct {
		Total        int `json:"total"`
		ControlPlane int `json:"controlPlane"`
		Workers      int `json:"workers"`
		Etcd         int `json:"etcd"`
	} `json:"nodes"`
	Etcd struct {
		Topology               string `json:"topology"`
		Members                int    `json:"members"`
		Quorum                 int    `json:"quorum"`
		Tolerates              int    `json:"tolerates"`
		Zones                  int    `json:"zones"`
		QuorumSurvivesZoneLoss bool   `json:"quorumSurvivesZoneLoss"`
		QuorumSurvivesRackLoss bool   `json:"quorumSurvivesRackLoss"`
	} `json:"etcd"`
	Zones                       map[string]*zoneFacts `json:"zones"`
	RacksSharedByEtcdAndWorkers []string              `json:"racksSharedByEtcdAndWorkers"`
	Certificates                struct {
		KeyAlgorithm     string `json:"keyAlgorithm"`
		CAValidityDays   int    `json:"caValidityDays"`
		LeafValidityDays int    `json:"leafValidityDays"`
	} `json:"certificates"`
	CNI              string   `json:"cni"`
	KubeProxy        string   `json:"kubeProxy"`
	Runtime          string   `json:"runtime"`
	OperatingSystems []string `json:"operatingSystems"`
	Profile          string   `json:"profile"`
	// Node is left out of the facts of a policy that does not read it
	// (it is the size of the cluster).
	Node            map[string]*nodeFacts `json:"node,omitempty"`
	Pools           map[string]*poolFacts `json:"pools"`
	APIServerMinors []int                 `json:"apiServerMinors"`
}

type nodeFacts struct {
	Role       string            `json:"role"`
	Pool       string            `json:"pool"`
	Zone       string            `json:"zone"`
	Rack       string            `json:"rack"`
	OS         string            `json:"os"`
	Components []string          `json:"components"`
	Versions   map[string]string `json:"versions"`
	Minors     map[string]int    `json:"minors"`
	CPU        int               `json:"cpu"`
	MaxPods    int               `json:"maxPods"`
}

type poolFacts struct {
	Nodes int      `json:"nodes"`
	Zones []string `json:"zones"`
	Racks []string `json:"racks"`
}

type zoneFacts struct {
	Nodes                     int  `json:"nodes"`
	Workers                   int  `json:"workers"`
	EtcdMembers               int  `json:"etcdMembers"`
	EtcdQuorumAfterLoss       bool `json:"etcdQuorumAfterLoss"`
	WorkerCapacityLostPercent int  `json:"workerCapacityLostPercent"`
}

// deriveFacts computes the facts of a compiled cluster checked with
// profile.
func deriveFacts(c *ir.Cluster, profile string) facts {
	var f facts
	f.Version = "v1"
	f.Zones = map[string]*zoneFacts{}
	f.RacksSharedByEtcdAndWorkers = []string{}
	f.OperatingSystems = []string{}
	workerRacks := map[string]bool{}
	for _, n := range c.Nodes {
		f.Nodes.Total++
		switch n.Role {
		case ir.RoleControlPlane:
			f.Nodes.ControlPlane++
		case ir.RoleWorker:
			f.Nodes.Workers++
		case ir.RoleEtcd:
			f.Nodes.Etcd++
		}
		if n.Role == ir.RoleWorker && n.Rack != "" {
			workerRacks[n.Rack] = true
		}
		if !slices.Contains(f.OperatingSystems, string(n.OS)) {
			f.OperatingSystems = append(f.OperatingSystems, string(n.OS))
		}
	}
	sort.Strings(f.OperatingSystems)
	f.Node, f.Pools, f.APIServerMinors = nodeAndPoolFacts(c)
	ms := c.Etcd.Members
	domains := zones.Of(c)
	f.Etcd.Topology = c.Etcd.Topology
	f.Etcd.Members, f.Etcd.Quorum, f.Etcd.Tolerates = domains.Members, domains.Quorum, domains.Tolerates
	for _, z := range domains.Zones {
		f.Zones[z.Name] = &zoneFacts{Nodes: z.Nodes, Workers: z.Workers, EtcdMembers: z.EtcdMembers,
			EtcdQuorumAfterLoss: z.EtcdQuorumAfterLoss, WorkerCapacityLostPercent: z.WorkerCapacityLostPercent}
	}
	inZone, inRack := map[string]int{}, map[string]int{}
	for _, m := range ms {
		if m.Zone != "" {
			inZone[m.Zone]++
		}
		if m.Rack != "" {
			inRack[m.Rack]++
			if workerRacks[m.Rack] && !slices.Contains(f.RacksSharedByEtcdAndWorkers, m.Rack) {
				f.RacksSharedByEtcdAndWorkers = append(f.RacksSharedByEtcdAndWorkers, m.Rack)
			}
		}
	}
	sort.Strings(f.RacksSharedByEtcdAndWorkers)
	f.Etcd.Zones = len(inZone)
	// A member without a zone (rack) could be in any: survival is
	// known only when every member has one.
	survives := func(in map[string]int, of func(ir.EtcdMember) string) bool {
		if len(ms) == 0 || slices.ContainsFunc(ms, func(m ir.EtcdMember) bool { return of(m) == "" }) {
			return false
		}
		for _, k := range in {
			if len(ms)-k < f.Etcd.Quorum {
				return false
			}
		}
		return true
	}
	f.Etcd.QuorumSurvivesZoneLoss = survives(inZone, func(m ir.EtcdMember) string { return m.Zone })
	f.Etcd.QuorumSurvivesRackLoss = survives(inRack, func(m ir.EtcdMember) string { return m.Rack })
	day := 24 * time.Hour
	f.Certificates.KeyAlgorithm = c.PKI.KeyAlgorithm
	f.Certificates.CAValidityDays = int(c.PKI.CAValidity / day)
	f.Certificates.LeafValidityDays = int(c.PKI.LeafValidity / day)
	f.CNI = c.Network.CNI.Plugin
	f.KubeProxy = c.Network.KubeProxyMode
	f.Runtime = c.Runtime.Engine
	f.Profile = profile
	return f
}

// nodeAndPoolFacts are the facts of each node and worker pool, and the
// API servers' minor releases.
func nodeAndPoolFacts(c *ir.Cluster) (map[string]*nodeFacts, map[string]*poolFacts, []int) {
	nodes, pools := map[string]*nodeFacts{}, map[string]*poolFacts{}
	apiMinors := []int{}
	for _, n := range c.Nodes {
		nf := &nodeFacts{Role: string(n.Role), Pool: n.Pool, Zone: n.Zone, Rack: n.Rack, OS: string(n.OS),
			Components: []string{}, Versions: map[string]string{}, Minors: map[string]int{},
			CPU: n.Capacity.CPU, MaxPods: n.Capacity.MaxPods}
		for _, comp := range n.Components {
			nf.Components = append(nf.Components, string(comp))
			var versions map[string]string
			switch comp {
			case ir.ComponentEtcd:
				versions = map[string]string{"etcd": c.Etcd.Version}
			case ir.ComponentAPIServer:
				versions = map[string]string{"kube-apiserver": n.APIServerVersion}
			case ir.ComponentControllerManager:
				versions = map[string]string{"kube-controller-manager": n.ControllerManagerVersion}
			case ir.ComponentScheduler:
				versions = map[string]string{"kube-scheduler": n.SchedulerVersion}
			case ir.ComponentKubelet:
				versions = map[string]string{"kubelet": n.KubeletVersion}
			case ir.ComponentKubeProxy:
				versions = map[string]string{"kube-proxy": n.KubeProxyVersion}
			}
			for prog, v := range versions {
				if v == "" {
					continue
				}
				nf.Versions[prog] = v
				if prog == "etcd" {
					continue
				}
				if m, ok := minorOf(v); ok {
					nf.Minors[prog] = m
					if prog == "kube-apiserver" && !slices.Contains(apiMinors, m) {
						apiMinors = append(apiMinors, m)
					}
				}
			}
		}
		sort.Strings(nf.Components)
		nodes[n.Name] = nf
		if n.Pool == "" {
			continue
		}
		pf := pools[n.Pool]
		if pf == nil {
			pf = &poolFacts{Zones: []string{}, Racks: []string{}}
			pools[n.Pool] = pf
		}
		pf.Nodes++
		if n.Zone != "" && !slices.Contains(pf.Zones, n.Zone) {
			pf.Zones = append(pf.Zones, n.Zone)
		}
		if n.Rack != "" && !slices.Contains(pf.Racks, n.Rack) {
			pf.Racks = append(pf.Racks, n.Rack)
		}
	}
	for _, pf := range pools {
		sort.Strings(pf.Zones)
		sort.Strings(pf.Racks)
	}
	sort.Ints(apiMinors)
	return nodes, pools, apiMinors
}

// minorOf is the minor release of a version "1.37.2" (or "v1.37.2").
func minorOf(v string) (int, bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, false
	}
	m, err := strconv.Atoi(parts[1])
	return m, err == nil
}
