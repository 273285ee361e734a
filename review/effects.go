package review

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kcompile/kcompile/compiler/ir"
)

// Facts are the settings of one side that a running cluster keeps as
// they were when a node registered, a member joined or an object was
// made: restarting a component with the new files does not apply them.
type Facts struct {
	// Nodes are each node's labels and taints as its kubelet registers
	// them (--node-labels, --register-with-taints).
	Nodes map[string]NodeFacts
	// ServiceCIDRs and PodCIDRs are the cluster's ranges; Domain its DNS
	// domain.
	ServiceCIDRs, PodCIDRs []string
	Domain                 string
	// CAs are the fingerprints of the cluster's CAs and service-account
	// key, by name ("kubernetes", "etcd", "front-proxy",
	// "service-account").
	CAs map[string]string
}

// NodeFacts are a node's registered labels ("key=value") and taints
// ("key=value:Effect").
type NodeFacts struct {
	Labels, Taints []string
}

// Step is what a change needs beyond the restarts the summary lists,
// for a setting whose restart does not apply it, in the order to take
// the steps.
type Step struct {
	// Kind says what the step changes, for a caller that places steps
	// (kcompile plan); the text says it to a person.
	Kind    StepKind `json:"-"`
	Setting string   `json:"setting"`
	Why     string   `json:"why"`
	Actions []string `json:"actions"`
	// Nodes are the nodes the step changes, where it changes nodes.
	Nodes []string `json:"-"`
}

// StepKind is what a Step changes.
type StepKind string

const (
	StepTrust          StepKind = "trust"
	StepEtcdMembership StepKind = "etcd-membership"
	StepServiceCIDR    StepKind = "service-cidr"
	StepPodCIDR        StepKind = "pod-cidr"
	StepDomain         StepKind = "domain"
	StepNodeLabels     StepKind = "node-labels"
	// StepTokens: the service-account signing key changes within a
	// rotation; the pods' tokens must be of the new key before the
	// rotation ends.
	StepTokens StepKind = "tokens"
	// StepRootCA: the cluster CA's trust bundle gains a CA within a
	// rotation; every pod must hold it (its service-account volume's
	// ca.crt, which a client loads when it starts) before any API server
	// serves a certificate of that CA.
	StepRootCA StepKind = "root-ca"
)

// effects are the steps a change needs, in order: trust first (a new
// CA), then etcd's membership, the ranges and the domain, and last the
// Node objects, once their kubelets run the new configuration.
func effects(a, b Side, etcd *EtcdChange) []Step {
	var out, tokens []Step
	fa, fb := a.Facts, b.Facts
	if fa != nil && fb != nil {
		var trust []Step
		trust, tokens = caSteps(fa, fb)
		out = append(out, trust...)
	}
	if etcd != nil && etcd.Changed() {
		out = append(out, etcdSteps(a.Etcd, b.Etcd, etcd)...)
	}
	if fa == nil || fb == nil {
		return out
	}
	if !slices.Equal(fa.ServiceCIDRs, fb.ServiceCIDRs) {
		out = append(out, Step{
			Kind:    StepServiceCIDR,
			Setting: fmt.Sprintf("service CIDR %s → %s", strings.Join(fa.ServiceCIDRs, ","), strings.Join(fb.ServiceCIDRs, ",")),
			Why:     "the API servers' --service-cluster-ip-range allocates new Services only: every existing Service, the kubernetes Service and CoreDNS's among them, keeps its old ClusterIP",
			Actions: append(keepServiceSANs(fa.ServiceCIDRs, fb.ServiceCIDRs), []string{
				"create a ServiceCIDR object for the new range (networking.k8s.io/v1) before the API servers restart",
				"restart the API servers and controller-managers with the new range, then the kubelets (their clusterDNS is the new DNS address)",
				"move every Service outside the new range into it, CoreDNS's at the new DNS address and the kubernetes Service at the new range's first: kcompile apply does it with each name answered throughout (plan.md, the service move); by hand, each deleted and applied again goes unanswered in between",
				"delete the old ServiceCIDR once no Service uses it, then restart every pod so that it reads the new DNS address",
			}...),
		})
	}
	if !slices.Equal(fa.PodCIDRs, fb.PodCIDRs) {
		out = append(out, Step{
			Kind:    StepPodCIDR,
			Setting: fmt.Sprintf("pod CIDR %s → %s", strings.Join(fa.PodCIDRs, ","), strings.Join(fb.PodCIDRs, ",")),
			Why:     "a Node's spec.podCIDR is set once, when it registers, and cannot change: a restarted kubelet keeps the old range",
			Actions: []string{
				"restart the controller-managers with the new --cluster-cidr",
				"for each node, one at a time: kubectl drain NODE --ignore-daemonsets; kubectl delete node NODE; restart its kubelet (it registers again, with a range from the new CIDR); kubectl uncordon NODE",
			},
		})
	}
	if fa.Domain != fb.Domain {
		out = append(out, Step{
			Kind:    StepDomain,
			Setting: fmt.Sprintf("cluster domain %s → %s", fa.Domain, fb.Domain),
			Why:     "a pod's resolv.conf is written when it starts: running pods keep searching the old domain",
			Actions: []string{"once CoreDNS and the kubelets run the new configuration, restart every pod (kubectl rollout restart for each workload)"},
		})
	}
	return append(append(out, nodeSteps(fa, fb)...), tokens...)
}

