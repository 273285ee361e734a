package compiler

import (
	"fmt"
	"net/netip"

	"github.com/kcompile/kcompile/compiler/diag"
)

const (
	CodeCIDRParse         = "KC0301"
	CodeCIDROverlap       = "KC0302"
	CodeFamilyMismatch    = "KC0303"
	CodeDualStackPair     = "KC0304"
	CodePodCIDRFull       = "KC0305"
	CodePodCIDRHeadroom   = "KC0306"
	CodeServiceCIDRSize   = "KC0307"
	CodeDNSIPOutside      = "KC0308"
	CodeDNSIPFirst        = "KC0309"
	CodeNodeMask          = "KC0310"
	CodeMaxPodsRange      = "KC0311"
	CodeDomain            = "KC0312"
	CodeNodeNetworkFamily = "KC0313"
	CodeServiceCIDRSmall  = "KC0314"
)

func networksFamily() family {
	return family{name: "networks", check: checkNetworks, rules: []diag.Rule{
		rule(CodeCIDRParse, diag.Error, "a CIDR does not parse or has host bits set"),
		rule(CodeCIDROverlap, diag.Error, "two of pod CIDR, service CIDR, node networks and the API VIP overlap"),
		rule(CodeFamilyMismatch, diag.Error, "the pod and service CIDRs of one position (primary or secondary) are of different IP families"),
		rule(CodeDualStackPair, diag.Error, "dual-stack is incomplete: a secondary pod CIDR without a secondary service CIDR (or the reverse), or a secondary of the primary's family"),
		rule(CodePodCIDRFull, diag.Error, "the pod CIDR at the node mask size has fewer node ranges than nodes that run pods"),
		rule(CodePodCIDRHeadroom, diag.Warning, "the pod CIDR leaves less than 20 % of its node ranges free"),
		rule(CodeServiceCIDRSize, diag.Error, "the service CIDR is larger than the API server accepts (IPv4 /12, IPv6 /108)"),
		rule(CodeDNSIPOutside, diag.Error, "the DNS service IP is outside the service CIDR"),
		rule(CodeDNSIPFirst, diag.Error, "the DNS service IP is the first service address, which the kubernetes Service takes"),
		rule(CodeNodeMask, diag.Error, "the node CIDR mask size is not longer than the pod CIDR's prefix"),
		rule(CodeMaxPodsRange, diag.Error, "a node's maxPods exceeds the addresses of its pod range"),
		rule(CodeDomain, diag.Error, "the cluster domain is not a DNS name"),
		rule(CodeNodeNetworkFamily, diag.Error, "no node network of the primary IP family of pods and services"),
		rule(CodeServiceCIDRSmall, diag.Error, "a service CIDR is too small to hold the kubernetes Service address and the DNS address derived from it"),
	}}
}

// namedRange is an address range taking part in the overlap check.
type namedRange struct {
	name, path string
	p          netip.Prefix
}

