// Package diag holds diagnostics as data: a stable code, a severity, the
// CUE path of the offending value, every contributing source position, a
// message saying what is wrong and a hint saying how to fix it. Diagnostics
// are collected, sorted and de-duplicated here and rendered by the CLI.
package diag

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Severity orders diagnostics by how much they matter.
type Severity int

const (
	// Error makes a spec unusable: nothing is compiled.
	Error Severity = iota
	// Warning is a risk the user should look at; --strict makes it an error.
	Warning
)

func (s Severity) String() string {
	switch s {
	case Error:
		return "error"
	case Warning:
		return "warning"
	}
	return fmt.Sprintf("severity(%d)", int(s))
}

// MarshalJSON renders the severity by name, so JSON consumers need no table.
func (s Severity) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads the name written by MarshalJSON.
func (s *Severity) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err != nil {
		return err
	}
	switch name {
	case "error":
		*s = Error
	case "warning":
		*s = Warning
	default:
		return fmt.Errorf("unknown severity %q", name)
	}
	return nil
}

// Pos is a position in a source file. Line and Column count from 1; a zero
// Line means the file as a whole.
type Pos struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

// IsValid reports whether the position names a file.
func (p Pos) IsValid() bool { return p.File != "" }

func (p Pos) String() string {
	switch {
	case p.File == "":
		return "-"
	case p.Line == 0:
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// Compare orders positions by file, line and column.
func (p Pos) Compare(q Pos) int {
	return cmp.Or(strings.Compare(p.File, q.File), cmp.Compare(p.Line, q.Line), cmp.Compare(p.Column, q.Column))
}

// Rule describes one diagnostic kcompile can report: the catalogue of
// rules (the table of checks in docs/checks.md) is a list of these, gathered from
// the compiler, the PKI and each target.
type Rule struct {
	Code     string
	Severity Severity
	// Family groups rules by topic, for the table.
	Family  string
	Summary string
}

// Diagnostic is one finding about a spec.
type Diagnostic struct {
	Code     string   `json:"code"`
	Severity Severity `json:"severity"`
	// Path is the CUE path of the offending value, for example
	// "network.podCIDR".
	Path    string `json:"path,omitempty"`
	Message string `json:"message"`
	// Positions are every place that contributes, the primary one first.
	Positions []Pos  `json:"positions,omitempty"`
	Hint      string `json:"hint,omitempty"`
}

// Primary is the position a diagnostic is reported at.
func (d Diagnostic) Primary() Pos {
	if len(d.Positions) == 0 {
		return Pos{}
	}
	return d.Positions[0]
}

// List is a set of diagnostics.
type List []Diagnostic

// Add appends a diagnostic.
func (l *List) Add(d Diagnostic) { *l = append(*l, d) }

// Errors counts diagnostics of severity Error.
func (l List) Errors() int { return l.count(Error) }

// Warnings counts diagnostics of severity Warning.
func (l List) Warnings() int { return l.count(Warning) }

func (l List) count(s Severity) int {
	n := 0
	for _, d := range l {
		if d.Severity == s {
			n++
		}
	}
	return n
}

// HasErrors reports whether any diagnostic is an error.
func (l List) HasErrors() bool { return l.Errors() > 0 }

// Strict returns a copy in which warnings are errors.
func (l List) Strict() List {
	out := slices.Clone(l)
	for i := range out {
		out[i].Severity = Error
	}
	return out
}

// Sorted returns the diagnostics ordered by primary position, then code,
// path and message, with exact repeats removed. Diagnostics without a
// position sort last.
func (l List) Sorted() List {
	out := slices.Clone(l)
	for i := range out {
		out[i].Positions = dedupPositions(out[i].Positions)
	}
	slices.SortStableFunc(out, compare)
	return slices.CompactFunc(out, func(a, b Diagnostic) bool { return compare(a, b) == 0 && a.Hint == b.Hint })
}

func compare(a, b Diagnostic) int {
	pa, pb := a.Primary(), b.Primary()
	if pa.IsValid() != pb.IsValid() {
		if pa.IsValid() {
			return -1
		}
		return 1
	}
	return cmp.Or(pa.Compare(pb), strings.Compare(a.Code, b.Code), strings.Compare(a.Path, b.Path),
		strings.Compare(a.Message, b.Message), slices.CompareFunc(a.Positions, b.Positions, Pos.Compare))
}

// dedupPositions keeps the first occurrence of each position, so the
// primary position stays first.
func dedupPositions(ps []Pos) []Pos {
	out := make([]Pos, 0, len(ps))
	for _, p := range ps {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}