// caSteps: a new CA means a rolling re-issue, with both CAs trusted
// while it lasts; a new service-account key invalidates every token.
func caSteps(fa, fb *Facts) (out, tokens []Step) {
	for _, name := range unionKeys(fa.CAs, fb.CAs) {
		old, inA := fa.CAs[name]
		new, inB := fb.CAs[name]
		if !inA || !inB || old == new {
			continue
		}
		// A stage of a rotation (kcompile secrets rotate) keeps a CA or
		// key trusted on both sides, and is proven to keep every flow
		// working: the restarts take it.
		if slices.ContainsFunc(strings.Split(old, "+"), func(h string) bool { return slices.Contains(strings.Split(new, "+"), h) }) {
			added := slices.ContainsFunc(strings.Split(new, "+"), func(h string) bool { return !slices.Contains(strings.Split(old, "+"), h) })
			if name == "kubernetes" && added {
				tokens = append(tokens, Step{
					Kind:    StepRootCA,
					Setting: "pods' cluster CA bundle",
					Why:     "a pod's service-account volume carries the cluster's CA bundle (kube-root-ca.crt), which a client such as client-go loads once, when it starts: a pod started before trusts the old CA alone, and loses the API once an API server serves a certificate of the new one",
					Actions: []string{"once every controller-manager publishes the new bundle in every namespace's kube-root-ca.crt, restart every pod started before (kubectl rollout restart of each workload)"},
				})
			}
			// But the pods hold tokens of the key that signed when they
			// started, which verify only until the rotation ends.
			if name == "service-account" && strings.Split(old, "+")[0] != strings.Split(new, "+")[0] {
				tokens = append(tokens, Step{
					Kind:    StepTokens,
					Setting: "service-account tokens",
					Why:     "the API servers sign tokens with the new key from this stage on; a pod's token is of the key that signed when it started, and verifies only until the rotation drops that key",
					Actions: []string{"once every API server signs with the new key, restart every pod started before (kubectl rollout restart of each workload), so that its token is of the new key"},
				})
			}
			continue
		}
		if name == "service-account" {
			out = append(out, Step{
				Kind:    StepTrust,
				Setting: "service-account signing key " + old + " → " + new,
				Why:     "tokens signed with the old key stop verifying as soon as the API servers drop it",
				Actions: []string{
					"rotate it in stages instead: kcompile secrets rotate --ca service-account, then --next twice, building and rolling out each stage (both public keys are trusted while tokens of either are in use)",
				},
			})
			continue
		}
		out = append(out, Step{
			Kind:    StepTrust,
			Setting: name + " CA " + old + " → " + new,
			Why:     "a certificate of the new CA is refused by everything that still trusts the old one alone: restarting components one at a time with the new files breaks every connection between the two halves",
			Actions: []string{
				"rotate it in stages instead: kcompile secrets rotate --ca " + map[string]string{"kubernetes": "ca", "etcd": "etcd-ca", "front-proxy": "front-proxy-ca"}[name] + ", then --next twice, building and rolling out each stage: every node trusts both CAs, then every certificate is re-issued by the new one, then the old one is dropped",
			},
		})
	}
	return out, tokens
}

