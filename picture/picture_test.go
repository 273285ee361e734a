package picture

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/zones"
	"github.com/kcompile/kcompile/internal/fixture"
)

// examples are every example: the pictures of the large ones are the
// point of collapsing pools.
func examples() []string { return append(fixture.Examples(), "large", "xlarge") }

type drawn struct {
	name    string
	cluster *ir.Cluster
	svg     []byte
	mermaid string
}

// drawings are every example drawn once for the tests that only read
// them (TestGolden draws its own, twice).
var drawings = sync.OnceValues(func() ([]drawn, error) { return draw() })

// drawAll is every example's drawing.
func drawAll(t *testing.T) []drawn {
	t.Helper()
	d, err := drawings()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// draw compiles and draws every example.
func draw() ([]drawn, error) {
	var out []drawn
	for _, name := range examples() {
		c, diags := compiler.Compile(compiler.Source{Dir: fixture.Path("examples/" + name)})
		if c == nil {
			return nil, fmt.Errorf("%s does not compile: %v", name, diags)
		}
		top := Of(c)
		svg, err := top.SVG(context.Background())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, drawn{name: name, cluster: c, svg: svg, mermaid: top.Mermaid()})
	}
	return out, nil
}

// TestGolden holds every example's pictures to golden/pictures;
// KCOMPILE_UPDATE=1 rewrites them. Drawing twice gives the same bytes.
func TestGolden(t *testing.T) {
	update := os.Getenv("KCOMPILE_UPDATE") != ""
	dir := fixture.Path("golden/pictures")
	first, err := draw()
	if err != nil {
		t.Fatal(err)
	}
	second := drawAll(t)
	want := map[string]bool{}
	for i, d := range first {
		if !bytes.Equal(d.svg, second[i].svg) || d.mermaid != second[i].mermaid {
			t.Errorf("%s: two drawings differ", d.name)
		}
		for file, data := range map[string][]byte{d.name + ".svg": d.svg, d.name + ".mmd": []byte(d.mermaid)} {
			want[file] = true
			path := filepath.Join(dir, file)
			if update {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			golden, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%v (KCOMPILE_UPDATE=1 go test ./picture writes it)", err)
				continue
			}
			if !bytes.Equal(golden, data) {
				t.Errorf("%s differs from golden/pictures/%s (KCOMPILE_UPDATE=1 go test ./picture rewrites it)", d.name, file)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !want[e.Name()] {
			if update {
				if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
					t.Fatal(err)
				}
				continue
			}
			t.Errorf("golden/pictures/%s is no example's picture (KCOMPILE_UPDATE=1 removes it)", e.Name())
		}
	}
}

// labels are the texts a reader must find in a cluster's picture, worked
// out from the compiled cluster itself: every zone, every control-plane
// and etcd node, every worker or, where a pool has more than collapseAbove
// workers in a zone, the pool and its count; the endpoint, etcd and the
// networks.
func labels(c *ir.Cluster) []string {
	out := []string{"API endpoint", c.Endpoint.URL(), "networks"}
	if len(c.Etcd.Members) > 0 {
		out = append(out, "etcd ("+c.Etcd.Topology+")")
	}
	type key struct{ zone, pool string }
	pools := map[key][]string{}
	for _, n := range c.Nodes {
		zone := "zone " + n.Zone
		if n.Zone == "" {
			zone = "no zone"
		}
		if !slices.Contains(out, zone) {
			out = append(out, zone)
		}
		if n.Role != ir.RoleWorker {
			out = append(out, n.Name)
			continue
		}
		k := key{n.Zone, n.Pool}
		pools[k] = append(pools[k], n.Name)
	}
	for k, names := range pools {
		if len(names) <= collapseAbove {
			out = append(out, names...)
			continue
		}
		title := "pool " + k.pool
		if k.pool == "" {
			title = "workers"
		}
		out = append(out, title, fmt.Sprintf("%s workers", Thousands(len(names))))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// rendered is what the page below reads of one SVG in Chromium.
type rendered struct {
	ID     string  `json:"id"`
	Root   string  `json:"root"`
	Errors int     `json:"errors"`
	Width  float64 `json:"width"`
	Height float64 `json:"height"`
	Nodes  []struct {
		Title string `json:"title"`
		Box   bbox   `json:"box"`
		Texts []struct {
			Text string `json:"text"`
			bbox
		} `json:"texts"`
	} `json:"nodes"`
	Texts []struct {
		Text string `json:"text"`
		bbox
	} `json:"texts"`
}

type bbox struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
	W float64 `json:"w"`
	H float64 `json:"h"`
}

// page opens each SVG as a document of its own (an <object>, as a browser
// opens an .svg file) and, once all have loaded, writes what Chromium laid
// out: every text with its box, and every Graphviz node's shape with its
// texts.
const page = `<!doctype html>
<html><body>
%s
<pre id="result"></pre>
<script>
window.addEventListener("load", () => {
  const box = (e) => { const b = e.getBBox(); return {x: b.x, y: b.y, w: b.width, h: b.height}; };
  const out = [];
  for (const o of document.querySelectorAll("object")) {
    const doc = o.contentDocument;
    const r = {id: o.id, root: doc ? doc.documentElement.localName : "", errors: doc ? doc.getElementsByTagName("parsererror").length : -1, texts: [], nodes: []};
    if (r.root === "svg") {
      const vb = doc.documentElement.viewBox.baseVal;
      r.width = vb.width; r.height = vb.height;
      for (const t of doc.querySelectorAll("text")) r.texts.push({text: t.textContent, ...box(t)});
      for (const g of doc.querySelectorAll("g.node")) {
        const shape = g.querySelector("polygon, path, ellipse");
        r.nodes.push({title: g.querySelector("title").textContent, box: box(shape),
          texts: [...g.querySelectorAll("text")].map((t) => ({text: t.textContent, ...box(t)}))});
      }
    }
    out.push(r);
  }
  document.getElementById("result").textContent = JSON.stringify(out);
});
</script>
</body></html>`

// openInChromium serves the SVGs and reads back what Chromium rendered
// of each.
func openInChromium(t *testing.T, svgs map[string][]byte) map[string]rendered {
	t.Helper()
	var names []string
	for n := range svgs {
		names = append(names, n)
	}
	slices.Sort(names)
	var objects strings.Builder
	for _, n := range names {
		fmt.Fprintf(&objects, "<object id=%q type=\"image/svg+xml\" data=\"/svg/%s.svg\"></object>\n", n, n)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := strings.CutPrefix(r.URL.Path, "/svg/"); ok {
			data, found := svgs[strings.TrimSuffix(name, ".svg")]
			if !found {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "image/svg+xml")
			w.Write(data)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, page, objects.String())
	}))
	defer srv.Close()
	dom := fixture.DumpDOM(t, srv.URL+"/")
	m := regexp.MustCompile(`(?s)<pre id="result">(.*?)</pre>`).FindStringSubmatch(dom)
	if m == nil || m[1] == "" {
		t.Fatalf("the page wrote no result; Chromium's document:\n%s", dom)
	}
	var results []rendered
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &results); err != nil {
		t.Fatal(err)
	}
	out := map[string]rendered{}
	for _, r := range results {
		out[r.ID] = r
	}
	return out
}

