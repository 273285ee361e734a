package review

import (
	"encoding/json"
	"fmt"
	"github.com/kcompile/kcompile/compiler/diag"
	"io"
	"strings"
)

// summaryLines are the report's summary, shared by text and markdown.
func (r *Report) summaryLines() []string {
	var added, removed, changed []string
	for _, n := range r.Nodes {
		switch n.Status {
		case Added:
			added = append(added, n.Node)
		case Removed:
			removed = append(removed, n.Node)
		default:
			changed = append(changed, n.Node)
		}
	}
	list := func(xs []string) string {
		if len(xs) == 0 {
			return ""
		}
		return " (" + strings.Join(xs, ", ") + ")"
	}
	out := []string{fmt.Sprintf("nodes: %d added%s, %d removed%s, %d changed%s",
		len(added), list(added), len(removed), list(removed), len(changed), list(changed))}
	if r.Etcd != nil {
		out = append(out, "etcd: "+r.Etcd.Summary())
	}
	if r.Endpoint != nil {
		out = append(out, fmt.Sprintf("endpoint: %s → %s", r.Endpoint.Before, r.Endpoint.After))
	}
	out = append(out, fmt.Sprintf("cluster files: %d changed", r.ClusterFiles))
	return out
}

// effect is what a modified node's new files do to it, in a few words,
// for the picture.
func (n NodeChange) effect() string {
	var parts []string
	if n.Reprovision {
		parts = append(parts, "reprovision")
	}
	short := func(units []string) string {
		out := make([]string, len(units))
		for i, u := range units {
			out[i] = strings.TrimSuffix(u, ".service")
		}
		return strings.Join(out, ", ")
	}
	if len(n.Restarts) > 0 {
		parts = append(parts, "restarts "+short(n.Restarts))
	}
	if len(n.Starts) > 0 {
		parts = append(parts, "starts "+short(n.Starts))
	}
	if len(n.Stops) > 0 {
		parts = append(parts, "stops "+short(n.Stops))
	}
	if len(parts) == 0 {
		return "files changed, nothing restarts"
	}
	return strings.Join(parts, "; ")
}

// nodeLine summarises one node: files changed and services affected.
func nodeLine(n NodeChange) string {
	s := fmt.Sprintf("%s: %s, %d file%s", n.Node, n.Status, n.Files, plural(n.Files))
	if len(n.Restarts) > 0 {
		s += "; restarts " + strings.Join(n.Restarts, ", ")
	}
	if len(n.Starts) > 0 {
		s += "; starts " + strings.Join(n.Starts, ", ")
	}
	if len(n.Stops) > 0 {
		s += "; stops " + strings.Join(n.Stops, ", ")
	}
	if n.Reprovision {
		s += "; reprovision (cloud-init and Ignition apply a node's config on its first boot only)"
		if len(n.Affects) > 0 {
			s += ", affects " + strings.Join(n.Affects, ", ")
		}
	}
	return s
}

// fileHeader names a changed file and how it is shown. It never starts
// like a patch header, so that patch skips it.
func fileHeader(f FileChange) string {
	return fmt.Sprintf("=== %s: %s, %s", f.Path, f.Kind, f.Status)
}

// palette colours text output on a terminal.
type palette struct{ bold, red, green, cyan, reset string }

func colours(on bool) palette {
	if !on {
		return palette{}
	}
	return palette{bold: "\x1b[1m", red: "\x1b[31m", green: "\x1b[32m", cyan: "\x1b[36m", reset: "\x1b[0m"}
}

// WriteText prints the report for a terminal or a file. Without colour
// the whole output is a patch: `patch -p1` in the base tree applies every
// text file's change and skips the rest. Control characters of the
// compared files are escaped (a spec value must not reach the reviewer's
// terminal as an escape sequence); colour is added after that.
func (r *Report) WriteText(w io.Writer, colour bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "kcompile diff %s → %s\n", r.Base, r.Head)
	if r.Equal() {
		b.WriteString("no differences\n")
	} else {
		for i, l := range r.summaryLines() {
			b.WriteString(l + "\n")
			if i == 0 {
				for _, n := range r.Nodes {
					b.WriteString("  " + nodeLine(n) + "\n")
				}
			}
		}
		for _, n := range r.Notes {
			b.WriteString("note: " + n + "\n")
		}
		for _, l := range r.policyLines() {
			b.WriteString(l + "\n")
		}
		if len(r.Steps) > 0 {
			b.WriteString("how the change takes effect (beyond the restarts):\n")
			for i, s := range r.Steps {
				fmt.Fprintf(&b, "  %d. %s: %s\n", i+1, s.Setting, s.Why)
				for _, a := range s.Actions {
					b.WriteString("     - " + a + "\n")
				}
			}
		}
		for _, f := range r.Files {
			fmt.Fprintf(&b, "\n%s\n", fileHeader(f))
			for _, d := range f.Details {
				b.WriteString("    " + d + "\n")
			}
			b.WriteString(f.Unified)
		}
	}
	text := diag.Printable(b.String(), 0, '\n')
	if colour {
		text = colourise(text)
	}
	_, err := io.WriteString(w, text)
	return err
}

