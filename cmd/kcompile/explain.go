package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/picture"
)

type explainCmd struct {
	Dir     string `arg:"" optional:"" default:"." help:"Spec directory (a CUE package)."`
	Path    string `arg:"" optional:"" help:"Show only this path and what lies below it, e.g. network.serviceCIDR or nodes.w01."`
	Output  string `short:"o" enum:"text,json" default:"text" help:"Output format: text or json."`
	Picture string `enum:",svg,mermaid" default:"" placeholder:"FORMAT" help:"Instead of the values, draw the cluster: zones, nodes (large pools as one box with a count), etcd, the API endpoint, the networks and what losing each zone costs. FORMAT is svg (Graphviz) or mermaid (for Markdown)."`
}

// explained is one line of explain's output.
type explained struct {
	Path string `json:"path"`
	// Value is the JSON value itself: a string, number, boolean, list
	// or object, as CUE exports it.
	Value  json.RawMessage `json:"value"`
	Origin string          `json:"origin"`
	File   string          `json:"file,omitempty"`
	Line   int             `json:"line,omitempty"`
	Column int             `json:"column,omitempty"`
	From   string          `json:"from,omitempty"`
}

func (explainCmd) Help() string {
	return `Examples:
  kcompile explain examples/ha-stacked                       # every effective value and its origin
  kcompile explain examples/ha-stacked network.serviceCIDR
  kcompile explain examples/ha-stacked nodes.cp1 -o json | jq -r '.[].value'
  kcompile explain examples/ha-stacked --picture svg > cluster.svg
` + exitCodes("0", "shown", "1", "the spec has errors (printed on stderr) or nothing lies at PATH", "2", "usage error")
}

func (c *explainCmd) Run(e *env) error {
	if c.Picture != "" {
		// A usage mistake is told before the spec is compiled.
		if c.Path != "" {
			return statusError{code: exitUsage, msg: "--picture draws the whole cluster: leave out the path " + diag.Printable(c.Path, maxShown)}
		}
		if c.Output != "text" {
			return statusError{code: exitUsage, msg: "--picture is its own format: leave out --output " + c.Output}
		}
	}
	cluster, diags := compiler.Compile(compiler.Source{Dir: c.Dir, Bound: e.bound})
	if cluster == nil {
		diags = diags.Relative(e.cwd)
		if err := diags.WriteText(e.stderr); err != nil {
			return err
		}
		return statusError{code: exitProblems, msg: "the spec has errors; fix them to see its effective values"}
	}
	if err := printWarnings(e, diags); err != nil {
		return err
	}
	if c.Picture != "" {
		return c.draw(e, cluster)
	}
	var rows []explained
	for _, s := range cluster.Settings {
		if c.Path != "" && !under(s.Path, c.Path) {
			continue
		}
		o := s.Origin
		o.Pos.File = relative(e.cwd, o.Pos.File)
		rows = append(rows, explained{Path: s.Path, Value: jsonValue(s.Value), Origin: string(o.Kind), File: o.Pos.File, Line: o.Pos.Line, Column: o.Pos.Column, From: o.From})
	}
	if len(rows) == 0 {
		return statusError{code: exitProblems, msg: fmt.Sprintf("no value at %s%s", diag.Printable(c.Path, maxShown), diag.Printable(suggestPaths(cluster.Settings, c.Path), maxShown*10))}
	}
	if c.Output == "json" {
		return diag.EncodeJSON(e.stdout, rows)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		// Paths and values are the spec's text: escaped, and a long
		// value cut with its length shown.
		fmt.Fprintf(tw, "%s\t%s\t%s\n", diag.Printable(r.Path, maxShown), diag.Printable(string(r.Value), maxShown), diag.Printable(describeOrigin(r), maxShown))
	}
	return tw.Flush()
}

// draw writes the picture of the whole cluster.
func (c *explainCmd) draw(e *env, cluster *ir.Cluster) error {
	t := picture.Of(cluster)
	if c.Picture == "mermaid" {
		_, err := io.WriteString(e.stdout, t.Mermaid())
		return err
	}
	svg, err := t.SVG(context.Background())
	if err != nil {
		return err
	}
	_, err = e.stdout.Write(svg)
	return err
}

// jsonValue is a setting's value as JSON, which the compiler keeps; any
// other text would be a compiler bug, and is still shown, as a string.
func jsonValue(v string) json.RawMessage {
	if json.Valid([]byte(v)) {
		return json.RawMessage(v)
	}
	b, _ := json.Marshal(v)
	return b
}

// maxShown bounds one value in a listing.
const maxShown = 200

func describeOrigin(r explained) string {
	pos := r.File
	if r.Line > 0 {
		pos = fmt.Sprintf("%s:%d:%d", r.File, r.Line, r.Column)
	}
	switch ir.OriginKind(r.Origin) {
	case ir.FromSpec:
		return "spec " + pos
	case ir.FromDefault:
		return "schema default " + pos
	}
	if pos != "" {
		return fmt.Sprintf("derived from %s, %s", r.From, pos)
	}
	return "derived from " + r.From
}

// under reports whether path is prefix or lies below it.
func under(path, prefix string) bool {
	if path == prefix {
		return true
	}
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	next := path[len(prefix)]
	return next == '.' || next == '['
}

// suggestPaths names the top-level sections, or paths that start like the
// one asked for, so a typo is easy to fix.
func suggestPaths(settings []ir.Setting, path string) string {
	seen := map[string]bool{}
	var out []string
	parent := path
	if i := strings.LastIndex(path, "."); i >= 0 {
		parent = path[:i]
	} else {
		parent = ""
	}
	for _, s := range settings {
		if parent != "" && !under(s.Path, parent) {
			continue
		}
		rest := strings.TrimPrefix(s.Path, parent)
		rest = strings.TrimPrefix(rest, ".")
		head := rest
		if i := strings.IndexAny(rest, ".["); i >= 0 {
			head = rest[:i]
		}
		full := head
		if parent != "" {
			full = parent + "." + head
		}
		if !seen[full] {
			seen[full] = true
			out = append(out, full)
		}
	}
	sort.Strings(out)
	if len(out) > 20 {
		out = append(out[:20], "...")
	}
	if len(out) == 0 {
		return ""
	}
	return "; known paths here: " + strings.Join(out, ", ")
}

func relative(base, file string) string {
	if base == "" || !filepath.IsAbs(file) {
		return file
	}
	if rel, err := filepath.Rel(base, file); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return file
}
