package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/kcompile/kcompile/picture"
)

// WriteJSON writes the plan as JSON, the states left out.
func (p *Plan) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}

// Steps counts the plan's steps.
func (p *Plan) Steps() int {
	n := 0
	for _, s := range p.Stages {
		n += len(s.Steps)
	}
	return n
}

// WriteText writes the plan for a terminal: each stage, its steps with
// their actions and gates, and the rules they follow.
func (p *Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "plan %s → %s: %s, %s, every state checked (%d)\n", p.From, p.To, count(len(p.Stages), "stage"), count(p.Steps(), "step"), p.States)
	if len(p.Stages) == 0 {
		b.WriteString("\nnothing to do: the running cluster is already the new one\n")
	}
	for i, s := range p.Stages {
		fmt.Fprintf(&b, "\nstage %d: %s\n", i+1, s.Name)
		if s.Why != "" {
			fmt.Fprintf(&b, "  (%s)\n", s.Why)
		}
		for _, st := range s.Steps {
			fmt.Fprintf(&b, "  %3d. %s", st.N, st.Kind)
			if len(st.Nodes) > 0 {
				fmt.Fprintf(&b, " %s", strings.Join(st.Nodes, ", "))
			}
			fmt.Fprintf(&b, "  [%s]\n", st.Rule)
			for _, a := range st.Actions {
				fmt.Fprintf(&b, "       - %s\n", a)
			}
			if st.Drain && st.DrainTimeout != "" {
				fmt.Fprintf(&b, "       drain within %s\n", st.DrainTimeout)
			}
			for _, g := range st.Gates {
				fmt.Fprintf(&b, "       wait: %s\n", g)
			}
			for _, wn := range st.Warnings {
				fmt.Fprintf(&b, "       warning: %s\n", wn)
			}
		}
	}
	if len(p.Rules) > 0 {
		b.WriteString("\nrules:\n")
		for _, r := range p.Rules {
			fmt.Fprintf(&b, "  %s: %s\n", r.ID, r.Text)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdown writes the plan for a pull request: a table of the
// steps per stage, and the rules.
func (p *Plan) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### kcompile plan: `%s` → `%s`\n\n", mdCode(p.From), mdCode(p.To))
	fmt.Fprintf(&b, "%s, %s; every state between the two clusters compiled and checked (%d).\n", count(len(p.Stages), "stage"), count(p.Steps(), "step"), p.States)
	if len(p.Stages) > 0 {
		// GitHub and GitLab render a mermaid block as its picture.
		b.WriteString("\n```mermaid\n" + p.Picture().Mermaid() + "```\n")
	}
	for i, s := range p.Stages {
		fmt.Fprintf(&b, "\n#### Stage %d: %s\n\n", i+1, mdCell(s.Name))
		if s.Why != "" {
			fmt.Fprintf(&b, "%s\n\n", mdCell(s.Why))
		}
		b.WriteString("| # | Step | Nodes | Restarts | Waits for | Rule |\n|---|---|---|---|---|---|\n")
		for _, st := range s.Steps {
			kind := st.Kind
			if st.Drain {
				kind += " (drained)"
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | `%s` |\n", st.N, mdCell(kind), mdCell(strings.Join(st.Nodes, ", ")),
				mdCell(strings.Join(st.Restarts, ", ")), mdCell(strings.Join(st.Gates, "; ")), st.Rule)
		}
	}
	if len(p.Rules) > 0 {
		b.WriteString("\n<details><summary>Rules</summary>\n\n")
		for _, r := range p.Rules {
			fmt.Fprintf(&b, "- `%s`: %s\n", r.ID, mdCell(r.Text))
		}
		b.WriteString("\n</details>\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdCell keeps a value inside its table cell: no line breaks, no pipes,
// no HTML.
func mdCell(s string) string {
	r := strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ", "<", "&lt;", ">", "&gt;", "`", "'")
	return r.Replace(s)
}

func mdCode(s string) string { return strings.ReplaceAll(mdCell(s), "`", "'") }

func count(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// Picture is the plan's stages as a picture: each stage a group of its
// runs of alike steps, in order.
func (p *Plan) Picture() picture.Stages {
	out := picture.Stages{Title: "plan " + p.From + " → " + p.To}
	for _, s := range p.Stages {
		ps := picture.Stage{Name: s.Name}
		for i := 0; i < len(s.Steps); {
			j := i
			var nodes []string
			for j < len(s.Steps) && s.Steps[j].Kind == s.Steps[i].Kind {
				nodes = append(nodes, s.Steps[j].Nodes...)
				j++
			}
			first, last := s.Steps[i], s.Steps[j-1]
			lines := []string{first.Kind + " (" + count(j-i, "step") + ")"}
			if len(nodes) > 0 {
				lines = append(lines, shortList(nodes))
			}
			steps := fmt.Sprintf("step %d", first.N)
			if last.N != first.N {
				steps = fmt.Sprintf("steps %d–%d", first.N, last.N)
			}
			lines = append(lines, steps)
			ps.Runs = append(ps.Runs, picture.Run{Kind: runKind(first.Kind), Lines: lines})
			i = j
		}
		out.Stages = append(out.Stages, ps)
	}
	return out
}

// shortList names up to six nodes, and the first three and the last of
// more.
func shortList(nodes []string) string {
	if len(nodes) <= 6 {
		return strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s … %s (%d nodes)", strings.Join(nodes[:3], ", "), nodes[len(nodes)-1], len(nodes))
}

func runKind(kind string) picture.RunKind {
	switch {
	case kind == "etcd":
		return picture.RunEtcd
	case kind == "workers":
		return picture.RunWorkers
	case strings.HasPrefix(kind, "add "):
		return picture.RunAdd
	case strings.HasPrefix(kind, "remove "):
		return picture.RunRemove
	case kind == "explicit" || kind == KindLabels:
		return picture.RunExplicit
	case kind == "addons":
		return picture.RunAddons
	}
	return picture.RunControlPlane
}
