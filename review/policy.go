package review

import (
	"fmt"
	"slices"
	"strings"
)

// Violation is a broken organisation policy on one side.
type Violation struct {
	ID       string `json:"id"`
	Severity string `json:"severity"`
	// Path is the spec value that breaks it.
	Path    string `json:"path"`
	Message string `json:"message"`
}

// PolicyChange is a violation the change introduces or fixes.
type PolicyChange struct {
	// Change is "introduces" or "fixes".
	Change string `json:"change"`
	Violation
}

// comparePolicies lists the violations only the head has (introduced)
// and only the base has (fixed), by policy and spec path.
func comparePolicies(a, b []Violation) []PolicyChange {
	key := func(v Violation) string { return v.ID + "\x00" + v.Path }
	in := func(vs []Violation, v Violation) bool {
		return slices.ContainsFunc(vs, func(x Violation) bool { return key(x) == key(v) })
	}
	var out []PolicyChange
	for _, v := range b {
		if !in(a, v) {
			out = append(out, PolicyChange{Change: "introduces", Violation: v})
		}
	}
	for _, v := range a {
		if !in(b, v) {
			out = append(out, PolicyChange{Change: "fixes", Violation: v})
		}
	}
	slices.SortStableFunc(out, func(x, y PolicyChange) int {
		if c := strings.Compare(x.Change, y.Change); c != 0 {
			return -c // introduces first
		}
		return strings.Compare(x.ID+x.Path, y.ID+y.Path)
	})
	return out
}

// policyLines are the summary's lines on policies.
func (r *Report) policyLines() []string {
	if !r.PoliciesChecked {
		return nil
	}
	intro, fixed := 0, 0
	for _, p := range r.Policies {
		if p.Change == "introduces" {
			intro++
		} else {
			fixed++
		}
	}
	out := []string{fmt.Sprintf("policies: %d introduced, %d fixed", intro, fixed)}
	for _, p := range r.Policies {
		at := ""
		if p.Path != "" {
			at = " at " + p.Path
		}
		out = append(out, fmt.Sprintf("  %s %s (%s)%s: %s", p.Change, p.ID, p.Severity, at, p.Message))
	}
	return out
}
