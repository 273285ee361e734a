package compiler

// A scenario is a spec too: its file is loaded and unified with #Scenario
// of the schema like a spec with #Cluster, its CUE errors are converted
// the same way, and what it names is checked against the compiled cluster
// before the simulator starts anything, so a typo costs no cluster boot.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"
	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/schema"
)

const (
	CodeScenarioLoad         = "KC1701"
	CodeScenarioShape        = "KC1702"
	CodeScenarioNode         = "KC1703"
	CodeScenarioEtcd         = "KC1704"
	CodeScenarioControlPlane = "KC1705"
	CodeScenarioNodesReady   = "KC1706"
	CodeScenarioDuration     = "KC1707"
	CodeScenarioNotOn        = "KC1708"
	CodeScenarioManifest     = "KC1709"
)

// scenarioRules are the rules LoadScenario reports besides the schema's
// own (KC0003, KC0004); no spec check raises them.
func scenarioRules() []diag.Rule {
	rules := []diag.Rule{
		rule(CodeScenarioLoad, diag.Error, "a scenario file cannot be read or is not CUE (syntax error)"),
		rule(CodeScenarioShape, diag.Error, "a scenario step, target, wait or expectation sets none or more than one of its alternatives"),
		rule(CodeScenarioNode, diag.Error, "a scenario step names a node the cluster does not have, or expects a node without a kubelet to be Ready"),
		rule(CodeScenarioEtcd, diag.Error, "a scenario step names an etcd member the cluster does not have"),
		rule(CodeScenarioControlPlane, diag.Error, "a scenario step names a control-plane node the cluster does not have"),
		rule(CodeScenarioNodesReady, diag.Error, "a scenario waits for more Ready nodes than the cluster has nodes with a kubelet"),
		rule(CodeScenarioDuration, diag.Error, "a scenario timeout or wait is zero or too long to be a duration"),
		rule(CodeScenarioNotOn, diag.Error, "a pod expectation's notOn names a node the cluster does not have"),
		rule(CodeScenarioManifest, diag.Error, "the manifests of an apply step are not YAML objects with apiVersion and kind"),
	}
	for i := range rules {
		rules[i].Family = "scenario"
	}
	return rules
}

// maxScenarioBytes bounds a scenario file: a path to something endless (a
// device, a pipe) must not hang or exhaust the command.
const maxScenarioBytes = 4 << 20

// LoadScenario reads the scenario at file, checks it against the schema
// of c's version and against c (the nodes, etcd members and control-plane
// nodes it names, the Ready nodes it waits for), and returns it typed.
// With a nil cluster only the file and the schema are checked. The
// scenario is nil when any diagnostic is an error; the diagnostics are
// sorted.
func LoadScenario(file string, c *ir.Cluster) (*ir.Scenario, diag.List) {
	src, err := readScenario(file)
	if err != nil {
		return nil, diag.List{{Code: CodeScenarioLoad, Severity: diag.Error, Message: err.Error(),
			Positions: []diag.Pos{{File: file}}, Hint: "pass a readable CUE file of steps (see runtimes/sim/testdata/)"}}
	}
	ctx := cuecontext.New()
	f, err := parser.ParseFile(file, src, parser.ParseComments)
	if err != nil {
		return nil, fromCUE(err, CodeScenarioLoad, nil, "fix the syntax error at the position shown").Sorted()
	}
	user := ctx.BuildFile(f)
	// The overlay lets messages quote the file without reading it again.
	l := &loaded{src: Source{Overlay: map[string][]byte{file: src}}, user: user, firstFile: file,
		written: map[string][]token.Pos{}, labels: map[string][]token.Pos{},
		words: docWords{noun: "scenario", explains: "schema/v1alpha1/scenario.cue says what each field means",
			lists: "schema/v1alpha1/scenario.cue declares the fields"}}
	recordWritten(user, l.written, l.labels)
	if err := user.Err(); err != nil {
		return nil, fromCUE(err, CodeSchema, l, "").Sorted()
	}
	version := schema.Versions()[len(schema.Versions())-1]
	if c != nil {
		if v, ok := schema.Lookup(c.APIVersion); ok {
			version = v
		}
	}
	def, err := buildSchema(ctx, version, "#Scenario")
	if err != nil {
		return nil, diag.List{{Code: CodeInternal, Severity: diag.Error, Message: "internal error: embedded schema does not build: " + err.Error()}}
	}
	l.def = def
	l.value = user.Unify(def)
	if diags := l.validate(); diags.HasErrors() {
		return nil, diags.Sorted()
	}
	var sf scenarioFile
	if err := l.value.Decode(&sf); err != nil {
		return nil, diag.List{{Code: CodeInternal, Severity: diag.Error, Message: "internal error: a scenario the schema accepts does not decode: " + err.Error(),
			Positions: []diag.Pos{{File: file}}}}
	}
	sc := &scenarioCheck{l: l, c: c}
	out := sc.lower(file, sf)
	if sc.diags.HasErrors() {
		return nil, sc.diags.Sorted()
	}
	return out, sc.diags.Sorted()
}