func checkNetworks(m *model) {
	n := &m.spec.Network
	var ranges []namedRange
	for i, s := range n.Nodes {
		path := fmt.Sprintf("network.nodes[%d]", i)
		if p, ok := m.prefix(path, s); ok {
			ranges = append(ranges, namedRange{"node network " + s, path, p})
		}
	}
	pod, podOK := m.prefix("network.podCIDR", n.PodCIDR)
	svc, svcOK := m.prefix("network.serviceCIDR", n.ServiceCIDR)
	if podOK {
		ranges = append(ranges, namedRange{"pod CIDR " + n.PodCIDR, "network.podCIDR", pod})
	}
	if svcOK {
		ranges = append(ranges, namedRange{"service CIDR " + n.ServiceCIDR, "network.serviceCIDR", svc})
	}
	var pod2, svc2 netip.Prefix
	var pod2OK, svc2OK bool
	if n.SecondaryPodCIDR != "" {
		if pod2, pod2OK = m.prefix("network.secondaryPodCIDR", n.SecondaryPodCIDR); pod2OK {
			ranges = append(ranges, namedRange{"secondary pod CIDR " + n.SecondaryPodCIDR, "network.secondaryPodCIDR", pod2})
		}
	}
	if n.SecondaryServiceCIDR != "" {
		if svc2, svc2OK = m.prefix("network.secondaryServiceCIDR", n.SecondaryServiceCIDR); svc2OK {
			ranges = append(ranges, namedRange{"secondary service CIDR " + n.SecondaryServiceCIDR, "network.secondaryServiceCIDR", svc2})
		}
	}
	if ep := m.spec.ControlPlane.Endpoint; ep != nil && ep.Address != "" {
		if a, err := netip.ParseAddr(ep.Address); err == nil {
			ranges = append(ranges, namedRange{"API VIP " + ep.Address, "controlPlane.endpoint.address", netip.PrefixFrom(a, a.BitLen())})
		}
	}
	for i, a := range ranges {
		for _, b := range ranges[i+1:] {
			if !overlaps(a.p, b.p) {
				continue
			}
			// A VIP inside a node network is normal: only the pod and
			// service ranges must stay clear of it.
			if (isVIP(a) && isNodeNet(b)) || (isVIP(b) && isNodeNet(a)) {
				continue
			}
			at, more := m.conflict(b.path, a.path)
			first, second := b.name, a.name
			if at != b.path {
				first, second = a.name, b.name
			}
			m.report(CodeCIDROverlap, at, fmt.Sprintf("%s overlaps %s", first, second),
				"every range must be disjoint, or packets are routed to the wrong place: move one of them", more...)
		}
	}

	// Families: primary pod and service ranges agree; secondaries come as a
	// pair of the other family.
	if podOK && svcOK && pod.Addr().Is4() != svc.Addr().Is4() {
		at, more := m.conflict("network.serviceCIDR", "network.podCIDR")
		m.report(CodeFamilyMismatch, at, fmt.Sprintf("service CIDR %s is %s but pod CIDR %s is %s", svc, familyOf(svc.Addr()), pod, familyOf(pod.Addr())),
			"the primary pod and service CIDRs must be of one family; put the other family in secondaryPodCIDR and secondaryServiceCIDR", more...)
	}
	if pod2OK && podOK && pod2.Addr().Is4() == pod.Addr().Is4() {
		m.report(CodeDualStackPair, "network.secondaryPodCIDR", fmt.Sprintf("secondary pod CIDR %s is of the same family as pod CIDR %s", pod2, pod),
			"the secondary ranges hold the other IP family", "network.podCIDR")
	}
	if svc2OK && svcOK && svc2.Addr().Is4() == svc.Addr().Is4() {
		m.report(CodeDualStackPair, "network.secondaryServiceCIDR", fmt.Sprintf("secondary service CIDR %s is of the same family as service CIDR %s", svc2, svc),
			"the secondary ranges hold the other IP family", "network.serviceCIDR")
	}
	switch {
	case (n.SecondaryPodCIDR == "") != (n.SecondaryServiceCIDR == ""):
		have, missing := "network.secondaryPodCIDR", "secondaryServiceCIDR"
		if n.SecondaryPodCIDR == "" {
			have, missing = "network.secondaryServiceCIDR", "secondaryPodCIDR"
		}
		m.report(CodeDualStackPair, have, "dual-stack needs a secondary pod CIDR and a secondary service CIDR; only one is set",
			"set "+missing+" too, or remove "+have[len("network."):]+" for a single-stack cluster")
	}

	// Every node of a family needs somewhere to live.
	if podOK {
		found := false
		for _, r := range ranges {
			if isNodeNet(r) && r.p.Addr().Is4() == pod.Addr().Is4() {
				found = true
			}
		}
		if !found && len(n.Nodes) > 0 {
			m.report(CodeNodeNetworkFamily, "network.nodes", fmt.Sprintf("pods are %s but no node network is", familyOf(pod.Addr())),
				"add a node network of the pods' family to network.nodes, or change podCIDR and serviceCIDR")
		}
	}

	podNodes := 0
	maxPods := map[string]int{}
	for _, node := range m.nodes {
		if node.runsPods() {
			podNodes++
			if node.spec.Capacity.MaxPods > maxPods[node.path] {
				maxPods[node.path] = node.spec.Capacity.MaxPods
			}
		}
	}
	checkPodCapacity(m, "network.podCIDR", pod, podOK, podNodes, maxPods)
	if pod2OK {
		checkPodCapacity(m, "network.secondaryPodCIDR", pod2, true, podNodes, maxPods)
	}

	for _, s := range []struct {
		path string
		p    netip.Prefix
		ok   bool
	}{{"network.serviceCIDR", svc, svcOK}, {"network.secondaryServiceCIDR", svc2, svc2OK}} {
		if !s.ok {
			continue
		}
		limit := 12
		if !s.p.Addr().Is4() {
			limit = 108
		}
		if s.p.Bits() < limit {
			m.report(CodeServiceCIDRSize, s.path, fmt.Sprintf("service CIDR %s is larger than kube-apiserver accepts (/%d at most for %s)", s.p, limit, familyOf(s.p.Addr())),
				fmt.Sprintf("use a prefix of /%d or longer", limit))
		}
		// The primary range's DNS address may be given; the secondary's
		// is always derived.
		derived := s.path == "network.secondaryServiceCIDR" || n.DNSServiceIP == ""
		if problem := serviceRangeProblem(s.p, derived); problem != "" {
			hint := "widen the service CIDR (a /28 holds both, a /24 or more leaves room for Services)"
			if derived && s.path == "network.serviceCIDR" {
				hint += ", or set network.dnsServiceIP"
			}
			m.report(CodeServiceCIDRSmall, s.path, fmt.Sprintf("service CIDR %s %s", s.p, problem), hint)
		}
	}

	if n.DNSServiceIP != "" && svcOK {
		ip, err := netip.ParseAddr(n.DNSServiceIP)
		switch {
		case err != nil:
			m.report(CodeAddressParse, "network.dnsServiceIP", fmt.Sprintf("DNS service IP %s is not an IP address", diag.Quote(n.DNSServiceIP)),
				"write an address inside the service CIDR, such as the tenth one")
		case !svc.Contains(ip):
			m.report(CodeDNSIPOutside, "network.dnsServiceIP", fmt.Sprintf("DNS service IP %s is outside the service CIDR %s", ip, svc),
				"choose an address inside the service CIDR, or leave dnsServiceIP out to get its tenth address", "network.serviceCIDR")
		case ip == svc.Addr().Next():
			m.report(CodeDNSIPFirst, "network.dnsServiceIP", fmt.Sprintf("DNS service IP %s is the first service address, taken by the kubernetes Service", ip),
				"choose another address, conventionally the tenth of the service CIDR", "network.serviceCIDR")
		case ip == svc.Addr():
			m.report(CodeDNSIPOutside, "network.dnsServiceIP", fmt.Sprintf("DNS service IP %s is the network address of %s, which is never allocated", ip, svc),
				"choose another address, conventionally the tenth of the service CIDR", "network.serviceCIDR")
		case ip.Is4() && ip == lastAddr(svc):
			// The API server's allocator leaves out the broadcast address
			// of an IPv4 range as well as its network address.
			m.report(CodeDNSIPOutside, "network.dnsServiceIP", fmt.Sprintf("DNS service IP %s is the broadcast address of %s, which is never allocated", ip, svc),
				"choose another address, conventionally the tenth of the service CIDR", "network.serviceCIDR")
		}
	}
	if !isDNSSubdomain(n.Domain) {
		m.report(CodeDomain, "network.domain", fmt.Sprintf("cluster domain %s is not a DNS name", diag.Quote(n.Domain)),
			`use lower-case DNS labels separated by dots, such as "cluster.local"`)
	}
}

