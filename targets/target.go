package targets

import "github.com/kcompile/kcompile/compiler/pki"

// Target renders an issued cluster into a tree. Targets read the IR and
// the PKI material and nothing else: no CUE, no clock, no I/O.
type Target interface {
	// Name is the target's name on the command line and its directory
	// under OUT.
	Name() string
	// Build renders the tree. An error is a compiler bug: the spec was
	// checked before, so every value is valid here.
	Build(m *pki.Material) (*Tree, error)
}

// NodePath is where a node's root-relative file goes in a target's tree.
func NodePath(node, p string) string { return "nodes/" + node + "/" + p }

// ClusterPath is where a cluster-wide file goes in a target's tree.
func ClusterPath(p string) string { return "cluster/" + p }
