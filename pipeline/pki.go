package pipeline

import (
	"os"
	"path/filepath"
	"time"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
)

// Renewal is what Renew produced.
type Renewal struct {
	// Cluster is the compiled spec, nil when it has errors.
	Cluster *ir.Cluster
	// Bundle is the renewed copy of Input.Bundle, to be kept only when
	// no diagnostic is an error.
	Bundle *pki.Bundle
	// Diagnostics are the spec's and the renewal's: an epoch outside a
	// CA's validity, leaves that would outlive a CA.
	Diagnostics diag.List
}

// Renew compiles in.Source and moves in.Bundle's issuance epoch to
// epoch for that cluster, checked with in.Now before anything is
// written.
func Renew(in Input, epoch time.Time) Renewal {
	in.stage("compiling %s", in.Source.Dir)
	c, diags := compiler.Compile(in.Source)
	if c == nil {
		return Renewal{Diagnostics: diags}
	}
	renewed, d := in.Bundle.RenewFor(c, epoch, in.Now)
	return Renewal{Cluster: c, Bundle: renewed, Diagnostics: append(diags, d...).Sorted()}
}

// Verification is what Verify found.
type Verification struct {
	// Root is the PKI tree verified: the tree given, or its pki
	// directory when it holds the trees of kcompile build's directory.
	Root     string
	Problems []pki.Problem
	// Diagnostics are the spec's, when one was given; with an error
	// among them nothing was verified.
	Diagnostics diag.List
}

// Verify verifies a written tree: chains, key pairs, kubeconfigs and
// file modes, and with spec (a directory, or "") also that the tree has
// the certificates, SANs and servers of its topology. An error is one
// reading the tree, naming paths inside it.
func Verify(tree string, spec Source, now time.Time) (Verification, error) {
	v := Verification{Root: tree}
	if _, err := os.Stat(filepath.Join(tree, "nodes")); err != nil {
		if _, err := os.Stat(filepath.Join(tree, "pki", "nodes")); err == nil {
			v.Root = filepath.Join(tree, "pki")
		}
	}
	var c *ir.Cluster
	if spec.Dir != "" {
		if c, v.Diagnostics = compiler.Compile(spec); c == nil {
			return v, nil
		}
	}
	var err error
	v.Problems, err = pki.Verify(os.DirFS(v.Root), c, now)
	return v, err
}
