// Package targets holds what every compilation target shares: the Tree a
// target renders into (sorted paths, contents and modes, nothing on disk)
// and what the node-config targets share of checking it. Putting a tree
// on disk is internal/writer's.
package targets

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
)

// File is one file of a tree.
type File struct {
	// Path is slash-separated and relative, e.g.
	// "nodes/cp1/etc/kubernetes/pki/ca.crt".
	Path string
	Data []byte
	Mode fs.FileMode
}

// SplitNodes parts a tree into the cluster's files, as a tree of their
// own, and each node's files by node name, with their paths on the node
// ("/etc/..."): what a node-config target packs.
func SplitNodes(t *Tree) (*Tree, map[string][]File, error) {
	cluster := NewTree()
	perNode := map[string][]File{}
	for _, f := range t.Files() {
		if node, p, ok := layout.SplitTree(f.Path); ok {
			f.Path = layout.Abs(p)
			perNode[node] = append(perNode[node], f)
			continue
		}
		if err := cluster.Add(f.Path, f.Data, f.Mode); err != nil {
			return nil, nil, err
		}
	}
	return cluster, perNode, nil
}

// NodeSize is the size of one node's config (user-data, Ignition).
type NodeSize struct {
	Node  string
	Bytes int
}

// Sizes are the sizes of file (a node-relative path) in the node trees
// of tree, for the nodes of c that have one (has), in node order: a
// node-config target's sizes, which the checks compare with the limits.
func Sizes(c *ir.Cluster, tree *Tree, file string, has func(ir.Node) bool) []NodeSize {
	var out []NodeSize
	for _, n := range c.Nodes {
		if has(n) {
			f, _ := tree.Get(layout.NodeTree(n.Name, file))
			out = append(out, NodeSize{Node: n.Name, Bytes: len(f.Data)})
		}
	}
	return out
}

// Decoded is a node config (cloud-init user-data, an Ignition config)
// read back into what it configures.
type Decoded struct {
	// Files are what it writes, by path on the node, with their contents
	// decoded.
	Files map[string]File
	// Rest is the rest of the config, without the files, with sorted
	// keys: two configs that configure the same compare equal.
	Rest []byte
}

// Tree is an in-memory file tree.
type Tree struct {
	files map[string]File
	// dirs are the directories the files imply.
	dirs map[string]bool
}

// NewTree returns an empty tree.
func NewTree() *Tree { return &Tree{files: map[string]File{}, dirs: map[string]bool{}} }

// Add puts a file into the tree. Paths must be clean, relative and
// unique; a clash is a compiler bug and is reported as an error.
func (t *Tree) Add(p string, data []byte, mode fs.FileMode) error {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || strings.HasPrefix(p, "../") || p == ".." {
		return fmt.Errorf("invalid tree path %q", p)
	}
	if _, dup := t.files[p]; dup {
		return fmt.Errorf("two files at %s", p)
	}
	if t.dirs[p] {
		return fmt.Errorf("%s is both a file and a directory", p)
	}
	for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
		if _, clash := t.files[dir]; clash {
			return fmt.Errorf("%s is both a file and a directory", dir)
		}
	}
	for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
		t.dirs[dir] = true
	}
	t.files[p] = File{Path: p, Data: data, Mode: mode.Perm()}
	return nil
}

// Files returns the files sorted by path.
func (t *Tree) Files() []File {
	out := make([]File, 0, len(t.files))
	for _, f := range t.files {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Get returns the file at p.
func (t *Tree) Get(p string) (File, bool) {
	f, ok := t.files[p]
	return f, ok
}

// Len is the number of files.
func (t *Tree) Len() int { return len(t.files) }
