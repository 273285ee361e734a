package review

import (
	"fmt"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
)

// What a change does to a policy waiver.
const (
	WaiverAdded   = "added"
	WaiverRemoved = "removed"
	WaiverChanged = "changed"
)

// Waiver is one waiver of a side's policies.waivers.
type Waiver struct {
	// ID is the waived policy's id.
	ID     string
	Reason string
	// Positions are where the side writes the waiver.
	Positions []diag.Pos
	// Waives are the violations the waiver hides, as the side would
	// report them without it.
	Waives diag.List
}

// WaiverChange is a waiver the change adds, removes, or whose reason it
// changes: a waiver relaxes a policy, and a change that adds one must
// show it, as it shows the violations it introduces.
type WaiverChange struct {
	// Change is WaiverAdded, WaiverRemoved or WaiverChanged.
	Change string `json:"change"`
	// Policy is the waived policy's id.
	Policy string `json:"policy"`
	// Reason is the head's reason (the base's for a removed waiver);
	// BaseReason the base's, for a changed one.
	Reason     string `json:"reason"`
	BaseReason string `json:"baseReason,omitempty"`
	// Position is where the head writes the waiver (the base, for a
	// removed one).
	Position string `json:"position,omitempty"`
	// Waives counts the violations the waiver hides on that side.
	Waives int `json:"waives"`
}

// compareWaivers lists the waivers only one side has, or whose reason
// differs, by policy id.
func compareWaivers(base, head []Waiver) []WaiverChange {
	b, h := map[string]Waiver{}, map[string]Waiver{}
	for _, w := range base {
		b[w.ID] = w
	}
	for _, w := range head {
		h[w.ID] = w
	}
	pos := func(w Waiver) string {
		if len(w.Positions) == 0 {
			return ""
		}
		return w.Positions[0].String()
	}
	var out []WaiverChange
	for _, id := range unionKeys(b, h) {
		wb, inB := b[id]
		wh, inH := h[id]
		switch {
		case !inB:
			out = append(out, WaiverChange{Change: WaiverAdded, Policy: id, Reason: wh.Reason, Position: pos(wh), Waives: len(wh.Waives)})
		case !inH:
			out = append(out, WaiverChange{Change: WaiverRemoved, Policy: id, Reason: wb.Reason, Position: pos(wb), Waives: len(wb.Waives)})
		case wb.Reason != wh.Reason:
			out = append(out, WaiverChange{Change: WaiverChanged, Policy: id, Reason: wh.Reason, BaseReason: wb.Reason, Position: pos(wh), Waives: len(wh.Waives)})
		}
	}
	return out
}

// waivedFindings are the violations the head's waivers hide that the
// base does not have at all, reported or waived: the change introduces
// them and waives them itself. A violation the base reports and the head
// waives is no longer "fixed": the waiver, listed, says what happened to
// it.
func waivedFindings(base diag.List, baseWaivers, head []Waiver) (introduced []FindingChange, waivedNow diag.List) {
	key := func(d diag.Diagnostic) string { return d.Code + "\x00" + d.Path + "\x00" + d.Message }
	had := map[string]int{}
	for _, d := range base {
		had[key(d)]++
	}
	for _, w := range baseWaivers {
		for _, d := range w.Waives {
			had[key(d)]++
		}
	}
	for _, w := range head {
		for _, d := range w.Waives.Sorted() {
			if had[key(d)] > 0 {
				had[key(d)]--
				waivedNow = append(waivedNow, d)
				continue
			}
			f := Finding{Source: SourcePolicy, Code: d.Code, Severity: d.Severity.String(), Path: d.Path, Message: d.Message,
				Waived: true, WaiverReason: w.Reason}
			for _, p := range d.Positions {
				f.Positions = append(f.Positions, p.String())
			}
			introduced = append(introduced, FindingChange{Change: Introduces, Finding: f})
		}
	}
	return introduced, waivedNow
}

// line is a waiver change in text.
func (w WaiverChange) line() string {
	at := ""
	if w.Position != "" {
		at = " (" + w.Position + ")"
	}
	s := fmt.Sprintf("  waiver %s%s: waives policy %s: reason %q", w.Change, at, w.Policy, w.Reason)
	if w.Change == WaiverChanged {
		s += fmt.Sprintf(", was %q", w.BaseReason)
	}
	return oneLine(s) + fmt.Sprintf(" (%s)", waivesCount(w))
}

// waivesCount says how many violations the waiver hides on its side.
func waivesCount(w WaiverChange) string {
	side := "head"
	if w.Change == WaiverRemoved {
		side = "base"
	}
	return fmt.Sprintf("hides %d violation%s in the %s", w.Waives, plural(w.Waives), side)
}

// mdLine is a waiver change in Markdown.
func (w WaiverChange) mdLine() string {
	at := ""
	if w.Position != "" {
		at = " (" + mdCode(w.Position) + ")"
	}
	s := fmt.Sprintf("- **waiver %s**%s: waives policy %s: reason %s", w.Change, at, mdCode(w.Policy), mdEscape(oneLine(fmt.Sprintf("%q", w.Reason))))
	if w.Change == WaiverChanged {
		s += ", was " + mdEscape(oneLine(fmt.Sprintf("%q", w.BaseReason)))
	}
	return s + " (" + mdEscape(waivesCount(w)) + ")\n"
}

// waiversTitle counts the waiver changes: ", 1 waiver added"; empty when
// there is none.
func (r *Report) waiversTitle() string {
	n := map[string]int{}
	for _, w := range r.Waivers {
		n[w.Change]++
	}
	var parts []string
	for _, c := range []string{WaiverAdded, WaiverChanged, WaiverRemoved} {
		if n[c] > 0 {
			parts = append(parts, fmt.Sprintf("%d waiver%s %s", n[c], plural(n[c]), c))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ", " + strings.Join(parts, ", ")
}
