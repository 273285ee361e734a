package compiler

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kcompile/kcompile/compiler/diag"
)

const (
	CodeClusterName  = "KC0101"
	CodeNodeName     = "KC0102"
	CodeDupName      = "KC0103"
	CodeDupAddress   = "KC0104"
	CodeDupMAC       = "KC0105"
	CodePoolPattern  = "KC0106"
	CodePoolMACs     = "KC0107"
	CodeLabelInvalid = "KC0108"
)

func namesFamily() family {
	return family{name: "names", check: checkNames, rules: []diag.Rule{
		rule(CodeClusterName, diag.Error, "the cluster name is not a DNS-1123 label"),
		rule(CodeNodeName, diag.Error, "a node name is not a DNS-1123 subdomain"),
		rule(CodeDupName, diag.Error, "two nodes (control plane, etcd, workers, pools) have the same name"),
		rule(CodeDupAddress, diag.Error, "two nodes have the same address"),
		rule(CodeDupMAC, diag.Error, "two nodes have the same MAC address"),
		rule(CodePoolPattern, diag.Error, "a worker pool's name pattern does not have exactly one integer verb"),
		rule(CodePoolMACs, diag.Error, "a worker pool lists a different number of MAC addresses than it has nodes"),
		rule(CodeLabelInvalid, diag.Error, "a node label or taint key is not a valid Kubernetes qualified name"),
	}}
}

// The names Kubernetes itself validates are held to its own validators,
// so that kcompile accepts exactly what the API server will.

// isDNSLabel reports whether s is a DNS-1123 label.
func isDNSLabel(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }

// isDNSSubdomain reports whether s is a DNS-1123 subdomain.
func isDNSSubdomain(s string) bool { return len(validation.IsDNS1123Subdomain(s)) == 0 }

// isQualifiedName reports whether s is a Kubernetes label key: an optional
// DNS subdomain prefix and a name of at most 63 characters.
func isQualifiedName(s string) bool { return len(validation.IsQualifiedName(s)) == 0 }

// reportName reports a problem with a node's name at the key of a node
// written one by one, or at the value of a pool's name pattern.
func (m *model) reportName(code string, n *mnode, msg, hint string, more ...string) {
	if n.pool == "" {
		m.reportKey(code, namePath(n), msg, hint, more...)
		return
	}
	m.report(code, namePath(n), msg, hint, more...)
}

// namePath is the spec path that gives a node its name: the key of a node
// written one by one (it has no name field), or a pool's namePattern.
func namePath(n *mnode) string {
	if n.pool == "" {
		return n.path
	}
	return n.fieldPath("name")
}

func checkNames(m *model) {
	if !isDNSLabel(m.spec.Name) {
		m.report(CodeClusterName, "name", fmt.Sprintf("cluster name %s is not a DNS-1123 label", diag.Quote(m.spec.Name)),
			"use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit")
	}
	// Pool nodes share one source, so each pool is reported once per rule
	// and pair of sources, not once per node.
	first := onceSet{}.first
	names := map[string]*mnode{}
	// addrs remembers the field too: the earlier use of an address may be
	// a node's secondary address.
	type addrUse struct {
		n     *mnode
		field string
	}
	addrs := map[string]addrUse{}
	macs := map[string]*mnode{}
	for _, n := range m.nodes {
		if !isDNSSubdomain(n.name) && first(CodeNodeName+n.path) {
			m.reportName(CodeNodeName, n, fmt.Sprintf("node name %s is not a DNS-1123 subdomain", diag.Quote(n.name)),
				"use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit")
		}
		if o, dup := names[n.name]; dup {
			if first(CodeDupName + o.path + n.path) {
				m.reportName(CodeDupName, n, fmt.Sprintf("node name %s is used twice (also at %s)", diag.Quote(n.name), o.path),
					"rename one of the nodes; every machine needs a unique name", namePath(o))
			}
		} else {
			names[n.name] = n
		}
		for i, a := range n.addrs {
			field := []string{"address", "secondaryAddress"}[min(i, 1)]
			key := a.String()
			if o, dup := addrs[key]; dup && o.n != n {
				if first(CodeDupAddress + o.n.path + n.path) {
					m.report(CodeDupAddress, n.fieldPath(field), fmt.Sprintf("address %s of node %s is also the address of node %s", a, n.name, o.n.name),
						"give every node its own address", o.n.fieldPath(o.field))
				}
			} else {
				addrs[key] = addrUse{n, field}
			}
		}
		if n.spec.MAC != "" {
			key := strings.ToLower(n.spec.MAC)
			if o, dup := macs[key]; dup {
				if first(CodeDupMAC + o.path + n.path) {
					m.report(CodeDupMAC, n.fieldPath("mac"), fmt.Sprintf("MAC address %s of node %s is also the MAC of node %s", n.spec.MAC, n.name, o.name),
						"every machine has its own hardware address; check for a copy-paste mistake", o.fieldPath("mac"))
				}
			} else {
				macs[key] = n
			}
		}
		for _, k := range sortedKeys(n.spec.Labels) {
			if !isQualifiedName(k) && first(CodeLabelInvalid+n.path+k) {
				m.reportKey(CodeLabelInvalid, n.fieldPath("labels."+quoteLabel(k)), fmt.Sprintf("label key %s is not a valid Kubernetes label key", diag.Quote(k)),
					`use an optional DNS prefix and a name of letters, digits, '-', '_' and '.', such as "example.com/tier"`)
			}
		}
		for i, t := range n.spec.Taints {
			if !isQualifiedName(t.Key) && first(CodeLabelInvalid+n.path+t.Key) {
				m.report(CodeLabelInvalid, n.fieldPath(fmt.Sprintf("taints[%d].key", i)), fmt.Sprintf("taint key %s is not a valid Kubernetes taint key", diag.Quote(t.Key)),
					`use an optional DNS prefix and a name of letters, digits, '-', '_' and '.', such as "dedicated"`)
			}
		}
	}
}
