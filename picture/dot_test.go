package picture

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler/diag"
)

// drawnSVG is what an SVG of dot's holds: every node, cluster and edge
// (by class) with its title and texts, in order.
type drawnSVG map[string][]drawnElement

type drawnElement struct {
	title string
	texts []string
}

func readSVG(t *testing.T, svg []byte) drawnSVG {
	t.Helper()
	out := drawnSVG{}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var class string // of the <g> being read
	var in string    // the element whose text is being read
	var cur *drawnElement
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			in = tok.Name.Local
			if tok.Name.Local == "g" {
				class = ""
				for _, a := range tok.Attr {
					if a.Name.Local == "class" {
						class = a.Value
						out[class] = append(out[class], drawnElement{})
						cur = &out[class][len(out[class])-1]
					}
				}
			}
			if in == "text" && cur != nil {
				cur.texts = append(cur.texts, "")
			}
		case xml.EndElement:
			in = ""
		case xml.CharData:
			if cur == nil || class == "" {
				continue
			}
			switch in {
			case "title":
				cur.title += string(tok)
			case "text":
				// dot writes the second of two spaces as a no-break space.
				cur.texts[len(cur.texts)-1] += strings.ReplaceAll(string(tok), "\u00a0", " ")
			}
		}
	}
	return out
}

// awkward are strings that try DOT's syntax, Graphviz's escapes and
// entities, and the SVG's XML, and random strings of their characters.
func awkward() []string {
	out := []string{
		`"`, `\`, `\"`, `"\`, `\\"`, `a\`, `\n`, `\l`, `\r`, `\N`, `\G`, `\E`, `\T`, `\H`, `\L`, `\\N`,
		`"; evil [label="x"]; "`, `x" -> "y`, `}; digraph g {`, `<b>bold</b>`, `<`, `>`, `<<x>>`,
		"&amp;", "&#35;", "&lt;", "&", "&&", "&#x41;", "&nbsp;", "#quot;", "a\nb", "a\r\nb", "a\\\nb",
		"# 1 \"file\"", "//", "/* c */", "\u202eevil", "\x00", "\x7f", "\ufeff", "é ü 中文", "\xff\xfe",
		"--", "->", "a;b", "[x]", "{y}", "=z", "'q'",
	}
	const alphabet = "ab \"\\\n<>&;#{}[]=-%/'é\u202e"
	r := rand.New(rand.NewPCG(28, 1))
	chars := []rune(alphabet)
	for range 150 {
		n := 1 + r.IntN(16)
		var b strings.Builder
		for range n {
			b.WriteRune(chars[r.IntN(len(chars))])
		}
		out = append(out, b.String())
	}
	return out
}

// shown is how a label's line must read in the picture: the string with
// control and bidi characters as Go escapes, and no other change.
func shown(s string) string { return diag.Printable(s, 0) }

