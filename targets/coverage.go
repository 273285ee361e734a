package targets

import (
	"fmt"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

// CheckCoverage reports, as a warning with code, the nodes a node-config
// target leaves out (those for which out is true), at the spec fields
// that chose their operating system.
//
// When the target would configure no node at all, the same list is
// reported as an error under noneCode: a build that writes no node
// configuration is a mistake, not a success with a remark.
func CheckCoverage(c *ir.Cluster, code, noneCode string, out func(ir.Node) bool, why, hint string) diag.List {
	var names []string
	var ps []diag.Pos
	seen := map[string]bool{}
	path := ""
	for _, n := range c.Nodes {
		if !out(n) {
			continue
		}
		names = append(names, fmt.Sprintf("%s (%s)", n.Name, n.OS.Name()))
		if path == "" {
			path = n.OSPath
		}
		if seen[n.OSPath] {
			continue
		}
		seen[n.OSPath] = true
		if p, ok := c.Position(n.OSPath); ok {
			ps = append(ps, diag.Pos{File: p.File, Line: p.Line, Column: p.Column})
		}
	}
	if len(names) == 0 {
		return nil
	}
	all := len(names) == len(c.Nodes)
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	if all {
		return diag.List{{Code: noneCode, Severity: diag.Error, Path: path, Positions: ps,
			Message: fmt.Sprintf("the target would write no node configuration: all nodes, %s, are %s", strings.Join(names, ", "), why), Hint: hint}}
	}
	return diag.List{{Code: code, Severity: diag.Warning, Path: path, Positions: ps,
		Message: fmt.Sprintf("%s are %s", strings.Join(names, ", "), why), Hint: hint}}
}