// etcdSteps are the membership commands, one member at a time, added
// members before removed ones so that quorum never shrinks on the way.
func etcdSteps(a, b []EtcdMember, e *EtcdChange) []Step {
	byName := func(ms []EtcdMember, name string) EtcdMember {
		for _, m := range ms {
			if m.Name == name {
				return m
			}
		}
		return EtcdMember{}
	}
	var actions []string
	// The membership as the steps change it: a joining member must be
	// told exactly the members the cluster has when it joins.
	current := slices.Clone(a)
	for _, m := range e.Moved {
		name, _, _ := strings.Cut(m, ":")
		nm := byName(b, name)
		actions = append(actions,
			fmt.Sprintf("etcdctl member update <ID of %s> --peer-urls=%s, then restart etcd on %s at its new address and wait until it is healthy", name, nm.PeerURL, nm.Node))
		for i := range current {
			if current[i].Name == name {
				current[i] = nm
			}
		}
	}
	for _, name := range e.Added {
		nm := byName(b, name)
		current = append(current, nm)
		initial := make([]string, len(current))
		for i, m := range current {
			initial[i] = m.Name + "=" + m.PeerURL
		}
		actions = append(actions,
			fmt.Sprintf("etcdctl member add %s --peer-urls=%s, then start etcd on %s with --initial-cluster-state=existing (its unit says new, which only a first cluster may) and --initial-cluster=%s (the members once it is added: its unit lists the final ones, and etcd refuses a list that differs from the members it has, \"member count is unequal\"), and wait until it is healthy",
				name, nm.PeerURL, nm.Node, strings.Join(initial, ",")))
	}
	for _, name := range e.Removed {
		om := byName(a, name)
		actions = append(actions,
			fmt.Sprintf("etcdctl member remove <ID of %s>, then stop etcd on %s", name, om.Node))
	}
	return []Step{{
		Kind:    StepEtcdMembership,
		Setting: "etcd membership: " + e.Summary(),
		Why:     "--initial-cluster is read only when a member's data directory is empty: existing members keep the membership they have, and a restart changes nothing",
		Actions: append(actions, "restart the API servers, whose --etcd-servers list changes, one at a time"),
	}}
}

// kubeletReappliedLabels are the labels a kubelet sets again on its
// existing Node at every start, from its --node-labels among them
// (updateDefaultLabels in the kubelet's node status code): a new value
// of one takes effect with the kubelet's restart. It never removes one.
var kubeletReappliedLabels = []string{
	corev1.LabelHostname,
	corev1.LabelTopologyZone, corev1.LabelTopologyRegion,
	corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion,
	corev1.LabelInstanceTypeStable, corev1.LabelInstanceType,
	corev1.LabelOSStable, corev1.LabelArchStable, corev1.LabelWindowsBuild,
	"beta.kubernetes.io/os", "beta.kubernetes.io/arch",
}

// Relabel is what a registered Node needs, beyond its kubelet's
// restart, to carry a node's new labels and taints.
type Relabel struct {
	// Set are labels ("key=value") to set, Unset the keys of labels to
	// remove.
	Set, Unset []string
	// Taint are taints ("key=value:Effect") to set, each replacing one
	// of its key and effect; Untaint ("key:Effect") are taints to
	// remove.
	Taint, Untaint []string
}

// Empty says the Node needs nothing.
func (c Relabel) Empty() bool {
	return len(c.Set)+len(c.Unset)+len(c.Taint)+len(c.Untaint) == 0
}

// TaintKeyEffect is what names a taint on a Node: its key and effect.
func TaintKeyEffect(t string) string {
	key, rest, _ := strings.Cut(t, "=")
	_, effect, _ := strings.Cut(rest, ":")
	return key + ":" + effect
}