// colourise colours the lines of a text report for a terminal.
func colourise(text string) string {
	p := colours(true)
	lines := strings.SplitAfter(text, "\n")
	var b strings.Builder
	for i, l := range lines {
		body := strings.TrimSuffix(l, "\n")
		nl := l[len(body):]
		switch {
		case body == "":
			b.WriteString(l)
		case i == 0 || strings.HasPrefix(body, "=== ") || strings.HasPrefix(body, "--- ") || strings.HasPrefix(body, "+++ "):
			b.WriteString(p.bold + body + p.reset + nl)
		case strings.HasPrefix(body, "@@"):
			b.WriteString(p.cyan + body + p.reset + nl)
		case strings.HasPrefix(body, "+"):
			b.WriteString(p.green + body + p.reset + nl)
		case strings.HasPrefix(body, "-"):
			b.WriteString(p.red + body + p.reset + nl)
		default:
			b.WriteString(l)
		}
	}
	return b.String()
}

// WriteMarkdown prints the report as a pull-request comment: the summary
// and a table of nodes, then each node's files in a collapsed section.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### kcompile diff `%s` → `%s`\n\n", r.Base, r.Head)
	if r.Equal() {
		b.WriteString("No differences.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	if r.Topology != nil {
		// GitHub and GitLab render a mermaid block as its picture; the
		// picture's labels are entity-encoded, so no text ends the fence.
		b.WriteString("```mermaid\n" + r.Topology.Mermaid() + "```\n\n")
	}
	for _, l := range r.summaryLines() {
		b.WriteString("- " + mdEscape(l) + "\n")
	}
	for _, n := range r.Notes {
		b.WriteString("- **note:** " + mdEscape(n) + "\n")
	}
	if r.PoliciesChecked {
		lines := r.policyLines()
		b.WriteString("- " + mdEscape(lines[0]) + "\n")
		for _, p := range r.Policies {
			at := ""
			if p.Path != "" {
				at = " at " + mdEscape(p.Path)
			}
			fmt.Fprintf(&b, "  - **%s** %s (%s)%s: %s\n", p.Change, mdCode(p.ID), p.Severity, at, mdEscape(p.Message))
		}
	}
	if len(r.Steps) > 0 {
		b.WriteString("\n**How the change takes effect** (beyond the restarts):\n\n")
		for i, s := range r.Steps {
			fmt.Fprintf(&b, "%d. **%s**: %s\n", i+1, mdEscape(s.Setting), mdEscape(s.Why))
			for _, a := range s.Actions {
				b.WriteString("   - " + mdEscape(a) + "\n")
			}
		}
	}
	if len(r.Nodes) > 0 {
		b.WriteString("\n| Node | Change | Files | Restarts | Starts | Stops |\n|---|---|---|---|---|---|\n")
		for _, n := range r.Nodes {
			status := string(n.Status)
			if n.Reprovision {
				status += ", reprovision"
				if len(n.Affects) > 0 {
					status += " (affects " + mdEscape(strings.Join(n.Affects, ", ")) + ")"
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s |\n", mdEscape(n.Node), status, n.Files,
				mdList(n.Restarts), mdList(n.Starts), mdList(n.Stops))
		}
	}
	// Files grouped by node, cluster files first.
	groups := map[string][]FileChange{}
	var order []string
	for _, f := range r.Files {
		key := f.Node
		if _, ok := groups[key]; !ok {
			order = append(order, key)
		}
		groups[key] = append(groups[key], f)
	}
	for _, key := range order {
		title := "cluster"
		if key != "" {
			title = "node " + key
		}
		fs := groups[key]
		fmt.Fprintf(&b, "\n<details><summary>%s: %d file%s</summary>\n\n", mdEscape(title), len(fs), plural(len(fs)))
		for _, f := range fs {
			fmt.Fprintf(&b, "**`%s`** %s, %s\n\n", f.Path, f.Kind, f.Status)
			for _, d := range f.Details {
				b.WriteString("- " + mdCode(d) + "\n")
			}
			if len(f.Details) > 0 {
				b.WriteString("\n")
			}
			if f.Unified != "" {
				fence := "```"
				for strings.Contains(f.Unified, fence) {
					fence += "`"
				}
				b.WriteString(fence + "diff\n" + f.Unified + fence + "\n\n")
			}
		}
		b.WriteString("</details>\n")
	}
	_, err := io.WriteString(w, diag.Printable(b.String(), 0, '\n'))
	return err
}

// WriteJSON prints the report as data.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Equal bool `json:"equal"`
		*Report
	}{r.Equal(), r})
}

func mdEscape(s string) string {
	r := strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;", "*", `\*`, "_", `\_`, "`", "\\`")
	return r.Replace(s)
}

// mdCode shows a detail line as inline code, which needs no escaping but
// of its own backticks.
func mdCode(s string) string {
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		return fence + " " + s + " " + fence
	}
	return fence + s + fence
}

func mdList(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return mdEscape(strings.Join(xs, ", "))
}
