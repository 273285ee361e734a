package main

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/review"
)

type diffCmd struct {
	Args    []string `arg:"" optional:"" help:"BASE HEAD: two spec directories. With --git: the spec directory (default .). With --golden: GOLDEN OUT, a golden directory and a built tree."`
	Git     string   `placeholder:"REV1..REV2" help:"Compare the spec at two git revisions instead of two directories."`
	Golden  bool     `help:"Compare a built tree (OUT) with a golden directory (GOLDEN), as the golden tests do; file modes are not compared (git keeps none)."`
	Secrets string   `short:"s" placeholder:"FILE" help:"Secrets bundle both sides are compiled with. Without it both are compiled with one throwaway bundle: the cluster's structure and certificates' identities are compared, key material is not (the output says so)."`
	Target  string   `short:"t" enum:"${diff_targets}" default:"systemd" help:"Which target to compare: systemd, cloudinit, ignition or all (the three)."`
	Output  string   `short:"o" enum:"text,markdown,json" default:"text" help:"Output format: text, markdown (a pull-request comment) or json."`
	Policy  []string `placeholder:"PDIR" help:"Hold both sides to the organisation policies of PDIR (repeatable) and report the violations the change introduces and fixes."`
	Profile string   `enum:",cis" default:"" help:"With --policy: the benchmark both sides are checked with, as check --profile (policies read it as facts.profile)."`
	Color   string   `enum:"auto,always,never" default:"auto" help:"Colour text output: auto (on a terminal), always or never."`
	MaxSize int      `name:"max-size" default:"60000" help:"With --output markdown: the most characters the comment may have (GitHub takes 65,536); above it the files' diffs are cut first, and the comment says what it left out. 0: no bound."`
}

// Run compares; exit 0 when equal, 1 when different, 2 on any error.
func (c *diffCmd) Run(e *env) error {
	r, err := c.compare(e)
	if err != nil {
		var s statusError
		if errors.As(err, &s) {
			return statusError{code: exitUsage, msg: s.msg}
		}
		return statusError{code: exitUsage, msg: err.Error()}
	}
	switch c.Output {
	case "json":
		err = r.WriteJSON(e.stdout)
	case "markdown":
		err = r.WriteMarkdown(e.stdout, review.MarkdownOptions{MaxSize: c.MaxSize, TextCommand: c.textCommand()})
	default:
		colour := c.Color == "always" || (c.Color == "auto" && isTerminal(e.stdout))
		err = r.WriteText(e.stdout, colour)
	}
	if err != nil {
		return statusError{code: exitUsage, msg: err.Error()}
	}
	e.progress.done(fmt.Sprintf("compared %s with %s: %s and %s changed, %s",
		diag.Printable(r.Base, maxShown), diag.Printable(r.Head, maxShown), plural(len(r.Nodes), "node"), plural(len(r.Files), "file"), plural(len(r.Findings), "finding")))
	if !r.Equal() {
		return statusError{code: exitProblems}
	}
	return nil
}

func (c *diffCmd) compare(e *env) (*review.Report, error) {
	switch {
	case c.Golden:
		if c.Git != "" || len(c.Args) != 2 {
			return nil, errors.New("diff --golden takes GOLDEN OUT: a golden directory and a built tree")
		}
		golden, err := review.ReadDir(c.Args[0])
		if err != nil {
			return nil, err
		}
		built, err := review.ReadDir(c.Args[1])
		if err != nil {
			return nil, err
		}
		if built, err = review.WithSummaries(built); err != nil {
			return nil, err
		}
		return review.Compare(review.Side{Label: c.Args[0], Tree: golden}, review.Side{Label: c.Args[1], Tree: built},
			review.Options{IgnoreModes: true}), nil
	case c.Git != "":
		if len(c.Args) > 1 {
			return nil, errors.New("diff --git REV1..REV2 takes at most one spec directory")
		}
		dir := "."
		if len(c.Args) == 1 {
			dir = c.Args[0]
		}
		rev1, rev2, ok := strings.Cut(c.Git, "..")
		if !ok || rev1 == "" || rev2 == "" || strings.HasPrefix(rev2, ".") {
			return nil, fmt.Errorf("--git %q: write two revisions as REV1..REV2", c.Git)
		}
		b, err := c.bundle(e)
		if err != nil {
			return nil, err
		}
		var sides [2]review.Side
		for i, rev := range []string{rev1, rev2} {
			tmp, err := os.MkdirTemp("", "kcompile-diff-")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(tmp)
			if err := exportSpec(dir, rev, tmp); err != nil {
				return nil, err
			}
			// Positions name the revision, not the temporary copy that
			// is gone when the report is read.
			at := func(l diag.List) diag.List { return underName(l, tmp, rev+":"+filepath.ToSlash(filepath.Clean(dir))) }
			if sides[i], err = c.side(e, b, tmp, rev+":"+dir, at); err != nil {
				return nil, err
			}
		}
		return c.compareSides(sides[0], sides[1]), nil
	}
	if len(c.Args) != 2 {
		return nil, errors.New("diff takes BASE HEAD (two spec directories), --git REV1..REV2 [DIR] or --golden GOLDEN OUT")
	}
	b, err := c.bundle(e)
	if err != nil {
		return nil, err
	}
	var sides [2]review.Side
	for i, dir := range c.Args {
		if sides[i], err = c.side(e, b, dir, dir, func(l diag.List) diag.List { return l.Relative(e.cwd) }); err != nil {
			return nil, err
		}
	}
	return c.compareSides(sides[0], sides[1]), nil
}

