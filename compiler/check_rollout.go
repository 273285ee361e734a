package compiler

import (
	"fmt"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/diag"
)

const (
	CodeRolloutOrder     = "KC2101"
	CodeRolloutBudget    = "KC2102"
	CodeRolloutTimeout   = "KC2103"
	CodePoolNodeOverride = "KC2104"
)

func rolloutFamily() family {
	return family{name: "rollout", check: checkRollout, rules: []diag.Rule{
		rule(CodeRolloutOrder, diag.Error, "workers.order names a pool that does not exist, or one pool twice"),
		rule(CodeRolloutBudget, diag.Error, "a rollout's maxUnavailable is a percentage over 100%"),
		rule(CodeRolloutTimeout, diag.Error, "a rollout's drainTimeout is not a positive duration"),
		rule(CodePoolNodeOverride, diag.Error, "a pool's nodes map names a node the pool does not have"),
	}}
}

// checkRollout checks what kcompile plan reads: the order of the pools,
// each group's budget and drain timeout, and the per-node versions a
// pool's nodes map gives.
func checkRollout(m *model) {
	w := m.spec.Workers
	seen := map[string]bool{}
	for i, name := range w.Order {
		path := fmt.Sprintf("workers.order[%d]", i)
		_, exists := w.Pools[name]
		switch {
		case seen[name]:
			m.report(CodeRolloutOrder, path, fmt.Sprintf("pool %s is named twice in workers.order", diag.Quote(name)), "name each pool once")
		case !exists:
			m.report(CodeRolloutOrder, path, fmt.Sprintf("workers.order names pool %s, which the spec does not have", diag.Quote(name)),
				"name pools of workers.pools: "+strings.Join(sortedKeys(w.Pools), ", "))
		}
		seen[name] = true
	}
	groups := map[string]specRollout{"workers.rollout": w.Rollout}
	for name, p := range w.Pools {
		groups["workers.pools."+quoteLabel(name)+".rollout"] = p.Rollout
	}
	for _, path := range sortedKeys(groups) {
		r := groups[path]
		if _, err := rolloutBudget(r.MaxUnavailable, 1); err != nil {
			m.report(CodeRolloutBudget, path+".maxUnavailable", "maxUnavailable "+err.Error(),
				`give a count of nodes such as 2, or a percentage such as "25%"`)
		}
		if d, err := time.ParseDuration(r.DrainTimeout); err != nil || d <= 0 {
			m.report(CodeRolloutTimeout, path+".drainTimeout", fmt.Sprintf("drainTimeout %s is not a positive duration", diag.Quote(r.DrainTimeout)),
				`write a Go duration such as "5m" or "1h30m"`)
		}
	}
	names := map[string]bool{}
	for _, n := range m.nodes {
		if n.pool != "" {
			names[n.pool+"\x00"+n.name] = true
		}
	}
	for _, pool := range sortedKeys(w.Pools) {
		for _, node := range sortedKeys(w.Pools[pool].Nodes) {
			if !names[pool+"\x00"+node] && !m.unexpanded {
				path := "workers.pools." + quoteLabel(pool) + ".nodes." + quoteLabel(node)
				m.report(CodePoolNodeOverride, path, fmt.Sprintf("pool %s has no node %s", diag.Quote(pool), diag.Quote(node)),
					"key the pool's nodes map by the names its namePattern, start and count give")
			}
		}
	}
}
