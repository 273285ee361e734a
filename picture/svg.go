package picture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/diag"
)

// SVG is the picture drawn by Graphviz's dot layout.
func (t *Topology) SVG(ctx context.Context) ([]byte, error) { return t.diagram().svg(ctx) }

// font is every label's font. dot measures labels with the font
// fontconfig gives it for Helvetica (Liberation Sans where fonts-liberation
// is installed, metric-compatible with Helvetica and Arial) and writes
// "Helvetica,sans-Serif" into the SVG, which every browser has or
// substitutes with a metric-compatible font (Arial, Liberation Sans).
const font = "Helvetica"

// dotTimeout bounds one run of dot; examples/xlarge takes well under a
// second.
const dotTimeout = 60 * time.Second

// ErrNoDot is the error of SVG where Graphviz's dot is not installed.
var ErrNoDot = errors.New("kcompile explain --picture svg needs Graphviz's dot program (Debian/Ubuntu: apt-get install graphviz)")

// svg lays the diagram out with Graphviz's dot program and renders it.
// dot runs only here: a command that draws nothing starts nothing, loads
// nothing and writes nothing for pictures.
func (d diagram) svg(ctx context.Context) ([]byte, error) {
	src, err := d.dot()
	if err != nil {
		return nil, err
	}
	return runDot(ctx, src)
}

// runDot renders DOT text as SVG with dot from $PATH, within dotTimeout.
func runDot(parent context.Context, src []byte) ([]byte, error) {
	path, err := exec.LookPath("dot")
	if err != nil {
		return nil, ErrNoDot
	}
	ctx, cancel := context.WithTimeout(parent, dotTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-Tsvg")
	cmd.Stdin = bytes.NewReader(src)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		switch {
		case parent.Err() != nil:
			return nil, fmt.Errorf("graphviz: %s: %w", path, parent.Err())
		case ctx.Err() != nil:
			return nil, fmt.Errorf("graphviz: %s took longer than %s", path, dotTimeout)
		}
		return nil, fmt.Errorf("graphviz: %s: %v: %s", path, err, diag.Printable(strings.TrimSpace(stderr.String()), 2000))
	}
	return out.Bytes(), nil
}

// dot is the diagram as DOT text, written by dotWriter: every identifier
// is the diagram's own and every value a double-quoted string in which
// nothing a spec wrote can end the string or start DOT syntax, so a label
// is only ever a label.
func (d diagram) dot() ([]byte, error) {
	w := &dotWriter{}
	w.line("digraph %s {", w.id("cluster"))
	w.attrs("graph", "label", w.label(d.title), "labelloc", w.value("t"), "fontname", w.value(font),
		"fontsize", w.value("16"), "rankdir", w.value("TB"), "newrank", w.value("true"), "nodesep", w.value("0.25"),
		"ranksep", w.value("0.45"), "bgcolor", w.value("white"))
	known := map[string]bool{}
	add := func(x box) {
		fill, stroke := colours(x.style)
		shape := "box"
		if x.style == styleLoss {
			shape = "note"
		}
		w.attrs(w.id(x.id), "label", w.label(x.lines...), "shape", w.value(shape), "style", w.value(boxStyle(x.style)),
			"fillcolor", w.value(fill), "color", w.value(stroke), "fontname", w.value(font), "fontsize", w.value("11"),
			"margin", w.value("0.12,0.06"),
			// The boxes below keep the order of the edges to them: zones
			// left to right as sorted, not as crossings would have them.
			"ordering", w.value("out"))
		known[x.id] = true
	}
	for _, x := range d.top {
		add(x)
	}
	for _, grp := range d.groups {
		// Graphviz draws a subgraph as a box only when its name starts
		// with "cluster".
		w.line("subgraph %s {", w.id("cluster_"+grp.id))
		w.attrs("graph", "label", w.label(grp.title), "style", w.value("rounded"), "color", w.value("#8c959f"),
			"fontname", w.value(font), "fontsize", w.value("13"))
		for _, x := range grp.boxes {
			add(x)
		}
		w.line("}")
	}
	for _, x := range d.bottom {
		add(x)
	}
	for _, e := range d.edges {
		if !known[e.from] || !known[e.to] {
			return nil, fmt.Errorf("picture: edge %s -> %s between unknown boxes", e.from, e.to)
		}
		var attrs []string
		switch {
		case e.invisible:
			attrs = append(attrs, "style", w.value("invis"))
		case e.dashed:
			attrs = append(attrs, "style", w.value("dashed"))
		}
		attrs = append(attrs, "color", w.value("#57606a"), "fontname", w.value(font), "fontsize", w.value("10"))
		if e.label != "" && !e.invisible {
			attrs = append(attrs, "label", w.label(e.label))
		}
		w.attrs(w.id(e.from)+" -> "+w.id(e.to), attrs...)
	}
	w.line("}")
	if w.err != nil {
		return nil, w.err
	}
	return w.buf.Bytes(), nil
}

