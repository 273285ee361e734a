package issue_test

import (
	"testing"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/pipeline/issue"
)

func TestRun(t *testing.T) {
	b := fixture.Bundle(t)
	src := compiler.Source{Dir: fixture.Path("examples/ha-stacked")}

	checked, err := issue.Run(issue.Input{Source: src, Bundle: b, Now: b.Epoch})
	if err != nil || checked.Cluster == nil || checked.Material != nil || checked.Diagnostics.HasErrors() {
		t.Fatalf("a check alone: cluster %v, material %v, %v, %v", checked.Cluster != nil, checked.Material != nil, checked.Diagnostics, err)
	}

	all, err := issue.Run(issue.Input{Source: src, Bundle: b, Now: b.Epoch, Issue: true})
	if err != nil || all.Material == nil {
		t.Fatalf("issuing: %v, %v", all.Diagnostics, err)
	}
	if got, want := len(all.Material.Leaves), len(pki.Catalogue(all.Cluster)); got != want {
		t.Errorf("issued %d certificates, the catalogue has %d", got, want)
	}

	etcdOnly := func(c pki.Cert) bool { return c.CA == pki.EtcdCA }
	some, err := issue.Run(issue.Input{Source: src, Bundle: b, Now: b.Epoch, Issue: true, Keep: etcdOnly})
	if err != nil || some.Material == nil {
		t.Fatalf("issuing a subset: %v, %v", some.Diagnostics, err)
	}
	if len(some.Material.Leaves) == 0 || len(some.Material.Leaves) >= len(all.Material.Leaves) {
		t.Errorf("Keep kept %d of %d certificates", len(some.Material.Leaves), len(all.Material.Leaves))
	}
	for _, c := range some.Material.Leaves {
		if c.CA != pki.EtcdCA {
			t.Errorf("%s, of the %s CA, was issued though Keep refuses it", c.ID, c.CA)
		}
	}

	// A clock past the CAs' validity stops issuance with the bundle's
	// own diagnostic, and nothing is issued.
	late, err := issue.Run(issue.Input{Source: src, Bundle: b, Now: b.Epoch.AddDate(40, 0, 0), Issue: true})
	if err != nil || late.Material != nil || !late.Diagnostics.HasErrors() {
		t.Errorf("an expired bundle: material %v, %v, %v", late.Material != nil, late.Diagnostics, err)
	}
}
