package picture

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
)

// Mermaid is the picture as a Mermaid flowchart, for Markdown.
func (t *Topology) Mermaid() string { return t.diagram().mermaid() }

func (d diagram) mermaid() string {
	var b strings.Builder
	b.WriteString("---\ntitle: " + mermaidTitle(d.title) + "\n---\nflowchart TB\n")
	used := map[style]bool{}
	node := func(indent string, x box) {
		used[x.style] = true
		fmt.Fprintf(&b, "%s%s[\"%s\"]:::%s\n", indent, x.id, mermaidLines(x.lines), x.style)
	}
	for _, x := range d.top {
		node("  ", x)
	}
	for _, g := range d.groups {
		fmt.Fprintf(&b, "  subgraph %s[\"%s\"]\n    direction TB\n", g.id, mermaidText(g.title))
		for _, x := range g.boxes {
			node("    ", x)
		}
		b.WriteString("  end\n")
	}
	for _, x := range d.bottom {
		node("  ", x)
	}
	for _, e := range d.edges {
		arrow := "-->"
		switch {
		case e.invisible:
			arrow = "~~~"
		case e.dashed:
			arrow = "-.->"
		}
		if e.label != "" && !e.invisible {
			arrow += "|\"" + mermaidText(e.label) + "\"|"
		}
		fmt.Fprintf(&b, "  %s %s %s\n", e.from, arrow, e.to)
	}
	for _, s := range styles() {
		if used[s] {
			fill, stroke := colours(s)
			fmt.Fprintf(&b, "  classDef %s fill:%s,stroke:%s,color:#1f2328\n", s, fill, stroke)
		}
	}
	return b.String()
}

// mermaidLines is a box's label: its lines, each encoded, broken with
// Mermaid's <br/>.
func mermaidLines(lines []string) string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = mermaidText(l)
	}
	return strings.Join(out, "<br/>")
}

// mermaidText encodes text for a quoted Mermaid label. Control and bidi
// characters are first shown as their Go escapes (as the CLI shows spec
// text); then letters, digits and a few harmless marks stay, and every
// other character, quotes, '#', '<', '&', backticks and all non-ASCII
// included, becomes Mermaid's entity code #<decimal>;, so no spec string
// can close the label, start markup or end the Markdown fence the
// picture sits in.
func mermaidText(s string) string {
	var b strings.Builder
	for _, r := range diag.Printable(s, 0) {
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(" .,:/_()+=@'-", r)) {
			b.WriteRune(r)
			continue
		}
		fmt.Fprintf(&b, "#%d;", r)
	}
	return b.String()
}

// mermaidTitle quotes the title for the YAML front matter: a JSON string
// is a YAML double-quoted scalar; backticks are escaped too, for the fence.
func mermaidTitle(s string) string {
	q, _ := json.Marshal(diag.Printable(s, 0))
	return strings.ReplaceAll(string(q), "`", `\u0060`)
}
