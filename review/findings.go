package review

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
)

// Where a finding comes from.
const (
	// SourceCheck findings are kcompile's own diagnostics, as kcompile
	// check reports them.
	SourceCheck = "check"
	// SourcePolicy findings are organisation policies' violations.
	SourcePolicy = "policy"
)

// What a change does to a finding.
const (
	Introduces = "introduces"
	Fixes      = "fixes"
)

// Finding is a check diagnostic or a policy violation of one side.
type Finding struct {
	Source string `json:"source"`
	// Code is the rule's code (KC0405) or the policy's id.
	Code     string `json:"code"`
	Severity string `json:"severity"`
	// Path is the spec value at fault.
	Path    string `json:"path,omitempty"`
	Message string `json:"message"`
	// Positions are where the side says it, the primary one first: the
	// head's for a finding the change introduces, the base's for one it
	// fixes.
	Positions []string `json:"positions,omitempty"`
	Hint      string   `json:"hint,omitempty"`
	// Waived is set on a policy violation the head waives that the base
	// did not have at all: the change introduces it and the waiver of it
	// (WaiverReason is the waiver's reason).
	Waived       bool   `json:"waived,omitempty"`
	WaiverReason string `json:"waiverReason,omitempty"`
}

// FindingChange is a finding only one side has.
type FindingChange struct {
	// Change is Introduces (only the head has it) or Fixes (only the
	// base has it).
	Change string `json:"change"`
	Finding
}

// compareFindings pairs the diagnostics of both sides by code, spec path
// and message, never by position: an edit above a value moves its line
// without changing what is wrong with it. Repeats pair one to one.
func compareFindings(source string, base, head diag.List) []FindingChange {
	key := func(d diag.Diagnostic) string { return d.Code + "\x00" + d.Path + "\x00" + d.Message }
	only := func(change string, these, others diag.List) []FindingChange {
		left := map[string]int{}
		for _, d := range others {
			left[key(d)]++
		}
		var out []FindingChange
		for _, d := range these.Sorted() {
			if left[key(d)] > 0 {
				left[key(d)]--
				continue
			}
			f := Finding{Source: source, Code: d.Code, Severity: d.Severity.String(), Path: d.Path, Message: d.Message, Hint: d.Hint}
			for _, p := range d.Positions {
				f.Positions = append(f.Positions, p.String())
			}
			out = append(out, FindingChange{Change: change, Finding: f})
		}
		return out
	}
	return append(only(Introduces, head, base), only(Fixes, base, head)...)
}

// sortFindings puts what the change makes worse first, errors before
// warnings, kcompile's own before the policies'.
func sortFindings(fs []FindingChange) {
	rank := func(f FindingChange) int {
		r := 0
		if f.Change != Introduces {
			r += 4
		}
		if f.Severity != diag.Error.String() {
			r += 2
		}
		if f.Source != SourceCheck {
			r++
		}
		return r
	}
	slices.SortStableFunc(fs, func(a, b FindingChange) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a.Code, b.Code), strings.Compare(a.Path, b.Path),
			strings.Compare(a.Message, b.Message))
	})
}

// findingsTitle is the section's first line, e.g. "regressions and
// fixes: 1 introduced (1 warning), 0 fixed (check diagnostics)".
func (r *Report) findingsTitle() string {
	var intro, fixed []FindingChange
	for _, f := range r.Findings {
		if f.Change == Introduces {
			intro = append(intro, f)
		} else {
			fixed = append(fixed, f)
		}
	}
	what := "check diagnostics"
	switch {
	case r.ChecksCompared && r.PoliciesChecked:
		what = "check diagnostics and policy violations"
	case r.PoliciesChecked:
		what = "policy violations"
	}
	sev := severities(intro)
	waived := 0
	for _, f := range intro {
		if f.Waived {
			waived++
		}
	}
	if waived > 0 {
		sev = strings.TrimSuffix(sev, ")") + fmt.Sprintf("; %d waived by this change)", waived)
	}
	return fmt.Sprintf("regressions and fixes: %d introduced%s, %d fixed%s%s (%s)", len(intro), sev, len(fixed), severities(fixed), r.waiversTitle(), what)
}

// severities counts findings by severity: " (1 error, 2 warnings)".
func severities(fs []FindingChange) string {
	n := map[string]int{}
	for _, f := range fs {
		n[f.Severity]++
	}
	var parts []string
	for _, s := range []diag.Severity{diag.Error, diag.Warning} {
		if c := n[s.String()]; c > 0 {
			parts = append(parts, fmt.Sprintf("%d %s%s", c, s, plural(c)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// showFindings says whether the report has a section on findings: when
// one changed, or when policies were checked (then "0 introduced, 0
// fixed" is news too).
func (r *Report) showFindings() bool {
	return len(r.Findings) > 0 || len(r.Waivers) > 0 || r.PoliciesChecked
}

// what names a finding: "warning KC0405" or "policy prod-etcd-zones
// (error)".
func (f Finding) what() string {
	if f.Source == SourcePolicy {
		return fmt.Sprintf("policy %s (%s)", f.Code, f.Severity)
	}
	return f.Severity + " " + f.Code
}

// where is the spec path and the primary position, " at PATH (POS)".
func (f Finding) where() string {
	s := ""
	if f.Path != "" {
		s = " at " + f.Path
	}
	if len(f.Positions) > 0 {
		s += " (" + f.Positions[0] + ")"
	}
	return s
}

// findingLines are a finding in text: what, where and why, then its hint.
func (f FindingChange) lines() []string {
	out := []string{fmt.Sprintf("  %s %s%s: %s%s", f.Change, f.what(), oneLine(f.where()), oneLine(f.Message), oneLine(f.waived()))}
	if f.Hint != "" {
		out = append(out, "      hint: "+oneLine(f.Hint))
	}
	return out
}

// waived says that the change waives the finding itself: ", waived by
// this change: REASON"; empty for any other finding.
func (f Finding) waived() string {
	if !f.Waived {
		return ""
	}
	return fmt.Sprintf(", waived by this change: %q", f.WaiverReason)
}

// oneLine keeps a spec's text on one line of the report: a newline in a
// message must not start a line patch could read as a header.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", `\n`) }
