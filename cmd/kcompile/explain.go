package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
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
	// origin is the same, for the text listing.
	origin ir.Origin
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
		if c.Path != "" && !ir.Below(s.Path, c.Path) {
			continue
		}
		o := s.Origin
		o.Pos.File = relative(e.cwd, o.Pos.File)
		rows = append(rows, explained{Path: s.Path, Value: jsonValue(s.Value), Origin: string(o.Kind), File: o.Pos.File, Line: o.Pos.Line, Column: o.Pos.Column, From: o.From, origin: o})
	}
	if len(rows) == 0 {
		return statusError{code: exitProblems, msg: fmt.Sprintf("no value at %s%s", diag.Printable(c.Path, maxShown), diag.Printable(knownPaths(cluster.Settings, c.Path), maxShown*10))}
	}
	if c.Output == "json" {
		return diag.EncodeJSON(e.stdout, rows)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		// Paths and values are the spec's text: escaped, and a long
		// value cut with its length shown.
		fmt.Fprintf(tw, "%s\t%s\t%s\n", diag.Printable(r.Path, maxShown), diag.Printable(string(r.Value), maxShown), diag.Printable(r.origin.String(), maxShown))
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

// knownPaths names the paths that exist near one that matches nothing,
// so a typo is easy to fix.
func knownPaths(settings []ir.Setting, path string) string {
	out := ir.Near(settings, path)
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
