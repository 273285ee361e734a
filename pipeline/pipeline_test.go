package pipeline

import (
	"bytes"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/targets"
)

var now = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

func example(name string) compiler.Source {
	return compiler.Source{Dir: fixture.Path("examples/" + name)}
}

// TestRunBuildsWhatIsAsked: a terraform build returns the module alone,
// serving byte for byte the cloud-init tree a cloud-init build returns,
// which packs the systemd tree a systemd build returns.
func TestRunBuildsWhatIsAsked(t *testing.T) {
	run := func(ts ...Target) *Output {
		out, err := Run(Input{Source: example("ha-stacked"), Bundle: fixture.Bundle(t), Now: now, Targets: ts})
		if err != nil {
			t.Fatal(err)
		}
		if out.Diagnostics.HasErrors() {
			t.Fatal(out.Diagnostics)
		}
		if got := slices.Sorted(maps.Keys(out.Trees)); !slices.Equal(got, slices.Sorted(slices.Values(ts))) {
			t.Fatalf("asked for %v, got %v", ts, got)
		}
		return out
	}
	tf := run(Terraform)
	ci := run(CloudInit)
	sd := run(Systemd)
	both := run(Systemd, CloudInit)
	same := func(a, b *targets.Tree, what string) {
		for _, f := range a.Files() {
			g, ok := b.Get(f.Path)
			if !ok || !bytes.Equal(f.Data, g.Data) || f.Mode != g.Mode {
				t.Errorf("%s: %s differs", what, f.Path)
			}
		}
	}
	same(sd.Trees[Systemd], both.Trees[Systemd], "systemd alone and with cloud-init")
	same(ci.Trees[CloudInit], both.Trees[CloudInit], "cloud-init alone and with systemd")
	for _, f := range tf.Trees[Terraform].Files() {
		if g, ok := ci.Trees[CloudInit].Get(f.Path); ok && !bytes.Equal(f.Data, g.Data) {
			t.Errorf("the module serves another %s than the cloud-init tree", f.Path)
		}
	}
	if len(ci.Sizes) != len(ci.Cluster.Nodes) {
		t.Errorf("%d sizes for %d nodes", len(ci.Sizes), len(ci.Cluster.Nodes))
	}
	pki := run(PKI)
	if _, ok := pki.Trees[PKI].Get("cluster/admin.conf"); !ok {
		t.Error("the pki tree has no admin.conf")
	}
}

// TestRunStopsAtErrors: without a bundle a spec is only checked; a spec
// with errors is neither issued nor built; a target whose own checks fail
// returns its diagnostics and no tree.
func TestRunStopsAtErrors(t *testing.T) {
	out, err := Run(Input{Source: example("ha-stacked"), Now: now, Targets: []Target{Systemd}})
	if err != nil || out.Material != nil || len(out.Trees) != 0 || out.Cluster == nil {
		t.Errorf("without a bundle: material %v, %d trees, %v", out.Material != nil, len(out.Trees), err)
	}
	bad := compiler.Source{Dir: t.TempDir(), Overlay: map[string][]byte{"c.cue": []byte(`package cluster
apiVersion: "kcompile.dev/v1alpha1"
name: "Bad_Name"
kubernetes: version: "1.37.2"
controlPlane: nodes: cp1: address: "10.0.0.11"
network: nodes: ["10.0.0.0/16"]
`)}}
	out, err = Run(Input{Source: bad, Bundle: fixture.Bundle(t), Now: now, Targets: []Target{Systemd}})
	if err != nil || out.Cluster != nil || len(out.Trees) != 0 || !out.Diagnostics.HasErrors() {
		t.Errorf("a bad spec: cluster %v, %d trees, %v", out.Cluster != nil, len(out.Trees), out.Diagnostics)
	}
	out, err = Run(Input{Source: example("single-node"), Bundle: fixture.Bundle(t), Now: now, Targets: []Target{Terraform}})
	if err != nil || len(out.Trees) != 0 || len(out.Diagnostics) == 0 || out.Diagnostics[0].Code != "KC1401" {
		t.Errorf("terraform without boot: %d trees, %v, %v", len(out.Trees), out.Diagnostics, err)
	}
	out, err = Run(Input{Source: example("ha-stacked"), Bundle: fixture.Bundle(t), Now: time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC), Targets: []Target{Systemd}})
	if err != nil || len(out.Trees) != 0 || !out.Diagnostics.HasErrors() {
		t.Errorf("expired CAs: %d trees, %v", len(out.Trees), out.Diagnostics)
	}
}

// TestRulesAreUnique: one table for every code.
func TestRulesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Rules() {
		if seen[r.Code] {
			t.Errorf("%s twice", r.Code)
		}
		seen[r.Code] = true
		if r.Family == "" || r.Summary == "" {
			t.Errorf("%s has no family or summary", r.Code)
		}
	}
}
