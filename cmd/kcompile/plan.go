package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/kcompile/kcompile/compare"
	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/plan"
	"github.com/kcompile/kcompile/targets"
)

type planCmd struct {
	Args       []string `arg:"" optional:"" help:"OLD NEW: two spec directories, the running cluster's and the one to become. With --git: the spec directory (default .)."`
	Git        string   `placeholder:"REV1..REV2" help:"Plan the change of the spec between two git revisions instead of two directories."`
	Via        []string `placeholder:"VERSION" help:"The release of each Kubernetes minor the change passes through (repeatable): 1.35 → 1.37 passes through 1.36, as --via 1.36.4."`
	Secrets    string   `short:"s" placeholder:"FILE" help:"Secrets bundle both sides are compiled with; without it, one throwaway bundle."`
	OldSecrets string   `placeholder:"FILE" help:"Secrets bundle OLD is compiled with, when the change is of the bundle too: a stage of kcompile secrets rotate, or a renewal (NEW's is --secrets)."`
	Policy     []string `placeholder:"PDIR" help:"Hold every state of the plan to the organisation policies of PDIR (repeatable)."`
	Profile    string   `enum:",cis" default:"" help:"With --policy: the benchmark every state is checked with."`
	Output     string   `short:"o" enum:"text,markdown,json" default:"text" help:"Output format: text, markdown (a pull-request comment) or json."`
	States     string   `placeholder:"DIR" help:"Write the state each step leaves as a spec of its own, DIR/step-NNN/state.cue, for kcompile check, build or diff (a directory kcompile owns, written atomically)."`
}

var viaVersion = regexp.MustCompile(`^1\.([0-9]+)\.[0-9]+$`)

// planError is how plan and apply end on compare.Plan's error: a side's
// diagnostics printed, a refusal (prefixed by refused) or any other
// error.
func planError(e *env, err error, refused string) error {
	var problems *compare.Problems
	if errors.As(err, &problems) {
		return printDiagnostics(e, problems.Diagnostics, problems.Msg)
	}
	var r *plan.Refusal
	if errors.As(err, &r) {
		// A state's diagnostics name spec paths: the state is in memory,
		// its file positions would point nowhere.
		return statusError{code: exitProblems, msg: refused + r.Error()}
	}
	return statusError{code: exitUsage, msg: err.Error()}
}

// parseVia reads --via: the release of each minor, by minor.
func parseVia(releases []string) (map[int]string, error) {
	via := map[int]string{}
	for _, v := range releases {
		m := viaVersion.FindStringSubmatch(v)
		if m == nil {
			return nil, statusError{code: exitUsage, msg: fmt.Sprintf("--via %q: give a Kubernetes release as 1.MINOR.PATCH, such as 1.36.4", v)}
		}
		minor, _ := strconv.Atoi(m[1])
		if prev, ok := via[minor]; ok && prev != v {
			return nil, statusError{code: exitUsage, msg: fmt.Sprintf("--via names two releases of 1.%d: %s and %s", minor, prev, v)}
		}
		via[minor] = v
	}
	return via, nil
}

// Run plans; exit 0 with a plan, 1 when the plan is refused, 2 on any
// other error.
func (c *planCmd) Run(e *env) error {
	via, err := parseVia(c.Via)
	if err != nil {
		return err
	}
	if c.OldSecrets != "" && c.Secrets == "" {
		return statusError{code: exitUsage, msg: "--old-secrets needs --secrets: NEW's bundle"}
	}
	p, err := compare.Plan(compare.Input{Args: c.Args, Git: c.Git, Secrets: c.Secrets, OldSecrets: c.OldSecrets, Policies: c.Policy, Profile: c.Profile,
		Bound: e.bound, Now: e.now, Rand: rand.Reader, Cwd: e.cwd, Stage: e.progress.stage}, via)
	if err != nil {
		return planError(e, err, "plan refused: ")
	}
	switch c.Output {
	case "json":
		err = p.WriteJSON(e.stdout)
	case "markdown":
		err = p.WriteMarkdown(e.stdout)
	default:
		err = p.WriteText(e.stdout)
	}
	if err != nil {
		return statusError{code: exitUsage, msg: err.Error()}
	}
	if c.States != "" {
		tree := targets.NewTree()
		for _, s := range p.Stages {
			for _, st := range s.Steps {
				text, err := compiler.StateText(st.State)
				if err == nil {
					err = tree.Add(fmt.Sprintf("step-%03d/state.cue", st.N), text, 0o644)
				}
				if err != nil {
					return statusError{code: exitUsage, msg: err.Error()}
				}
			}
		}
		// States hold no key material: the manifest is not bound to a
		// bundle, as up's and sim's trees are not.
		if err := writeTree(e, c.States, tree, nil, false); err != nil {
			return err
		}
	}
	e.progress.done(fmt.Sprintf("planned %s → %s: %s, %s, every state checked", p.From, p.To, plural(len(p.Stages), "stage"), plural(p.Steps(), "step")))
	return nil
}