// dotWriter writes DOT text. Identifiers and values of our own are
// checked to be plain (letters, digits and a little punctuation), labels
// escaped; the first that is not is the writer's error.
type dotWriter struct {
	buf bytes.Buffer
	err error
}

func (w *dotWriter) line(format string, args ...any) {
	fmt.Fprintf(&w.buf, format+"\n", args...)
}

// attrs writes a statement: what (graph, a node's id or an edge) with
// name/value pairs of values already quoted by id, value or label.
func (w *dotWriter) attrs(what string, pairs ...string) {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(w.plain(pairs[i], "attribute name", isIDRune) + "=" + pairs[i+1])
	}
	w.line("%s [%s];", what, b.String())
}

// id is one of the diagram's identifiers ("n3", "cluster_z1"), quoted.
func (w *dotWriter) id(s string) string { return quote(w.plain(s, "identifier", isIDRune)) }

// value is an attribute value of the code's own (a colour, a style, a
// number), quoted.
func (w *dotWriter) value(s string) string {
	return quote(w.plain(s, "attribute value", func(r rune) bool { return isIDRune(r) || strings.ContainsRune("#.,-", r) }))
}

// plain is s if it is not empty and every rune of it is ok; otherwise
// the writer's error: a programming error, never a spec's.
func (w *dotWriter) plain(s, what string, ok func(rune) bool) string {
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return !ok(r) }) >= 0 {
		if w.err == nil {
			w.err = fmt.Errorf("picture: DOT %s %q is not plain", what, s)
		}
		return `""`
	}
	return s
}

func isIDRune(r rune) bool {
	return r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
}

// label is a label of lines as a DOT string: each line is labelText, and
// the lines are joined with Graphviz's "\n", which centres them; no other
// line break is possible.
func (w *dotWriter) label(lines ...string) string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = labelText(l)
	}
	return `"` + strings.Join(out, `\n`) + `"`
}

// labelText is a line of a label as the inside of a DOT double-quoted
// string that Graphviz shows as the line itself:
//
//   - control and bidi characters are shown as their Go escapes (as the
//     CLI shows spec text), so the text has no line break, carriage
//     return or bidi override of its own;
//   - '&', '<' and '>' are written as entities, which Graphviz decodes in
//     a label: no '&' is taken for the start of an entity, and no '<' is
//     in the DOT text at all (an HTML-like label is never a quoted
//     string, and there is nothing to mistake for one);
//   - a backslash is doubled and a double quote escaped: in a DOT string
//     `\"` is a quote and `\\` stays two backslashes, which a label (an
//     escString, where `\n`, `\N`, `\G`... mean something) shows as one;
//     with every backslash doubled, none can escape the closing quote or
//     start an escape of Graphviz's.
//
// Graphviz writes the text into the SVG XML-escaped itself.
func labelText(s string) string {
	return labelEscaper.Replace(diag.Printable(s, 0))
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "&", "&amp;", "<", "&lt;", ">", "&gt;")

// quote is s, which has no backslash and no double quote, as a DOT
// double-quoted string.
func quote(s string) string { return `"` + s + `"` }

func boxStyle(s style) string {
	switch s {
	case styleRemoved, styleMovedAway:
		return "rounded,filled,dashed"
	case styleLoss:
		return "filled"
	}
	return "rounded,filled"
}