// serviceRangeProblem says why p cannot hold the kubernetes Service (its
// first address) and, when derived, the DNS Service (its tenth), as
// addresses the API server allocates: never an IPv4 range's network or
// broadcast address. "" when it can.
func serviceRangeProblem(p netip.Prefix, derived bool) string {
	usable := func(a netip.Addr) bool {
		return p.Contains(a) && a != p.Addr() && !(a.Is4() && p.Bits() < 31 && a == lastAddr(p))
	}
	if first := p.Addr().Next(); !usable(first) {
		return "has no address for the kubernetes Service (its first address after the network address)"
	}
	if !derived {
		return ""
	}
	if dns, ok := nthAddr(p, 10); !ok || !usable(dns) {
		return "has no tenth address for the DNS Service (kcompile's default, as kubeadm's)"
	}
	return ""
}

// checkPodCapacity checks that the pod range has a node range for every
// node that runs pods, with headroom, and that each node range can hold the
// node's maxPods.
func checkPodCapacity(m *model, path string, p netip.Prefix, ok bool, nodes int, maxPods map[string]int) {
	if !ok {
		return
	}
	maskPath, mask := "network.nodeCIDRMaskSize.ipv4", m.spec.Network.NodeCIDRMaskSize.IPv4
	if !p.Addr().Is4() {
		maskPath, mask = "network.nodeCIDRMaskSize.ipv6", m.spec.Network.NodeCIDRMaskSize.IPv6
	}
	if mask <= p.Bits() || mask > p.Addr().BitLen() {
		at, more := m.conflict(maskPath, path)
		m.report(CodeNodeMask, at, fmt.Sprintf("node CIDR mask size /%d does not split pod CIDR %s into node ranges", mask, p),
			fmt.Sprintf("use a mask size between /%d and /%d, or a wider pod CIDR", p.Bits()+1, p.Addr().BitLen()), more...)
		return
	}
	capacity := subnets(p, mask)
	switch {
	case int64(nodes) > capacity:
		m.report(CodePodCIDRFull, path, fmt.Sprintf("pod CIDR %s holds %d node ranges of /%d but %d nodes run pods", p, capacity, mask, nodes),
			"widen the pod CIDR or lengthen the node mask size (fewer pods per node)", maskPath)
	case nodes > 0 && float64(capacity-int64(nodes)) < 0.2*float64(capacity):
		m.report(CodePodCIDRHeadroom, path, fmt.Sprintf("pod CIDR %s holds %d node ranges of /%d and %d nodes run pods: %d%% headroom", p, capacity, mask, nodes, (capacity-int64(nodes))*100/capacity),
			"leave at least 20 % of node ranges free for growth and replacements: widen the pod CIDR or lengthen the node mask size", maskPath)
	}
	if bits := p.Addr().BitLen() - mask; bits < 30 {
		// Kubernetes reserves no addresses in a node range, but the
		// network and broadcast addresses of an IPv4 range are not usable
		// by most CNI plugins' IPAM; an IPv6 range loses its first
		// (subnet-router anycast) address.
		usable := int(1<<bits) - 2
		if !p.Addr().Is4() {
			usable = int(1<<bits) - 1
		}
		// A maxPods the user wrote is reported where they wrote it; the
		// default is reported once, at the mask that makes it too many.
		defaulted := 0
		for _, src := range sortedKeys(maxPods) {
			if maxPods[src] <= usable {
				continue
			}
			if at := src + ".capacity.maxPods"; m.written(at) {
				m.report(CodeMaxPodsRange, at, fmt.Sprintf("maxPods %d exceeds the %d usable addresses of a /%d node range", maxPods[src], usable, mask),
					"lower maxPods or shorten the node mask size", maskPath)
			} else {
				defaulted = maxPods[src]
			}
		}
		if defaulted > 0 {
			m.report(CodeMaxPodsRange, maskPath, fmt.Sprintf("a /%d node range has %d usable addresses, fewer than the default maxPods %d", mask, usable, defaulted),
				"shorten the node mask size, or set capacity.maxPods on the nodes and pools")
		}
	}
}

// conflict orders the paths of two values that contradict each other so
// that the diagnostic is reported at one the user wrote: a defaulted value
// has no position of its own, and reporting at it would point at its
// nearest written ancestor, or at the package clause. The other path is
// returned as a further position only when written, for the same reason.
func (m *model) conflict(at, other string) (string, []string) {
	if !m.written(at) && m.written(other) {
		at, other = other, at
	}
	if !m.written(other) {
		return at, nil
	}
	return at, []string{other}
}

func isVIP(r namedRange) bool     { return r.path == "controlPlane.endpoint.address" }
func isNodeNet(r namedRange) bool { return len(r.path) > 14 && r.path[:14] == "network.nodes[" }
