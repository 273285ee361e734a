// Package review compares trees for people: unified diffs that GNU patch
// applies, and golden-file comparison.
package review

import (
	"fmt"
	"strings"

	"github.com/sergi/go-diff/diffmatchpatch"
)

// lineOp is one line of a line diff.
type lineOp struct {
	op   diffmatchpatch.Operation
	text string // with its newline, if it has one
}

// lineDiff diffs a and b line by line, deterministically (no time limit).
func lineDiff(a, b string) []lineOp {
	dmp := diffmatchpatch.New()
	dmp.DiffTimeout = 0
	ca, cb, lines := dmp.DiffLinesToChars(a, b)
	diffs := dmp.DiffCharsToLines(dmp.DiffMain(ca, cb, false), lines)
	var ops []lineOp
	for _, d := range diffs {
		text := d.Text
		for text != "" {
			i := strings.IndexByte(text, '\n')
			if i < 0 {
				ops = append(ops, lineOp{d.Type, text})
				break
			}
			ops = append(ops, lineOp{d.Type, text[:i+1]})
			text = text[i+1:]
		}
	}
	return ops
}

// Unified renders the difference of a and b as a unified diff with
// context lines of context, or "" when they are equal. GNU patch applies
// it.
func Unified(oldName, newName string, a, b []byte, context int) string {
	if string(a) == string(b) {
		return ""
	}
	ops := lineDiff(string(a), string(b))
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", oldName, newName)
	// Walk the changes, grouping those whose contexts touch into hunks.
	i := 0
	oldLine, newLine := 1, 1 // line numbers of ops[i]
	for i < len(ops) {
		if ops[i].op == diffmatchpatch.DiffEqual {
			oldLine++
			newLine++
			i++
			continue
		}
		// A hunk starts up to context equal lines before this change.
		start := i
		for n := 0; n < context && start > 0 && ops[start-1].op == diffmatchpatch.DiffEqual; n++ {
			start--
		}
		hunkOld := oldLine - (i - start)
		hunkNew := newLine - (i - start)
		end := i
		for {
			for end < len(ops) && ops[end].op != diffmatchpatch.DiffEqual {
				end++
			}
			// Count the equal lines that follow; continue the hunk if
			// another change comes within 2*context of them.
			eq := 0
			for end+eq < len(ops) && ops[end+eq].op == diffmatchpatch.DiffEqual {
				eq++
			}
			if end+eq < len(ops) && eq <= 2*context {
				end += eq
				continue
			}
			end += min(eq, context)
			break
		}
		var body strings.Builder
		oldCount, newCount := 0, 0
		for _, o := range ops[start:end] {
			prefix := " "
			switch o.op {
			case diffmatchpatch.DiffDelete:
				prefix = "-"
				oldCount++
			case diffmatchpatch.DiffInsert:
				prefix = "+"
				newCount++
			default:
				oldCount++
				newCount++
			}
			body.WriteString(prefix)
			body.WriteString(o.text)
			if !strings.HasSuffix(o.text, "\n") {
				body.WriteString("\n\\ No newline at end of file\n")
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(hunkOld, oldCount), hunkRange(hunkNew, newCount))
		out.WriteString(body.String())
		// Advance the line counters over the hunk's lines after i.
		for _, o := range ops[i:end] {
			if o.op != diffmatchpatch.DiffInsert {
				oldLine++
			}
			if o.op != diffmatchpatch.DiffDelete {
				newLine++
			}
		}
		i = end
	}
	return out.String()
}

// hunkRange writes "start,count"; an empty range starts at the line
// before it, as diff(1) writes it.
func hunkRange(start, count int) string {
	if count == 0 {
		start--
	}
	return fmt.Sprintf("%d,%d", start, count)
}
