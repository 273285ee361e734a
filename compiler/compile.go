// Package compiler turns a CUE cluster specification into an ir.Cluster:
// load (CUE package unified with the schema) → check (semantic checks, one
// file per family) → lower (typed, ordered IR with provenance). All
// problems are returned as diagnostics; nothing here prints or exits.
package compiler

import (
	"cuelang.org/go/cue/cuecontext"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

// Compile loads, checks and lowers the spec at src. The cluster is nil
// when any diagnostic is an error; warnings come back with a cluster. The
// diagnostics are sorted and de-duplicated.
func Compile(src Source) (*ir.Cluster, diag.List) {
	ctx := cuecontext.New()
	l, diags := loadSpec(ctx, src)
	if diags.HasErrors() {
		return nil, diags.Sorted()
	}
	m, diags := newModel(l)
	if diags.HasErrors() {
		return nil, diags.Sorted()
	}
	m.profile = src.Profile
	for _, f := range families() {
		f.check(m)
	}
	if m.diags.HasErrors() {
		return nil, m.diags.Sorted()
	}
	c := lower(m)
	if len(src.Policies) > 0 {
		m.diags = append(m.diags, checkPolicies(ctx, l, m, c, src.Policies)...)
	}
	return c, m.diags.Sorted()
}