func readScenario(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("scenario file %s does not exist", diag.Quote(file))
		}
		return nil, err
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, maxScenarioBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", diag.Quote(file), err)
	}
	if len(src) > maxScenarioBytes {
		return nil, fmt.Errorf("scenario file %s is larger than %d bytes", diag.Quote(file), maxScenarioBytes)
	}
	return src, nil
}

// scenarioFile is a scenario as the schema shapes it; pointers tell the
// alternatives the user set from those they did not.
type scenarioFile struct {
	Name  string `json:"name"`
	Steps []struct {
		Apply *string `json:"apply"`
		Wait  *struct {
			Pods       *podsFile `json:"pods"`
			NodesReady *int      `json:"nodesReady"`
			Timeout    string    `json:"timeout"`
		} `json:"wait"`
		Stop   *targetFile `json:"stop"`
		Start  *targetFile `json:"start"`
		Expect *struct {
			API    *string   `json:"api"`
			Write  *string   `json:"write"`
			Node   *string   `json:"node"`
			Ready  bool      `json:"ready"`
			Pods   *podsFile `json:"pods"`
			Within string    `json:"within"`
		} `json:"expect"`
	} `json:"steps"`
}

type targetFile struct {
	Node         *string `json:"node"`
	Etcd         *string `json:"etcd"`
	ControlPlane *string `json:"controlPlane"`
}

type podsFile struct {
	Namespace string   `json:"namespace"`
	Selector  string   `json:"selector"`
	Running   int      `json:"running"`
	NotOn     []string `json:"notOn"`
}

// scenarioCheck lowers a decoded scenario into the IR, collecting a
// diagnostic for everything that does not fit the cluster.
type scenarioCheck struct {
	l     *loaded
	c     *ir.Cluster
	diags diag.List
}

func (sc *scenarioCheck) report(code, path, msg, hint string) {
	sc.diags.Add(diag.Diagnostic{Code: code, Severity: diag.Error, Path: path, Message: msg,
		Positions: convertPositions(sc.l.userPositions(path)), Hint: hint})
}

func (sc *scenarioCheck) pos(path string) ir.Pos {
	if ps := sc.l.userPositions(path); len(ps) > 0 {
		return toIRPos(ps[0])
	}
	return ir.Pos{}
}

