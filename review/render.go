package review

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/picture"
)

// summaryLines are the report's summary, shared by text and markdown.
// With keep > 0 a list of nodes names its first keep nodes and counts
// the rest, for a comment that must stay short.
func (r *Report) summaryLines(keep int) []string {
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
		switch {
		case len(xs) == 0:
			return ""
		case keep > 0 && len(xs) > keep:
			return fmt.Sprintf(" (%s and %d more)", strings.Join(xs[:keep], ", "), len(xs)-keep)
		}
		return " (" + strings.Join(xs, ", ") + ")"
	}
	out := []string{fmt.Sprintf("nodes: %d added%s, %d removed%s, %d changed%s",
		len(added), list(added), len(removed), list(removed), len(changed), list(changed))}
	if r.Etcd != nil {
		out = append(out, "etcd: "+r.Etcd.Summary())
	}
	if r.Topology != nil {
		for _, z := range r.Topology.Zones {
			out = append(out, "failure domain: "+z.String())
		}
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
		for _, n := range r.NotCompared {
			b.WriteString("not compared: " + n + "\n")
		}
	} else {
		// What got worse first: it is what a reviewer must not miss.
		if r.showFindings() {
			b.WriteString(r.findingsTitle() + "\n")
			for _, f := range r.Findings {
				for _, l := range f.lines() {
					b.WriteString(l + "\n")
				}
			}
			for _, w := range r.Waivers {
				b.WriteString(w.line() + "\n")
			}
		}
		for _, n := range r.NotCompared {
			b.WriteString("not compared: " + n + "\n")
		}
		for i, l := range r.summaryLines(0) {
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
		case strings.HasPrefix(body, "  "+Introduces+" "):
			b.WriteString(p.red + body + p.reset + nl)
		case strings.HasPrefix(body, "  "+Fixes+" "):
			b.WriteString(p.green + body + p.reset + nl)
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

// DefaultMaxMarkdown is the size a Markdown report keeps under by
// default, in characters: GitHub refuses a pull-request comment above
// 65,536, and a bot's comment often has a line or two of its own.
const DefaultMaxMarkdown = 60000

// MarkdownOptions shape a pull-request comment.
type MarkdownOptions struct {
	// MaxSize bounds the comment, in characters; 0 leaves it unbounded.
	// Above it, the files' details are cut first (whole files, in
	// order), then the summary's lists of nodes, the node table, the
	// steps' commands and the findings, each saying what it left out;
	// the title and the picture stay.
	MaxSize int
	// TextCommand prints the whole report as text: the comment names it
	// for what it left out.
	TextCommand string
}

// mdPart is one section of the comment: render(k) writes it with its
// first k items (k == n: all of them), saying what it left out.
type mdPart struct {
	n      int
	render func(k int) string
}

// WriteMarkdown prints the report as a pull-request comment: what the
// change introduces and fixes, what was not compared, the picture, the
// summary, the steps and a table of nodes, then each node's files in a
// collapsed section. A collapsed section still counts toward the size a
// comment may have, so above opts.MaxSize parts are cut, not folded.
func (r *Report) WriteMarkdown(w io.Writer, opts MarkdownOptions) error {
	title := fmt.Sprintf("### kcompile diff %s → %s\n\n", mdCode(r.Base), mdCode(r.Head))
	if r.Equal() {
		out := title + "No differences.\n"
		if len(r.NotCompared) > 0 {
			out += "\n" + r.mdNotCompared()
		}
		_, err := io.WriteString(w, diag.Printable(out, 0, '\n'))
		return err
	}
	rest := "run " + mdCode(opts.TextCommand) + " for them"
	if opts.TextCommand == "" {
		rest = "the text output has them"
	}
	bound := ""
	if opts.MaxSize > 0 {
		bound = fmt.Sprintf(" to keep this comment under %s characters", picture.Thousands(opts.MaxSize))
	}
	fixed := func(s string) mdPart { return mdPart{render: func(int) string { return s }} }
	picture := ""
	if r.Topology != nil {
		// GitHub and GitLab render a mermaid block as its picture; the
		// picture's labels are entity-encoded, so no text ends the fence.
		picture = "```mermaid\n" + r.Topology.Mermaid() + "```\n\n"
	}
	summary := mdPart{n: 1, render: func(k int) string {
		keep := 0
		if k == 0 {
			keep = 10
		}
		var b strings.Builder
		for _, l := range r.summaryLines(keep) {
			b.WriteString("- " + mdEscape(l) + "\n")
		}
		for _, n := range r.Notes {
			b.WriteString("- **note:** " + mdEscape(n) + "\n")
		}
		return b.String()
	}}
	findings := mdPart{n: len(r.Findings), render: func(k int) string { return r.mdFindings(k, bound, rest) }}
	steps := mdPart{n: r.actions(), render: func(k int) string { return r.mdSteps(k, bound, rest) }}
	table := mdPart{n: len(r.Nodes), render: func(k int) string { return r.mdTable(k, bound) }}
	files := mdPart{n: len(r.Files), render: func(k int) string { return r.mdFiles(k, bound, rest) }}
	parts := []mdPart{fixed(title), findings, fixed(r.mdNotCompared()), fixed(picture), summary, steps, table, files}
	// The least useful part is cut first: the files' diffs, the
	// summary's lists of nodes (the table names them too), the table, the
	// steps' commands and last the findings.
	cut := []int{7, 4, 6, 5, 1}

	keep := make([]int, len(parts))
	size := make([]int, len(parts))
	total := 0
	for i, p := range parts {
		keep[i] = p.n
		size[i] = mdSize(p.render(p.n))
		total += size[i]
	}
	for _, i := range cut {
		if opts.MaxSize <= 0 || total <= opts.MaxSize {
			break
		}
		others := total - size[i]
		// The largest k that fits: sizes grow with k.
		lo, hi := 0, parts[i].n
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if others+mdSize(parts[i].render(mid)) <= opts.MaxSize {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		keep[i] = lo
		size[i] = mdSize(parts[i].render(lo))
		total = others + size[i]
	}
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(diag.Printable(p.render(keep[i]), 0, '\n'))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdSize is the characters a part of the comment takes once printed.
func mdSize(s string) int { return utf8.RuneCountInString(diag.Printable(s, 0, '\n')) }

// mdFindings is the section on the findings, its first k listed.
func (r *Report) mdFindings(k int, bound, rest string) string {
	if !r.showFindings() {
		return ""
	}
	var b strings.Builder
	t := r.findingsTitle()
	name, counts, _ := strings.Cut(t, ": ")
	fmt.Fprintf(&b, "**%s%s:** %s\n\n", strings.ToUpper(name[:1]), mdEscape(name[1:]), mdEscape(counts))
	for _, f := range r.Findings[:k] {
		where := ""
		if f.Path != "" {
			where = " at " + mdEscape(oneLine(f.Path))
		}
		if len(f.Positions) > 0 {
			where += " (" + mdCode(f.Positions[0]) + ")"
		}
		what := mdEscape(f.Severity) + " " + mdCode(f.Code)
		if f.Source == SourcePolicy {
			what = "policy " + mdCode(f.Code) + " (" + mdEscape(f.Severity) + ")"
		}
		waived := ""
		if f.Waived {
			waived = " — **waived by this change:** " + mdEscape(oneLine(fmt.Sprintf("%q", f.WaiverReason)))
		}
		fmt.Fprintf(&b, "- **%s** %s%s: %s%s\n", f.Change, what, where, mdEscape(oneLine(f.Message)), waived)
		if f.Hint != "" {
			b.WriteString("  - hint: " + mdEscape(oneLine(f.Hint)) + "\n")
		}
	}
	if left := len(r.Findings) - k; left > 0 {
		fmt.Fprintf(&b, "- … %d more left out%s; %s\n", left, bound, rest)
	}
	// Waivers are never cut: each relaxes a policy.
	for _, w := range r.Waivers {
		b.WriteString(w.mdLine())
	}
	b.WriteString("\n")
	return b.String()
}

// mdNotCompared says what the comparison left out.
func (r *Report) mdNotCompared() string {
	if len(r.NotCompared) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("**Not compared:**\n\n")
	for _, n := range r.NotCompared {
		b.WriteString("- " + mdEscape(n) + "\n")
	}
	b.WriteString("\n")
	return b.String()
}

// actions counts the steps' commands.
func (r *Report) actions() int {
	n := 0
	for _, s := range r.Steps {
		n += len(s.Actions)
	}
	return n
}

// mdSteps is how the change takes effect, with its first k commands.
func (r *Report) mdSteps(k int, bound, rest string) string {
	if len(r.Steps) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n**How the change takes effect** (beyond the restarts):\n\n")
	for i, s := range r.Steps {
		fmt.Fprintf(&b, "%d. **%s**: %s\n", i+1, mdEscape(s.Setting), mdEscape(s.Why))
		shown := min(k, len(s.Actions))
		for _, a := range s.Actions[:shown] {
			b.WriteString("   - " + mdEscape(a) + "\n")
		}
		if left := len(s.Actions) - shown; left > 0 {
			fmt.Fprintf(&b, "   - … %d more left out%s; %s\n", left, bound, rest)
		}
		k -= shown
	}
	return b.String()
}

// mdTable is the table of nodes, its first k rows.
func (r *Report) mdTable(k int, bound string) string {
	if len(r.Nodes) == 0 {
		return ""
	}
	var b strings.Builder
	if k > 0 {
		b.WriteString("\n| Node | Change | Files | Restarts | Starts | Stops |\n|---|---|---|---|---|---|\n")
	}
	for _, n := range r.Nodes[:k] {
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
	if left := len(r.Nodes) - k; left > 0 {
		more := ""
		if k > 0 {
			more = " more"
		}
		fmt.Fprintf(&b, "\n%d%s node%s left out of the table%s; the summary counts them.\n", left, more, plural(left), bound)
	}
	return b.String()
}

// mdFiles is the files grouped by node, cluster files first, each group
// collapsed; the first k files only, and then what was left out.
func (r *Report) mdFiles(k int, bound, rest string) string {
	var b strings.Builder
	groups := map[string][]FileChange{}
	var order []string
	for _, f := range r.Files {
		key := f.Node
		if _, ok := groups[key]; !ok {
			order = append(order, key)
		}
		groups[key] = append(groups[key], f)
	}
	shown := 0
	leftNodes := 0
	for _, key := range order {
		fs := groups[key]
		n := min(len(fs), k-shown)
		if n < len(fs) && key != "" {
			leftNodes++
		}
		if n <= 0 {
			continue
		}
		title := "cluster"
		if key != "" {
			title = "node " + key
		}
		count := fmt.Sprintf("%d file%s", len(fs), plural(len(fs)))
		if n < len(fs) {
			count = fmt.Sprintf("%d of %d files", n, len(fs))
		}
		fmt.Fprintf(&b, "\n<details><summary>%s: %s</summary>\n\n", mdEscape(title), count)
		for _, f := range fs[:n] {
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
		shown += n
	}
	if left := len(r.Files) - shown; left > 0 {
		of := ""
		if leftNodes > 0 {
			of = fmt.Sprintf(" (from %d node%s)", leftNodes, plural(leftNodes))
		}
		fmt.Fprintf(&b, "\n**%d of %d files' diffs left out**%s%s; %s.\n", left, len(r.Files), of, bound, rest)
	}
	return b.String()
}

// WriteJSON prints the report as data.
func (r *Report) WriteJSON(w io.Writer) error {
	return diag.EncodeJSON(w, struct {
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