// TestDOTStringsStayLabels draws a diagram whose every label, title and
// edge label is an awkward string: dot draws exactly the diagram's boxes,
// groups and edges, by the diagram's own ids, and every text reads as
// the string itself.
func TestDOTStringsStayLabels(t *testing.T) {
	strs := awkward()
	d := diagram{title: strs[0]}
	grp := group{id: "z0", title: strs[1]}
	var boxes []box
	for i, s := range strs {
		boxes = append(boxes, box{id: fmt.Sprintf("n%d", i), lines: []string{"line " + s, s + " end"}, style: styleWorker})
	}
	half := len(boxes) / 2
	d.top, grp.boxes = boxes[:half], boxes[half:]
	d.groups = []group{grp}
	for i := 1; i < len(boxes); i++ {
		d.edges = append(d.edges, edge{from: boxes[i-1].id, to: boxes[i].id, label: strs[i]})
	}
	svg, err := d.svg(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := readSVG(t, svg)
	if n := len(got["node"]); n != len(boxes) {
		t.Errorf("%d nodes drawn, want %d", n, len(boxes))
	}
	for i, n := range got["node"] {
		if i >= len(boxes) {
			break
		}
		b := boxes[i]
		want := []string{shown(b.lines[0]), shown(b.lines[1])}
		if n.title != b.id || !slices.Equal(n.texts, want) {
			t.Errorf("node %d: %s with texts %q; want %s with %q", i, n.title, n.texts, b.id, want)
		}
	}
	if c := got["cluster"]; len(c) != 1 || c[0].title != "cluster_z0" || !slices.Equal(c[0].texts, []string{shown(grp.title)}) {
		t.Errorf("clusters %+v; want cluster_z0 titled %q", c, shown(grp.title))
	}
	if n := len(got["edge"]); n != len(d.edges) {
		t.Errorf("%d edges drawn, want %d", n, len(d.edges))
	}
	for i, e := range got["edge"] {
		if i >= len(d.edges) {
			break
		}
		de := d.edges[i]
		title := de.from + "->" + de.to
		want := []string{shown(de.label)}
		if e.title != title || !slices.Equal(e.texts, want) {
			t.Errorf("edge %d: %s labelled %q; want %s labelled %q", i, e.title, e.texts, title, want)
		}
	}
	if g := got["graph"]; len(g) != 1 || !slices.Equal(g[0].texts, []string{shown(d.title)}) {
		t.Errorf("graph %+v; want one titled %q", g, shown(d.title))
	}
}

// TestDOTText holds the DOT text of one label to the escaping its
// comments promise.
func TestDOTText(t *testing.T) {
	w := &dotWriter{}
	got := w.label(`a\b"c`, "<x>&\n\u202e")
	want := `"a\\b\"c\n&lt;x&gt;&amp;\\n\\u202e"`
	if got != want {
		t.Errorf("label = %s, want %s", got, want)
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
	for _, bad := range []string{"", `a"b`, `a\b`, "a b", "a\nb", "n1; x"} {
		w := &dotWriter{}
		w.id(bad)
		if w.err == nil {
			t.Errorf("the identifier %q was taken", bad)
		}
	}
}

// TestDotMissingOrFailing: without dot on PATH, SVG says what to
// install; a dot that fails is reported with what it wrote; one that
// hangs is stopped with the context.
func TestDotMissingOrFailing(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	d := hostile().diagram()
	t.Setenv("PATH", t.TempDir())
	if _, err := d.svg(context.Background()); !errors.Is(err, ErrNoDot) {
		t.Errorf("without dot: %v, want %v", err, ErrNoDot)
	} else if !strings.Contains(err.Error(), "apt-get install graphviz") {
		t.Errorf("without dot: %v names no package", err)
	}

	bin := t.TempDir()
	t.Setenv("PATH", bin)
	script := "#!/bin/sh\necho 'Error: <stdin>: syntax error in line 1' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "dot"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := d.svg(context.Background()); err == nil || !strings.Contains(err.Error(), "syntax error in line 1") {
		t.Errorf("a failing dot: %v", err)
	}

	if err := os.WriteFile(filepath.Join(bin, "dot"), []byte("#!/bin/sh\nexec "+sleep+" 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := d.svg(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a hanging dot: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a hanging dot was stopped after %s", took)
	}
}

// TestHelveticaIsLiberationSans: dot sizes every label with the font
// fontconfig gives it for Helvetica; the goldens were drawn with
// Liberation Sans, the font Chromium shows them in.
func TestHelveticaIsLiberationSans(t *testing.T) {
	fcMatch, err := exec.LookPath("fc-match")
	if err != nil {
		t.Fatal("no fc-match to ask fontconfig: install Debian's fontconfig (scripts/tools installs graphviz, which brings it)")
	}
	out, err := exec.Command(fcMatch, "-f", "%{family[0]}", font).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out); got != "Liberation Sans" {
		t.Errorf("fontconfig gives %q for %s, not Liberation Sans: the pictures differ from golden/pictures (scripts/tools installs fonts-liberation)", got, font)
	}
}