func (sc *scenarioCheck) lower(file string, sf scenarioFile) *ir.Scenario {
	out := &ir.Scenario{Name: sf.Name, File: file}
	for i, st := range sf.Steps {
		path := fmt.Sprintf("steps[%d]", i)
		what := fmt.Sprintf("step %d", i+1)
		s := ir.Step{Pos: sc.pos(path)}
		var set []string
		if st.Apply != nil {
			set = append(set, "apply")
			s.Apply = &ir.Apply{Manifests: *st.Apply}
			sc.manifests(path+".apply", what, *st.Apply)
		}
		if w := st.Wait; w != nil {
			set = append(set, "wait")
			s.Wait = &ir.Wait{Timeout: sc.duration(path+".wait.timeout", what, w.Timeout)}
			switch {
			case (w.Pods == nil) == (w.NodesReady == nil):
				sc.report(CodeScenarioShape, path+".wait", what+"'s wait must wait for either pods or nodesReady",
					"set one of pods and nodesReady; for both, write two wait steps")
			case w.Pods != nil:
				s.Wait.Pods = sc.pods(path+".wait.pods", what, w.Pods)
			default:
				s.Wait.NodesReady = *w.NodesReady
				sc.nodesReady(path+".wait.nodesReady", what, *w.NodesReady)
			}
		}
		if st.Stop != nil {
			set = append(set, "stop")
			s.Stop = sc.target(path+".stop", what+" stops", st.Stop)
		}
		if st.Start != nil {
			set = append(set, "start")
			s.Start = sc.target(path+".start", what+" starts", st.Start)
		}
		if e := st.Expect; e != nil {
			set = append(set, "expect")
			s.Expect = sc.expect(path+".expect", what, e.API, e.Write, e.Node, e.Ready, e.Pods, e.Within)
		}
		switch {
		case len(set) == 0:
			sc.report(CodeScenarioShape, path, what+" does nothing",
				"give it one of apply, wait, stop, start or expect, or remove it")
		case len(set) > 1:
			sc.report(CodeScenarioShape, path, fmt.Sprintf("%s sets %s: a step does one thing", what, strings.Join(set, " and ")),
				"split it into one step each, in the order they should run")
		}
		out.Steps = append(out.Steps, s)
	}
	return out
}

func (sc *scenarioCheck) target(path, what string, t *targetFile) *ir.Subject {
	var out []ir.Subject
	for _, x := range []struct {
		kind ir.SubjectKind
		name *string
	}{{ir.SubjectNode, t.Node}, {ir.SubjectEtcd, t.Etcd}, {ir.SubjectControlPlane, t.ControlPlane}} {
		if x.name != nil {
			out = append(out, ir.Subject{Kind: x.kind, Name: *x.name})
		}
	}
	if len(out) != 1 {
		sc.report(CodeScenarioShape, path, fmt.Sprintf("%s %s", what, targetCount(len(out))),
			"name exactly one of node, etcd and controlPlane; for several, write a step each")
		return &ir.Subject{}
	}
	tg := out[0]
	at := path + "." + string(tg.Kind)
	if sc.c == nil {
		return &tg
	}
	switch tg.Kind {
	case ir.SubjectNode:
		if _, ok := sc.node(tg.Name); !ok {
			sc.report(CodeScenarioNode, at, fmt.Sprintf("%s node %s, which the cluster does not have", what, diag.Quote(tg.Name)),
				nameHint("nodes", tg.Name, sc.nodeNames(func(ir.Node) bool { return true })))
		}
	case ir.SubjectEtcd:
		var members []string
		for _, m := range sc.c.Etcd.Members {
			members = append(members, m.Name)
		}
		if !slices.Contains(members, tg.Name) {
			sc.report(CodeScenarioEtcd, at, fmt.Sprintf("%s etcd member %s, which the cluster does not have", what, diag.Quote(tg.Name)),
				nameHint("etcd members", tg.Name, members))
		}
	case ir.SubjectControlPlane:
		cp := sc.nodeNames(func(n ir.Node) bool { return n.Runs(ir.ComponentAPIServer) })
		if !slices.Contains(cp, tg.Name) {
			msg := fmt.Sprintf("%s the control plane of %s, which the cluster does not have", what, diag.Quote(tg.Name))
			if _, ok := sc.node(tg.Name); ok {
				msg = fmt.Sprintf("%s the control plane of %s, which is not a control-plane node", what, diag.Quote(tg.Name))
			}
			sc.report(CodeScenarioControlPlane, at, msg, nameHint("control-plane nodes", tg.Name, cp))
		}
	}
	return &tg
}

func targetCount(n int) string {
	if n == 0 {
		return "nothing: it names no node, etcd member or control plane"
	}
	return fmt.Sprintf("%d things at once", n)
}