// TestSVGRendersInChromium opens every example's SVG in headless Chromium:
// each is an SVG document without parse errors in which every label a
// reader needs (see labels) is a laid-out text, every node's text lies
// inside its shape (the fonts are metric-compatible with those Graphviz
// sized the boxes for), and examples/large stays under 200 KiB.
func TestSVGRendersInChromium(t *testing.T) {
	all := drawAll(t)
	svgs := map[string][]byte{}
	for _, d := range all {
		svgs[d.name] = d.svg
	}
	got := openInChromium(t, svgs)
	for _, d := range all {
		r, ok := got[d.name]
		if !ok || r.Root != "svg" || r.Errors != 0 {
			t.Errorf("%s: Chromium opened no SVG document (root %q, %d parse errors)", d.name, r.Root, r.Errors)
			continue
		}
		if r.Width <= 0 || r.Height <= 0 {
			t.Errorf("%s: an empty picture (%gx%g)", d.name, r.Width, r.Height)
		}
		shown := map[string]bool{}
		for _, tx := range r.Texts {
			if tx.W > 0 && tx.H > 0 {
				shown[tx.Text] = true
			}
		}
		for _, l := range labels(d.cluster) {
			if !shown[l] {
				t.Errorf("%s: no rendered text %q", d.name, l)
			}
		}
		for _, n := range r.Nodes {
			for _, tx := range n.Texts {
				const slack = 1.5
				if tx.X < n.Box.X-slack || tx.Y < n.Box.Y-slack || tx.X+tx.W > n.Box.X+n.Box.W+slack || tx.Y+tx.H > n.Box.Y+n.Box.H+slack {
					t.Errorf("%s: text %q (%+v) overflows its box %s (%+v)", d.name, tx.Text, tx.bbox, n.Title, n.Box)
				}
			}
		}
	}
	for _, d := range all {
		if d.name == "large" && len(d.svg) >= 200<<10 {
			t.Errorf("examples/large's picture is %d bytes, more than 200 KiB", len(d.svg))
		}
	}
}

