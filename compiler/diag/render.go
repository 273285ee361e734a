package diag

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// Relative rewrites every position under base to a path relative to base,
// so printed positions are short and clickable from the user's shell.
func (l List) Relative(base string) List {
	if base == "" {
		return l
	}
	out := make(List, len(l))
	for i, d := range l {
		d.Positions = append([]Pos(nil), d.Positions...)
		for j, p := range d.Positions {
			if filepath.IsAbs(p.File) {
				if rel, err := filepath.Rel(base, p.File); err == nil && !strings.HasPrefix(rel, "..") {
					d.Positions[j].File = rel
				}
			}
		}
		out[i] = d
	}
	return out
}

// WriteText prints diagnostics for a terminal, one block each:
//
//	spec/network.cue:4:12: error KC0302: pod CIDR ... (network.podCIDR)
//	    spec/network.cue:3:10: also involved
//	    hint: ...
//
// followed by a summary line.
func (l List) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, d := range l {
		// Everything but the code and severity may carry spec text.
		fmt.Fprintf(&b, "%s: %s %s: %s", printablePos(d.Primary()), d.Severity, d.Code, Printable(d.Message, maxPrintable))
		if d.Path != "" {
			fmt.Fprintf(&b, " (%s)", Printable(d.Path, maxPrintable))
		}
		b.WriteByte('\n')
		for _, p := range d.Positions[min(1, len(d.Positions)):] {
			fmt.Fprintf(&b, "    %s: related position\n", printablePos(p))
		}
		if d.Hint != "" {
			fmt.Fprintf(&b, "    hint: %s\n", strings.ReplaceAll(Printable(d.Hint, maxPrintable, '\n'), "\n", "\n          "))
		}
	}
	fmt.Fprintln(&b, l.Summary())
	_, err := io.WriteString(w, b.String())
	return err
}

// printablePos renders a position whose file name may be the user's.
func printablePos(p Pos) string { return Printable(p.String(), maxPrintable) }

// Summary is a one-line count such as "2 errors, 1 warning".
func (l List) Summary() string {
	return fmt.Sprintf("%s, %s", plural(l.Errors(), "error"), plural(l.Warnings(), "warning"))
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// JSONReport is the document printed by --output json.
type JSONReport struct {
	Errors      int          `json:"errors"`
	Warnings    int          `json:"warnings"`
	Diagnostics []Diagnostic `json:"diagnostics"`
}

// WriteJSON prints the diagnostics as one indented JSON document.
func (l List) WriteJSON(w io.Writer) error {
	r := JSONReport{Errors: l.Errors(), Warnings: l.Warnings(), Diagnostics: l}
	if r.Diagnostics == nil {
		r.Diagnostics = []Diagnostic{}
	}
	return EncodeJSON(w, r)
}