func (sc *scenarioCheck) expect(path, what string, api, write, node *string, ready bool, pods *podsFile, within string) *ir.Expect {
	e := &ir.Expect{Ready: ready}
	var set []string
	if api != nil {
		set = append(set, "api")
		e.API = *api
	}
	if write != nil {
		set = append(set, "write")
		e.Write = *write
	}
	if node != nil {
		set = append(set, "node")
		e.Node = *node
		if sc.c != nil {
			n, ok := sc.node(*node)
			kubelets := sc.nodeNames(ir.Node.RunsPods)
			switch {
			case !ok:
				sc.report(CodeScenarioNode, path+".node", fmt.Sprintf("%s expects node %s, which the cluster does not have", what, diag.Quote(*node)),
					nameHint("nodes with a kubelet", *node, kubelets))
			case !n.RunsPods():
				sc.report(CodeScenarioNode, path+".node", fmt.Sprintf("%s expects node %s, which runs no kubelet and so never registers as a Kubernetes Node", what, diag.Quote(*node)),
					nameHint("nodes with a kubelet", "", kubelets))
			}
		}
	}
	if pods != nil {
		set = append(set, "pods")
		e.Pods = sc.pods(path+".pods", what, pods)
	}
	if within != "" {
		e.Within = sc.duration(path+".within", what, within)
	}
	if len(set) != 1 {
		msg := what + " expects nothing"
		if len(set) > 1 {
			msg = fmt.Sprintf("%s expects %s at once", what, strings.Join(set, " and "))
		}
		sc.report(CodeScenarioShape, path, msg, "set exactly one of api, write, node and pods; for several, write an expect step each")
	}
	return e
}

func (sc *scenarioCheck) pods(path, what string, p *podsFile) *ir.Pods {
	out := &ir.Pods{Namespace: p.Namespace, Selector: p.Selector, Running: p.Running, NotOn: p.NotOn}
	if sc.c == nil {
		return out
	}
	for i, name := range p.NotOn {
		if _, ok := sc.node(name); !ok {
			sc.report(CodeScenarioNotOn, fmt.Sprintf("%s.notOn[%d]", path, i),
				fmt.Sprintf("%s keeps pods off node %s, which the cluster does not have", what, diag.Quote(name)),
				nameHint("nodes", name, sc.nodeNames(func(ir.Node) bool { return true })))
		}
	}
	return out
}

func (sc *scenarioCheck) nodesReady(path, what string, n int) {
	if sc.c == nil {
		return
	}
	if have := len(sc.nodeNames(ir.Node.RunsPods)); n > have {
		sc.report(CodeScenarioNodesReady, path,
			fmt.Sprintf("%s waits for %d Ready nodes, but the cluster has %d nodes with a kubelet", what, n, have),
			fmt.Sprintf("wait for at most %d (only nodes with a kubelet register and become Ready)", have))
	}
}

// duration reads a duration the schema has already shaped, "90s"; what
// is left to go wrong is zero and a count too large for time.Duration.
func (sc *scenarioCheck) duration(path, what, s string) time.Duration {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		sc.report(CodeScenarioDuration, path, fmt.Sprintf("%s's %s %s is too long to be a duration", what, path[strings.LastIndex(path, ".")+1:], diag.Quote(s)),
			"write a wait of at most a few hours, in minutes, such as \"30m\"")
	case d <= 0:
		sc.report(CodeScenarioDuration, path, fmt.Sprintf("%s's %s is zero: nothing could happen in time", what, path[strings.LastIndex(path, ".")+1:]),
			"give the step time to hold, such as \"90s\", or leave the field out for its default")
	}
	return d
}

// yamlLine finds the line sigs.k8s.io/yaml names in its syntax errors.
var yamlLine = regexp.MustCompile(`^(?:error converting YAML to JSON: )?yaml: line ([0-9]+): `)

