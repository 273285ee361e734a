// Package compiler turns a CUE cluster specification into an ir.Cluster:
// load (CUE package unified with the schema) → check (semantic checks, one
// file per family) → lower (typed, ordered IR with provenance). All
// problems are returned as diagnostics; nothing here prints or exits.
package compiler

import (
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

// Compile loads, checks and lowers the spec at src. The cluster is nil
// when any diagnostic is an error; warnings come back with a cluster. The
// diagnostics are sorted and de-duplicated.
func Compile(src Source) (*ir.Cluster, diag.List) {
	c, diags, _ := CompileWaivers(src)
	return c, diags
}
