package compare

import (
	"encoding/json"
	"errors"
	"slices"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/plan"
)

// Plan orders the change from the first side to the second
// (plan.Make): each side compiled as diff compiles it, and read as data;
// each state between them compiled and checked as a spec, with the
// policies and profile of in.
func Plan(in Input, via map[int]string) (*plan.Plan, error) {
	if in.Golden {
		return nil, errors.New("plan takes OLD NEW (two spec directories) or --git REV1..REV2 [DIR], not a golden directory")
	}
	in.Command = "plan"
	in.Targets = []pipeline.Target{pipeline.Systemd}
	var sides [2]plan.Side
	in.then = func(i int, c compiled) error {
		data, diags := compiler.Concrete(compiler.Source{Dir: c.Dir, Bound: in.Bound})
		if diags.HasErrors() {
			return &Problems{Diagnostics: diags, Msg: c.Label + ": the spec does not evaluate to data"}
		}
		sides[i] = plan.Side{Label: c.Label, Cluster: c.Cluster, Data: data, Diagnostics: append(slices.Clone(c.Checks), c.Policies...)}
		return nil
	}
	r, err := Run(in)
	if err != nil {
		return nil, err
	}
	// A state is read from memory alone; the directory only places it
	// (its positions name StateFile there).
	dir := "."
	switch {
	case in.Git == "" && len(in.Args) == 2:
		dir = in.Args[1]
	case len(in.Args) == 1:
		dir = in.Args[0]
	}
	checked := map[string]diag.List{}
	check := func(data map[string]any, tolerate []string) diag.List {
		key, err := json.Marshal([]any{data, tolerate})
		if err != nil {
			return diag.List{{Code: compiler.CodeInternal, Severity: diag.Error, Message: "internal error: a state is not data: " + err.Error()}}
		}
		if d, ok := checked[string(key)]; ok {
			return d
		}
		src, err := compiler.StateSource(compiler.Source{Dir: dir, Policies: in.Policies, Profile: in.Profile, Bound: in.Bound, Tolerate: tolerate}, data)
		if err != nil {
			return diag.List{{Code: compiler.CodeInternal, Severity: diag.Error, Message: "internal error: " + err.Error()}}
		}
		_, diags := compiler.Compile(src)
		checked[string(key)] = diags
		return diags
	}
	return plan.Make(plan.Input{Old: sides[0], New: sides[1], Report: r, Via: via, Check: check})
}