// manifests checks an apply step's manifests the way the simulator reads
// them: documents split at "\n---", each YAML that sigs.k8s.io/yaml
// decodes to an object with apiVersion and kind, or empty.
func (sc *scenarioCheck) manifests(path, what, m string) {
	// report names line (from 1) of the manifests by its file position
	// when it has one, in the message otherwise.
	report := func(line int, msg string) {
		d := diag.Diagnostic{Code: CodeScenarioManifest, Severity: diag.Error, Path: path,
			Message:   fmt.Sprintf("%s's manifests %s", what, msg),
			Positions: convertPositions(sc.l.userPositions(path)),
			Hint:      "write Kubernetes objects as YAML, documents separated by \"---\" lines, each with apiVersion and kind"}
		if p, ok := sc.manifestLine(path, line); ok {
			d.Positions = append([]diag.Pos{p}, d.Positions...)
		} else if line > 0 {
			d.Message = fmt.Sprintf("%s's manifests, line %d: %s", what, line, msg)
		}
		sc.diags.Add(d)
	}
	text := "\n" + m
	objects := 0
	start := 0
	for doc := range strings.SplitSeq(text, "\n---") {
		// Line 0 is the newline added in front; a document after the
		// first starts on its "---" line.
		first := strings.Count(text[:start], "\n")
		start += len(doc) + len("\n---")
		var obj any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			msg := err.Error()
			line := 0
			if sub := yamlLine.FindStringSubmatch(msg); sub != nil {
				n, _ := strconv.Atoi(sub[1])
				line, msg = first+n-1, msg[len(sub[0]):]
			}
			report(line, "are not YAML: "+msg)
			continue
		}
		if obj == nil {
			continue
		}
		// The first line of the document that holds something, for the
		// object's position.
		line := first
		for l := range strings.SplitSeq(doc, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				break
			}
			line++
		}
		o, ok := obj.(map[string]any)
		if !ok {
			report(line, fmt.Sprintf("hold a %s where an object belongs", yamlKind(obj)))
			continue
		}
		var missing []string
		for _, k := range []string{"apiVersion", "kind"} {
			if s, ok := o[k].(string); !ok || s == "" {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			report(line, "hold an object without "+strings.Join(missing, " or "))
			continue
		}
		objects++
	}
	if objects == 0 && !sc.hasReported(path) {
		report(0, "hold no object")
	}
}

func (sc *scenarioCheck) hasReported(path string) bool {
	return slices.ContainsFunc(sc.diags, func(d diag.Diagnostic) bool { return d.Path == path })
}

func yamlKind(v any) string {
	switch v.(type) {
	case []any:
		return "list"
	case string:
		return "string"
	case bool:
		return "boolean"
	}
	return "number"
}

// manifestLine finds the file position of line n (from 1) of the
// manifests at path, when they are one multi-line string literal: its
// lines are the file's lines after the opening quotes, less the closing
// quotes' indentation.
func (sc *scenarioCheck) manifestLine(path string, n int) (diag.Pos, bool) {
	if n < 1 {
		return diag.Pos{}, false
	}
	v := sc.l.user.LookupPath(cue.ParsePath(path))
	src := v.Source()
	if f, ok := src.(*ast.Field); ok {
		src = f.Value
	}
	lit, ok := src.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING || !strings.HasPrefix(strings.TrimLeft(lit.Value, "#"), `"""`) {
		return diag.Pos{}, false
	}
	lines := strings.Split(lit.Value, "\n")
	if n > len(lines)-2 {
		return diag.Pos{}, false
	}
	last := lines[len(lines)-1]
	indent := len(last) - len(strings.TrimLeft(last, " \t"))
	p := lit.Pos()
	return diag.Pos{File: p.Filename(), Line: p.Line() + n, Column: indent + 1}, true
}

func (sc *scenarioCheck) node(name string) (ir.Node, bool) {
	for _, n := range sc.c.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return ir.Node{}, false
}

func (sc *scenarioCheck) nodeNames(keep func(ir.Node) bool) []string {
	var out []string
	for _, n := range sc.c.Nodes {
		if keep(n) {
			out = append(out, n.Name)
		}
	}
	return out
}

// nameHint suggests the name closest in spelling to a wrong one and, when
// the cluster has few, lists them (kinds is their plural); a cluster of
// thousands of nodes gets no list.
func nameHint(kinds, wrong string, names []string) string {
	if len(names) == 0 {
		return fmt.Sprintf("the cluster has no %s", kinds)
	}
	best, bestDist := "", 3
	for _, n := range names {
		if d := diag.Distance(strings.ToLower(n), strings.ToLower(wrong)); wrong != "" && d < bestDist {
			best, bestDist = n, d
		}
	}
	hint := ""
	if best != "" {
		hint = fmt.Sprintf("did you mean %s? ", best)
	}
	const maxListed = 12
	if len(names) <= maxListed {
		return hint + fmt.Sprintf("the cluster's %s: %s", kinds, strings.Join(names, ", "))
	}
	return hint + fmt.Sprintf("the cluster has %d %s; check the name against the spec", len(names), kinds)
}
