package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	"github.com/kcompile/kcompile/compare"
	"github.com/kcompile/kcompile/compiler/diag"
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
	ts := []pipeline.Target{pipeline.Target(c.Target)}
	if c.Target == "all" {
		ts = pipeline.Reviewed()
	}
	r, err := compare.Run(compare.Input{Args: c.Args, Git: c.Git, Golden: c.Golden, Secrets: c.Secrets, Targets: ts,
		Policies: c.Policy, Profile: c.Profile, Bound: e.bound, Now: e.now, Rand: rand.Reader, Cwd: e.cwd, Stage: e.progress.stage})
	var p *compare.Problems
	if errors.As(err, &p) {
		return nil, printDiagnostics(e, p.Diagnostics, p.Msg)
	}
	return r, err
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
