package picture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/goccy/go-graphviz"
	"github.com/goccy/go-graphviz/cgraph"
	"github.com/kcompile/kcompile/compiler/diag"
)

// SVG is the picture drawn by Graphviz's dot layout.
func (t *Topology) SVG(ctx context.Context) ([]byte, error) { return t.diagram().svg(ctx) }

// font is every label's font. Graphviz sizes boxes with its own metrics
// of Helvetica (Arial's; a font list would get Times', narrower) and
// writes "Helvetica,sans-Serif", which every browser has or substitutes
// with a metric-compatible font (Arial, Liberation Sans).
const font = "Helvetica"

// svg lays the diagram out with Graphviz and renders it. Graph, node and
// edge attributes are set one by one through cgraph, never written as DOT
// text, so a label is only ever a label; the one syntax left in it,
// Graphviz's escString (\n, \N, \G...), is escaped by gvText.
func (d diagram) svg(ctx context.Context) ([]byte, error) {
	gv, err := graphviz.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("graphviz: %w", err)
	}
	defer gv.Close()
	g, err := gv.Graph(graphviz.WithName("cluster"))
	if err != nil {
		return nil, fmt.Errorf("graphviz: %w", err)
	}
	defer g.Close()
	var errs []error
	set := func(o interface {
		SafeSet(name, value, def string) error
	}, attrs ...string) {
		for i := 0; i+1 < len(attrs); i += 2 {
			if err := o.SafeSet(attrs[i], attrs[i+1], ""); err != nil {
				errs = append(errs, fmt.Errorf("graphviz attribute %s: %w", attrs[i], err))
			}
		}
	}
	set(g, "label", gvText(d.title), "labelloc", "t", "fontname", font, "fontsize", "16", "rankdir", "TB",
		"newrank", "true", "nodesep", "0.25", "ranksep", "0.45", "bgcolor", "white")
	nodes := map[string]*cgraph.Node{}
	add := func(in *cgraph.Graph, x box) {
		n, err := in.CreateNodeByName(x.id)
		if err != nil {
			errs = append(errs, fmt.Errorf("graphviz node %s: %w", x.id, err))
			return
		}
		fill, stroke := colours(x.style)
		shape := "box"
		if x.style == styleLoss {
			shape = "note"
		}
		set(n, "label", gvLines(x.lines), "shape", shape, "style", boxStyle(x.style), "fillcolor", fill, "color", stroke,
			"fontname", font, "fontsize", "11", "margin", "0.12,0.06",
			// The boxes below keep the order of the edges to them: zones
			// left to right as sorted, not as crossings would have them.
			"ordering", "out")
		nodes[x.id] = n
	}
	for _, x := range d.top {
		add(g, x)
	}
	for _, grp := range d.groups {
		// Graphviz draws a subgraph as a box only when its name starts
		// with "cluster".
		sub, err := g.CreateSubGraphByName("cluster_" + grp.id)
		if err != nil {
			return nil, fmt.Errorf("graphviz subgraph %s: %w", grp.id, err)
		}
		set(sub, "label", gvText(grp.title), "style", "rounded", "color", "#8c959f", "fontname", font, "fontsize", "13")
		for _, x := range grp.boxes {
			add(sub, x)
		}
	}
	for _, x := range d.bottom {
		add(g, x)
	}
	for i, e := range d.edges {
		from, to := nodes[e.from], nodes[e.to]
		if from == nil || to == nil {
			return nil, fmt.Errorf("picture: edge %s -> %s between unknown boxes", e.from, e.to)
		}
		ed, err := g.CreateEdgeByName(fmt.Sprintf("e%d", i), from, to)
		if err != nil {
			return nil, fmt.Errorf("graphviz edge %s -> %s: %w", e.from, e.to, err)
		}
		switch {
		case e.invisible:
			set(ed, "style", "invis")
		case e.dashed:
			set(ed, "style", "dashed")
		}
		set(ed, "color", "#57606a", "fontname", font, "fontsize", "10")
		if e.label != "" && !e.invisible {
			set(ed, "label", gvText(e.label))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var out bytes.Buffer
	if err := gv.Render(ctx, g, graphviz.SVG, &out); err != nil {
		return nil, fmt.Errorf("graphviz: %w", err)
	}
	return out.Bytes(), nil
}

func boxStyle(s style) string {
	switch s {
	case styleRemoved, styleMovedAway:
		return "rounded,filled,dashed"
	case styleLoss:
		return "filled"
	}
	return "rounded,filled"
}

// gvLines is a multi-line label: lines escaped and ended with "\n", which
// Graphviz centres.
func gvLines(lines []string) string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = gvText(l)
	}
	return strings.Join(out, `\n`)
}

// gvText escapes a label's text: control and bidi characters are shown
// as their Go escapes (as the CLI shows spec text); a backslash starts
// every escape of Graphviz's escString and '&' an entity Graphviz
// decodes, so both are escaped. Graphviz writes the text into the SVG
// XML-escaped itself.
func gvText(s string) string {
	return strings.NewReplacer(`\`, `\\`, "&", "&amp;").Replace(diag.Printable(s, 0))
}
