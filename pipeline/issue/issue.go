// Package issue is the pipeline's first half: compile a spec, check it
// against the secrets bundle and issue its PKI. pipeline.Run builds the
// targets on what it returns; the renderers' own tests get their
// clusters and material from it too, since pipeline imports the
// renderers and their tests cannot import pipeline.
package issue

import (
	"fmt"
	"time"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
)

// Input is one compile and issuance.
type Input struct {
	Source compiler.Source
	// Bundle is the secrets bundle; without it the spec is only checked.
	Bundle *pki.Bundle
	// Now is the caller's clock, which the bundle's checks compare the
	// CAs' validity with.
	Now time.Time
	// Issue issues the PKI; otherwise the spec and bundle are only
	// checked.
	Issue bool
	// Keep keeps a certificate of the catalogue; nil keeps them all.
	Keep func(pki.Cert) bool
	// Scenario is a simulator scenario file, loaded against the compiled
	// cluster.
	Scenario string
	// Split, when set, takes out of the compile's diagnostics what must
	// not stop issuance (findings review compares); it returns what
	// stays.
	Split func(diag.List) diag.List
	// Stage is told each stage as it starts.
	Stage func(format string, args ...any)
}

// Result is what Run produced.
type Result struct {
	// Cluster is nil when the spec does not compile.
	Cluster *ir.Cluster
	// Material is nil unless Input.Issue and no diagnostic is an error.
	Material    *pki.Material
	Diagnostics diag.List
	Waivers     []compiler.Waiver
	Scenario    *ir.Scenario
}

// Run compiles in.Source, checks it against in.Bundle and issues the
// certificates in.Keep keeps. An error is a compiler bug: issued material
// that does not verify.
func Run(in Input) (Result, error) {
	var r Result
	if in.Stage != nil {
		in.Stage("compiling %s", in.Source.Dir)
	}
	c, diags, waivers := compiler.CompileWaivers(in.Source)
	r.Waivers = waivers
	if in.Split != nil {
		diags = in.Split(diags)
	}
	if c == nil {
		r.Diagnostics = diags
		return r, nil
	}
	r.Cluster = c
	if in.Scenario != "" {
		var d diag.List
		r.Scenario, d = compiler.LoadScenario(in.Scenario, c)
		diags = append(diags, d...)
	}
	diags = append(diags, pki.Check(c, in.Bundle, in.Now)...)
	r.Diagnostics = diags.Sorted()
	if diags.HasErrors() || in.Bundle == nil || !in.Issue {
		return r, nil
	}
	if in.Stage != nil {
		in.Stage("issuing the PKI of %d nodes", len(c.Nodes))
	}
	m, err := Material(c, in.Bundle, in.Keep)
	if err != nil {
		return r, fmt.Errorf("kcompile bug: %w", err)
	}
	r.Material = m
	return r, nil
}

// Material issues the certificates of c's catalogue that keep keeps (all
// when keep is nil), for a cluster Run compiled and checked or a
// runtime's placement of one.
func Material(c *ir.Cluster, b *pki.Bundle, keep func(pki.Cert) bool) (*pki.Material, error) {
	if keep == nil {
		return pki.Issue(c, b)
	}
	var certs []pki.Cert
	for _, cert := range pki.Catalogue(c) {
		if keep(cert) {
			certs = append(certs, cert)
		}
	}
	return pki.IssueCerts(c, b, certs)
}
