package review

import (
	"crypto/x509"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/picture"
	"github.com/kcompile/kcompile/targets"
)

// Compiled is what one run of the pipeline made of a side: the cluster,
// its issued PKI, the trees of the compared targets in order, the check
// diagnostics, and, when policies were checked, their findings (nil when
// none were) and the spec's waivers.
type Compiled struct {
	Cluster     *ir.Cluster
	Material    *pki.Material
	Trees       []NamedTree
	Diagnostics diag.List
	Findings    diag.List
	Waivers     []Waiver
}

// NamedTree is a built target's tree under the target's name.
type NamedTree struct {
	Name string
	Tree *targets.Tree
}

// SideOf is one compiled side of a comparison: the trees (each under its
// target's name when several are compared), the cluster's facts,
// endpoint, etcd members and shape, its check diagnostics, and the
// policies' findings and waivers. at rewrites the positions of the
// side's diagnostics for the report.
func SideOf(label string, out Compiled, at func(diag.List) diag.List) (Side, error) {
	c := out.Cluster
	s := Side{Label: label, Tree: targets.NewTree(), Etcd: etcdMembers(c), Endpoint: endpointOf(c), Facts: factsOf(c, out.Material),
		Topology: picture.Of(c), Checks: at(out.Diagnostics)}
	if out.Findings != nil {
		s.Policies = at(out.Findings)
		for _, w := range out.Waivers {
			w.Positions = at(diag.List{{Positions: w.Positions}})[0].Positions
			w.Waives = at(w.Waives)
			s.Waivers = append(s.Waivers, w)
		}
	}
	for _, t := range out.Trees {
		for _, f := range t.Tree.Files() {
			p := f.Path
			if len(out.Trees) > 1 {
				p = t.Name + "/" + p
			}
			if err := s.Tree.Add(p, f.Data, f.Mode); err != nil {
				return Side{}, err
			}
		}
	}
	return s, nil
}

// factsOf are the settings of a compiled side that a restart does not
// apply to a running cluster.
func factsOf(c *ir.Cluster, m *pki.Material) *Facts {
	f := &Facts{Nodes: map[string]NodeFacts{}, Domain: c.Network.Domain, CAs: map[string]string{}}
	for _, p := range c.Network.ServiceCIDRs {
		f.ServiceCIDRs = append(f.ServiceCIDRs, p.String())
	}
	for _, p := range c.Network.PodCIDRs {
		f.PodCIDRs = append(f.PodCIDRs, p.String())
	}
	for _, n := range c.Nodes {
		if !n.RunsPods() {
			continue
		}
		f.Nodes[n.Name] = NodeFactsOf(n)
	}
	if m != nil {
		b := m.Bundle
		// What each trust store holds, the signer first: during a
		// rotation (pki.Rotation) two, joined by "+".
		for name, a := range map[string]pki.Authority{"kubernetes": pki.ClusterCA, "etcd": pki.EtcdCA, "front-proxy": pki.FrontProxyCA} {
			if _, ok := b.CAs[a]; ok {
				var hashes []string
				for _, c := range b.Trusted(a) {
					hashes = append(hashes, Hash(c.Raw))
				}
				f.CAs[name] = strings.Join(hashes, "+")
			}
		}
		if b.ServiceAccountKey != nil {
			var hashes []string
			for _, k := range b.ServiceAccountPublicKeys() {
				if der, err := x509.MarshalPKIXPublicKey(k); err == nil {
					hashes = append(hashes, Hash(der))
				}
			}
			f.CAs["service-account"] = strings.Join(hashes, "+")
		}
	}
	return f
}

// endpointOf says where clients reach the API and what serves it, in
// the words explain and the pictures use.
func endpointOf(c *ir.Cluster) string { return c.Endpoint.URL() + ", served " + c.Endpoint.Served() }

func etcdMembers(c *ir.Cluster) []EtcdMember {
	var out []EtcdMember
	for _, m := range c.Etcd.Members {
		out = append(out, EtcdMember{Name: m.Name, Address: m.Address.String(), Node: m.Node, PeerURL: m.PeerURL()})
	}
	return out
}