// TestMermaidRendersWithMermaidCLI renders every example's Mermaid with
// Mermaid's own CLI: each parses, and every label a reader needs is in
// the picture.
func TestMermaidRendersWithMermaidCLI(t *testing.T) {
	all := drawAll(t)
	var md strings.Builder
	for _, d := range all {
		md.WriteString(fixture.MermaidBlock(d.mermaid))
	}
	svgs := fixture.Mermaid(t, md.String())
	for i, d := range all {
		text := html.UnescapeString(svgs[i])
		for _, l := range labels(d.cluster) {
			if !strings.Contains(text, l) {
				t.Errorf("%s: Mermaid's picture has no %q", d.name, l)
			}
		}
	}
}

// hostile is a topology whose every string a spec author chose to break
// out of a label, a Mermaid statement, the Markdown fence, Graphviz's
// escapes or the reader's terminal.
func hostile() *Topology {
	names := []string{
		`x"] --> evil["pwned`,
		"<img src=x onerror=alert(1)>",
		"```\n# heading",
		`#quot; #35; &amp; \N \G \n \\`,
		"end %% click n1 call alert(1)",
		"rtl\u202eexe.txt",
		"zone;subgraph s\nend",
	}
	t := &Topology{Name: names[0], Version: names[2], Endpoint: Endpoint{URL: names[1], Served: names[3]},
		EtcdTopology: names[4],
		Network:      Network{Nodes: []string{names[5]}, Pods: []string{names[6]}, Services: []string{names[0]}, DNS: []string{names[1]}, Domain: names[2], CNI: names[3], KubeProxy: names[4]}}
	for i, n := range names {
		t.Nodes = append(t.Nodes, Node{Name: n, Zone: names[(i+1)%len(names)], Pool: names[(i+2)%len(names)], Role: ir.RoleControlPlane, APIServer: true, Etcd: i == 0, Addresses: []string{names[(i+3)%len(names)]}})
		t.Zones.Zones = append(t.Zones.Zones, zones.Zone{Name: names[(i+1)%len(names)], Nodes: 1, APIServers: 1, EtcdMembers: min(1, i)})
	}
	t.Zones.Members, t.Zones.Quorum = 1, 1
	return t
}

// hostileTexts are the hostile strings as a reader must see them: control
// and bidi characters shown as their Go escapes, nothing else changed.
func hostileTexts(t *Topology) []string {
	var out []string
	for _, n := range t.Nodes {
		out = append(out, diag.Printable(n.Name, 0))
	}
	return out
}

// TestHostileStringsStayText draws the hostile topology both ways: the
// SVG is well-formed XML whose texts are the strings themselves, in
// Chromium too; Mermaid's CLI parses the Mermaid and shows them as text,
// with no element or link they tried to make.
func TestHostileStringsStayText(t *testing.T) {
	top := hostile()
	svg, err := top.SVG(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
	}
	got := openInChromium(t, map[string][]byte{"hostile": svg})["hostile"]
	shown := map[string]bool{}
	for _, tx := range got.Texts {
		shown[tx.Text] = true
	}
	for _, want := range hostileTexts(top) {
		if !shown[want] {
			t.Errorf("SVG: no text %q in Chromium (texts: %q)", want, renderedTexts(got))
		}
	}

	mermaid := top.Mermaid()
	if strings.Contains(mermaid, "```") || strings.Contains(mermaid, "<img") || strings.Contains(mermaid, "\u202e") {
		t.Errorf("the Mermaid text carries a fence, markup or a bidi override:\n%s", mermaid)
	}
	out := fixture.Mermaid(t, fixture.MermaidBlock(mermaid))[0]
	if strings.Contains(out, "<img") || strings.Contains(out, "flowchart-evil") {
		t.Errorf("Mermaid's picture has an element the strings made:\n%s", out)
	}
	text := html.UnescapeString(out)
	for _, want := range hostileTexts(top) {
		if !strings.Contains(text, want) {
			t.Errorf("Mermaid: no text %q", want)
		}
	}
}

func renderedTexts(r rendered) []string {
	var out []string
	for _, tx := range r.Texts {
		out = append(out, tx.Text)
	}
	return out
}
