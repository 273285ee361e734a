package ir

import (
	"fmt"
	"slices"
	"strings"
)

// Pos is a position in a spec or schema file.
type Pos struct {
	File   string
	Line   int
	Column int
}

func (p Pos) String() string {
	if p.File == "" {
		return "-"
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// OriginKind says where an effective value came from.
type OriginKind string

const (
	// FromSpec values were written in the user's spec.
	FromSpec OriginKind = "spec"
	// FromDefault values come from a default in the schema.
	FromDefault OriginKind = "default"
	// FromDerived values are computed by kcompile from other values.
	FromDerived OriginKind = "derived"
)

// Origin is the provenance of one value.
type Origin struct {
	Kind OriginKind
	// Pos is the spec position (FromSpec), the schema position
	// (FromDefault) or the position of the main input (FromDerived).
	Pos Pos
	// From names the paths a derived value was computed from, and how.
	From string
}

func (o Origin) String() string {
	switch o.Kind {
	case FromSpec:
		return "spec " + o.Pos.String()
	case FromDefault:
		return "schema default " + o.Pos.String()
	}
	if o.Pos.File != "" {
		return fmt.Sprintf("derived from %s, %s", o.From, o.Pos)
	}
	return "derived from " + o.From
}

// Setting is one effective value of the cluster with its origin.
type Setting struct {
	// Path is the CUE-style path, for example "network.serviceCIDR" or
	// "nodes.w01.address" for a node expanded from a pool.
	Path string
	// Value is the value as JSON: a string is quoted, a number is not.
	Value  string
	Origin Origin
}

// Below reports whether path is prefix or lies below it.
func Below(path, prefix string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	if len(path) == len(prefix) {
		return true
	}
	next := path[len(prefix)]
	return next == '.' || next == '['
}

// Near names the paths one step below path's parent (the top-level
// sections for a path of one step), sorted, so that a path that matches
// nothing can be answered with the ones that exist.
func Near(settings []Setting, path string) []string {
	parent := ""
	if i := strings.LastIndex(path, "."); i >= 0 {
		parent = path[:i]
	}
	seen := map[string]bool{}
	var out []string
	for _, s := range settings {
		if parent != "" && !Below(s.Path, parent) {
			continue
		}
		rest := strings.TrimPrefix(strings.TrimPrefix(s.Path, parent), ".")
		if i := strings.IndexAny(rest, ".["); i >= 0 {
			rest = rest[:i]
		}
		full := rest
		if parent != "" {
			full = parent + "." + rest
		}
		if !seen[full] {
			seen[full] = true
			out = append(out, full)
		}
	}
	slices.Sort(out)
	return out
}
