package compare

import (
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/plan"
	"github.com/kcompile/kcompile/review"
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
	var head compiled
	in.then = func(i int, c compiled) error {
		if i == 1 {
			head = c
		}
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
	// Plan checks several states at once.
	var mu sync.Mutex
	checked := map[string]diag.List{}
	check := func(data map[string]any, tolerate []string) diag.List {
		key, err := json.Marshal([]any{data, tolerate})
		if err != nil {
			return diag.List{{Code: compiler.CodeInternal, Severity: diag.Error, Message: "internal error: a state is not data: " + err.Error()}}
		}
		mu.Lock()
		d, ok := checked[string(key)]
		mu.Unlock()
		if ok {
			return d
		}
		src, err := compiler.StateSource(compiler.Source{Dir: dir, Policies: in.Policies, Profile: in.Profile, Bound: in.Bound, Tolerate: tolerate}, data)
		if err != nil {
			return diag.List{{Code: compiler.CodeInternal, Severity: diag.Error, Message: "internal error: " + err.Error()}}
		}
		_, diags := compiler.Compile(src)
		mu.Lock()
		checked[string(key)] = diags
		mu.Unlock()
		return diags
	}
	// A state is built as NEW is (the same bundle and clock), and
	// compared with it as diff compares.
	since := func(data map[string]any, tolerate []string) (map[string][]string, error) {
		src, err := compiler.StateSource(compiler.Source{Dir: dir, Bound: in.Bound, Tolerate: tolerate}, data)
		if err != nil {
			return nil, err
		}
		out, err := pipeline.Run(pipeline.Input{Source: src, Bundle: head.bundle, Now: in.Now, Issue: true, Targets: in.Targets})
		if err != nil {
			return nil, err
		}
		if out.Diagnostics.HasErrors() {
			return nil, &Problems{Diagnostics: out.Diagnostics, Msg: "a state of the plan does not build"}
		}
		c := review.Compiled{Cluster: out.Cluster, Material: out.Material, Diagnostics: out.Diagnostics}
		for _, t := range in.Targets {
			c.Trees = append(c.Trees, review.NamedTree{Name: string(t), Tree: out.Trees[t]})
		}
		side, err := review.SideOf("state", c, func(l diag.List) diag.List { return l })
		if err != nil {
			return nil, err
		}
		units := map[string][]string{}
		for _, n := range in.compare(side, head.Side).Nodes {
			units[n.Node] = append(slices.Clone(n.Restarts), n.Starts...)
		}
		return units, nil
	}
	return plan.Make(plan.Input{Old: sides[0], New: sides[1], Report: r, Via: via, Check: check, Since: since})
}