// NodeFactsOf are node n's labels and taints as its kubelet registers
// them.
func NodeFactsOf(n ir.Node) NodeFacts {
	var nf NodeFacts
	for _, l := range n.Labels {
		nf.Labels = append(nf.Labels, l.Key+"="+l.Value)
	}
	for _, t := range n.Taints {
		nf.Taints = append(nf.Taints, t.Key+"="+t.Value+":"+t.Effect)
	}
	return nf
}

// RelabelOf is what a Node registered with old needs to carry new:
// labels a restarted kubelet does not set again, every removal, and
// every new taint.
func RelabelOf(old, new NodeFacts) Relabel {
	var c Relabel
	for _, l := range new.Labels {
		key, _, _ := strings.Cut(l, "=")
		if !slices.Contains(old.Labels, l) && !slices.Contains(kubeletReappliedLabels, key) {
			c.Set = append(c.Set, l)
		}
	}
	for _, l := range old.Labels {
		key, _, _ := strings.Cut(l, "=")
		if !slices.ContainsFunc(new.Labels, func(x string) bool { return strings.HasPrefix(x, key+"=") }) {
			c.Unset = append(c.Unset, key)
		}
	}
	for _, t := range new.Taints {
		if !slices.Contains(old.Taints, t) {
			c.Taint = append(c.Taint, t)
		}
	}
	for _, t := range old.Taints {
		if !slices.ContainsFunc(new.Taints, func(x string) bool { return TaintKeyEffect(x) == TaintKeyEffect(t) }) {
			c.Untaint = append(c.Untaint, TaintKeyEffect(t))
		}
	}
	return c
}

// nodeSteps relabel and retaint the Nodes that exist on both sides: the
// kubelet sets its labels and taints when it registers, and at a restart
// only sets again the well-known labels among them.
func nodeSteps(fa, fb *Facts) []Step {
	var actions []string
	var nodes []string
	for _, n := range unionKeys(fa.Nodes, fb.Nodes) {
		old, inA := fa.Nodes[n]
		new, inB := fb.Nodes[n]
		if !inA || !inB {
			continue
		}
		c := RelabelOf(old, new)
		if c.Empty() {
			continue
		}
		nodes = append(nodes, n)
		label := slices.Clone(c.Set)
		for _, k := range c.Unset {
			label = append(label, k+"-")
		}
		if len(label) > 0 {
			actions = append(actions, "kubectl label node "+n+" --overwrite "+strings.Join(label, " "))
		}
		// A taint whose key and effect stay is replaced by --overwrite;
		// kubectl refuses to set and remove the same one in one command.
		taint := slices.Clone(c.Taint)
		for _, t := range c.Untaint {
			taint = append(taint, t+"-")
		}
		if len(taint) > 0 {
			actions = append(actions, "kubectl taint node "+n+" --overwrite "+strings.Join(taint, " "))
		}
	}
	if len(actions) == 0 {
		return nil
	}
	return []Step{{
		Kind:    StepNodeLabels,
		Nodes:   nodes,
		Setting: "labels and taints of " + strings.Join(nodes, ", "),
		Why:     "a kubelet sets its Node's labels and taints when it registers; restarted with new --node-labels or --register-with-taints it sets again only the well-known labels (zone, region, hostname, instance type, OS, architecture) and removes none, so the others are set and every removal is made through the API",
		Actions: append([]string{"restart the kubelets with the new configuration (the summary's restarts), then:"}, actions...),
	}}
}

// keepServiceSANs is the first action of a service CIDR move: the API
// servers' certificates of the new side cover the kubernetes Service's
// new address only, while every running pod reaches the API at the old
// one until it restarts.
func keepServiceSANs(old, new []string) []string {
	var keep []string
	for _, c := range old {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			continue
		}
		ip := p.Masked().Addr().Next().String()
		if !slices.Contains(new, c) {
			keep = append(keep, strconv.Quote(ip))
		}
	}
	if len(keep) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("keep the kubernetes Service's old address in the API servers' certificates, which the new side drops while every running pod still reaches the API there: add %s to controlPlane.apiServer.extraSANs in this change, and remove it in a later one, once every pod has restarted", strings.Join(keep, ", "))}
}