// bundle is the secrets bundle of --secrets, or else one made for this
// comparison alone (as secrets init makes one, from the clock and
// crypto/rand), which both sides share so that only the spec's change
// shows; it is never written anywhere.
func (c *diffCmd) bundle(e *env) (*pki.Bundle, error) {
	if c.Secrets == "" {
		return pki.New(rand.Reader, e.now, pki.NewOptions{Algorithm: pki.ECDSAP256, CAValidity: throwawayCAValidity})
	}
	b, diags, err := loadBundle(c.Secrets)
	if err != nil {
		return nil, err
	}
	if diags.HasErrors() {
		return nil, printDiagnostics(e, diags, "cannot use the secrets bundle "+c.Secrets)
	}
	return b, nil
}

// throwawayCAValidity is secrets init's default, so that a spec's leaf
// validity fits the throwaway CAs as it fits a bundle made by default.
const throwawayCAValidity = 10 * 365 * 24 * time.Hour

func (c *diffCmd) compareSides(a, b review.Side) *review.Report {
	return review.Compare(a, b, review.Options{ThrowawayKeys: c.Secrets == ""})
}

// textCommand is the command that prints this comparison as text, which
// a Markdown report too long for a comment names for what it left out.
func (c *diffCmd) textCommand() string {
	args := []string{"kcompile", "diff"}
	if c.Git != "" {
		args = append(args, "--git", c.Git)
	}
	if c.Golden {
		args = append(args, "--golden")
	}
	args = append(args, c.Args...)
	if c.Secrets != "" {
		args = append(args, "-s", c.Secrets)
	}
	if c.Target != "systemd" {
		args = append(args, "-t", c.Target)
	}
	for _, p := range c.Policy {
		args = append(args, "--policy", p)
	}
	if c.Profile != "" {
		args = append(args, "--profile", c.Profile)
	}
	args = append(args, "-o", "text")
	for i, a := range args {
		args[i] = shQuote(a)
	}
	return strings.Join(args, " ")
}

// underName rewrites the positions of diagnostics in the directory dir
// as positions under name.
func underName(l diag.List, dir, name string) diag.List {
	out := make(diag.List, len(l))
	for i, d := range l {
		d.Positions = slices.Clone(d.Positions)
		for j, p := range d.Positions {
			if rel, err := filepath.Rel(dir, p.File); err == nil && filepath.IsAbs(p.File) && !strings.HasPrefix(rel, "..") {
				d.Positions[j].File = name + "/" + filepath.ToSlash(rel)
			}
		}
		out[i] = d
	}
	return out
}

// side compiles one spec with the shared bundle (and, with --policy, its
// policies, in the same compile) and builds the target(s). Its warnings
// are not printed: the report compares them. at rewrites the positions
// of its diagnostics for the report.
func (c *diffCmd) side(e *env, b *pki.Bundle, dir, label string, at func(diag.List) diag.List) (review.Side, error) {
	names := []pipeline.Target{pipeline.Target(c.Target)}
	if c.Target == "all" {
		names = pipeline.Reviewed()
	}
	src := compiler.Source{Dir: dir, Bound: e.bound, Policies: c.Policy}
	if len(c.Policy) > 0 {
		src.Profile = c.Profile
	}
	out, err := pipeline.Run(pipeline.Input{Source: src, Bundle: b, Now: e.now, Issue: true, Targets: names, Stage: e.progress.stage, Findings: true})
	if err != nil {
		return review.Side{}, err
	}
	if err := out.PolicyLoadError(); err != nil {
		return review.Side{}, fmt.Errorf("%s: %w", label, err)
	}
	if out.Diagnostics.HasErrors() {
		msg := "nothing compared"
		switch {
		case out.Cluster == nil:
			msg = "the spec has errors; `kcompile check` explains them"
		case out.Material == nil:
			msg = "the spec and the secrets bundle do not fit together"
		}
		err := printDiagnostics(e, out.Diagnostics, msg)
		var s statusError
		if errors.As(err, &s) {
			return review.Side{}, fmt.Errorf("%s: %s", label, s.msg)
		}
		return review.Side{}, err
	}
	compiled := review.Compiled{Cluster: out.Cluster, Material: out.Material, Diagnostics: out.Diagnostics, Findings: out.Findings}
	for _, t := range names {
		compiled.Trees = append(compiled.Trees, review.NamedTree{Name: string(t), Tree: out.Trees[t]})
	}
	for _, w := range out.Waivers {
		compiled.Waivers = append(compiled.Waivers, review.Waiver{ID: w.ID, Reason: w.Reason, Positions: w.Positions, Waives: w.Waives})
	}
	return review.SideOf(label, compiled, at)
}

// exportSpec writes the files of the spec directory dir as they are at
// git revision rev into out.
func exportSpec(dir, rev, out string) error {
	git := func(args ...string) ([]byte, error) {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return b, nil
	}
	if _, err := git("rev-parse", "--verify", "--quiet", rev+"^{commit}"); err != nil {
		return fmt.Errorf("%s is not a revision of the repository at %s: %w", rev, dir, err)
	}
	// Paths relative to dir, and only those below it.
	list, err := git("ls-tree", "-r", "-z", "--name-only", rev, "--", ".")
	if err != nil {
		return err
	}
	n := 0
	for _, name := range strings.Split(string(list), "\x00") {
		if name == "" {
			continue
		}
		data, err := git("show", rev+":./"+name)
		if err != nil {
			return err
		}
		p := filepath.Join(out, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s has no files at %s", dir, rev)
	}
	return nil
}
