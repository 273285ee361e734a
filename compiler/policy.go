package compiler

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/load"
	"cuelang.org/go/cue/token"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

// Diagnostics about policy packages themselves. A violation of a policy
// is reported under the policy's own id.
const (
	CodePolicyLoad    = "KC2001"
	CodePolicyShape   = "KC2002"
	CodePolicyWaived  = "KC2003"
	CodePolicyWaiver  = "KC2004"
	CodePolicyNothing = "KC2005"
)

func policyRules() []diag.Rule {
	return []diag.Rule{
		{Code: CodePolicyLoad, Severity: diag.Error, Family: "policies", Summary: "a policy directory does not load: CUE syntax error, no package, or no policies field"},
		{Code: CodePolicyShape, Severity: diag.Error, Family: "policies", Summary: "a policy is not a #Policy, or reads a field the spec or the facts do not have"},
		{Code: CodePolicyWaived, Severity: diag.Warning, Family: "policies", Summary: "a waiver relaxes an organisation policy"},
		{Code: CodePolicyWaiver, Severity: diag.Warning, Family: "policies", Summary: "a policy waiver names no policy the spec breaks"},
		{Code: CodePolicyNothing, Severity: diag.Error, Family: "policies", Summary: "a policy's require constrains nothing"},
		{Code: CodePolicyEval, Severity: diag.Error, Family: "policies", Summary: "evaluating a policy directory took longer or grew larger than --eval-timeout or --eval-memory allow"},
	}
}

// kcCode is the shape of kcompile's own diagnostic codes, which a policy
// id, reported as a code, must not take.
var kcCode = regexp.MustCompile(`^KC[0-9]{4}$`)

// policyID is the grammar of a policy's id: lower-case letters, digits,
// '-' and '.', starting and ending with a letter or digit, at most 63
// bytes, like a DNS label. The id is printed as the diagnostic code of
// every violation, unquoted, and waived by name in specs: a terminal
// escape or a line break in it would reach the terminal, or forge a
// diagnostic line of its own.
var policyID = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// policy is one loaded policy.
type policy struct {
	id       string
	message  string
	severity diag.Severity
	when     cue.Value
	require  cue.Value
	// pos is where the policy is declared.
	pos token.Pos
	// readsNodes says the policy mentions the facts of each node.
	readsNodes bool
}

// checkPolicies evaluates every policy of the directories against the
// spec l and the facts of c, and reports each violation under the
// policy's id, at the spec value that breaks it and at the policy line
// that states it. It also records in hidden (not nil) every violation a
// waiver hides, under the waived policy's id, as it would be reported
// without the waiver.
func checkPolicies(ctx *cue.Context, l *loaded, m *model, c *ir.Cluster, dirs []string, hidden map[string]diag.List) diag.List {
	var out diag.List
	// The schema package loaded with the spec holds both definitions.
	// The facts of every node are the size of the cluster, and each
	// policy's unification would copy them: they are given only to the
	// policies that mention them.
	derived := deriveFacts(c, l.src.Profile)
	nodes := derived.Node
	derived.Node = nil
	factsDef := l.schema.LookupPath(cue.ParsePath("#Facts"))
	facts := factsDef.Unify(ctx.Encode(derived))
	if err := facts.Validate(cue.Concrete(true)); err != nil {
		return diag.List{{Code: CodeInternal, Severity: diag.Error, Message: "the derived facts do not match #Facts: " + err.Error()}}
	}
	// The effective spec: every default chosen, so that a rule cannot
	// pick another arm of a default's disjunction; closed by #Cluster, so
	// that a rule cannot add a field the schema does not have. Spec
	// positions come from where the user wrote each path.
	var data any
	if err := l.value.Decode(&data); err != nil {
		return diag.List{{Code: CodeInternal, Severity: diag.Error, Message: "the spec does not decode: " + err.Error()}}
	}
	spec := l.def.Unify(ctx.Encode(data))
	input := ctx.CompileString("{}").FillPath(cue.MakePath(cue.Str("spec")), spec).FillPath(cue.MakePath(cue.Str("facts")), facts)
	var withNodes cue.Value
	inputFor := func(p policy) cue.Value {
		if !p.readsNodes || len(nodes) == 0 {
			return input
		}
		if !withNodes.Exists() {
			all := derived
			all.Node = nodes
			withNodes = ctx.CompileString("{}").FillPath(cue.MakePath(cue.Str("spec")), spec).
				FillPath(cue.MakePath(cue.Str("facts")), factsDef.Unify(ctx.Encode(all)))
		}
		return withNodes
	}
	shape := l.schema.LookupPath(cue.ParsePath("#Policies"))
	if err := shape.Err(); err != nil {
		return diag.List{{Code: CodeInternal, Severity: diag.Error, Message: "the policy schema: " + err.Error()}}
	}
	broken := false
	for _, dir := range dirs {
		// One directory's evaluation writes only its own results, merged
		// once it is done: an evaluation cut off by the bound may still
		// be running, and must touch nothing the caller reads.
		var dirOut diag.List
		var dirHidden []policyViolation
		dirBroken := false
		err := runBounded(l.src.Bound, func() {
			pols, diags := loadPolicies(ctx, dir, shape, input)
			dirOut = append(dirOut, diags...)
			dirBroken = diags.HasErrors()
			for _, p := range pols {
				in := inputFor(p)
				if p.when.Exists() && p.when.Subsume(in) != nil {
					continue
				}
				for _, d := range p.violations(in, m) {
					if w, ok := m.spec.Policies.Waivers[p.id]; ok {
						dirHidden = append(dirHidden, policyViolation{p.id, d})
						dirOut = append(dirOut, m.diagAt(CodePolicyWaived, "policies.waivers."+quoteLabel(p.id),
							fmt.Sprintf("policy %s is waived: %s (%s)", p.id, diag.Printable(w.Reason, maxLiteral), d.Message), "", d.Positions))
						continue
					}
					dirOut = append(dirOut, d)
				}
			}
		})
		if err != nil {
			return append(out, diag.Diagnostic{Code: CodePolicyEval, Severity: diag.Error, Positions: []diag.Pos{{File: dir}},
				Message: fmt.Sprintf("evaluating the policies of %s %v; nothing of it was checked", diag.Printable(dir, 200), err),
				Hint:    "a policy's comprehension or recursion that grows with the spec can take unbounded time: bound it, or raise --eval-timeout / --eval-memory if the work is real"})
		}
		out = append(out, dirOut...)
		broken = broken || dirBroken
		for _, h := range dirHidden {
			hidden[h.id] = append(hidden[h.id], h.d)
		}
	}
	// With a policy that did not load, a waiver of it may still be
	// needed: only a clean load says a waiver waives nothing.
	for _, id := range sortedKeys(m.spec.Policies.Waivers) {
		if len(hidden[id]) == 0 && !broken {
			out = append(out, m.diagAt(CodePolicyWaiver, "policies.waivers."+quoteLabel(id),
				fmt.Sprintf("the waiver of policy %s waives nothing: no policy checked here of that id is broken", id),
				"remove the waiver, or check the policy's id", nil))
		}
	}
	return out
}

// runBounded runs one stage of an evaluation under the caller's bound,
// or unbounded when there is none.
func runBounded(bound func(func()) error, eval func()) error {
	if bound == nil {
		eval()
		return nil
	}
	return bound(eval)
}

// policyViolation is a violation a waiver hides, under the policy's id.
type policyViolation struct {
	id string
	d  diag.Diagnostic
}

// diagAt is a diagnostic of a rule in the table at a spec path, with
// more positions after the path's own.
func (m *model) diagAt(code, path, msg, hint string, more []diag.Pos) diag.Diagnostic {
	return diag.Diagnostic{Code: code, Severity: m.severity[code], Path: path, Message: msg, Hint: hint,
		Positions: append(m.at(path), more...)}
}

// loadPolicies reads the policies field of the CUE package in dir (a
// directory, or an import path of the CUE module of the working
// directory, such as example.com/policies/prod) and holds every policy
// to #Policy.
func loadPolicies(ctx *cue.Context, dir string, shape, input cue.Value) ([]policy, diag.List) {
	fsys, arg, d := confinePolicy(dir)
	if d != nil {
		return nil, diag.List{*d}
	}
	defer fsys.Close()
	insts := load.Instances([]string{arg}, fsys.config(fsys.cwd))
	if len(insts) == 1 {
		if d := fsys.diagnostics(CodePolicyLoad, "policy", insts[0].Err); len(d) > 0 {
			return nil, d
		}
	}
	if len(insts) != 1 || insts[0].Err != nil {
		var err error
		if len(insts) == 1 {
			err = insts[0].Err
		}
		// An import that cannot be loaded is named at its line, not
		// taken for a syntax error.
		var imports diag.List
		var rest cueerrors.Error
		for _, e := range cueerrors.Errors(err) {
			if format, _ := e.Msg(); format == "import failed" && len(cueerrors.Positions(e)) > 0 {
				imports = append(imports, importFailed(Source{}, CodePolicyLoad, "policy", e))
				continue
			}
			if arg != "." && len(cueerrors.Positions(e)) == 0 && strings.HasPrefix(e.Error(), "cannot find package") {
				d := diag.Diagnostic{Code: CodePolicyLoad, Severity: diag.Error, Positions: []diag.Pos{{File: dir}},
					Message: fmt.Sprintf("policy path %s: no such directory, and not an import path of the CUE module here", dir),
					Hint:    fmt.Sprintf("give --policy the directory that holds the policy package's .cue files, or the import path of a package of the CUE module at %s", fsys.dir)}
				if _, reason, _ := strings.Cut(e.Error(), "\": "); strings.Contains(reason, "package name") {
					// The directory is there, under another package clause.
					d.Message = fmt.Sprintf("policy package %s cannot be loaded: %s", dir, reason)
					d.Hint = fmt.Sprintf("an import path names the package by its last element; name another after a colon (%s:NAME for `package NAME`)", dir)
				}
				imports = append(imports, d)
				continue
			}
			rest = cueerrors.Append(rest, e)
		}
		if len(imports) > 0 && rest == nil {
			return nil, imports
		}
		return nil, append(imports, policyErrors(CodePolicyLoad, dir, rest, "fix the CUE syntax; every file needs the same package clause")...)
	}
	v := ctx.BuildInstance(insts[0])
	if d := fsys.diagnostics(CodePolicyLoad, "policy", v.Err()); len(d) > 0 {
		return nil, d
	}
	if err := v.Err(); err != nil {
		out, rest := importProblems(CodePolicyLoad, "policy", err)
		if rest != nil {
			out = append(out, policyErrors(CodePolicyLoad, dir, rest, "fix the CUE error")...)
		}
		return nil, out
	}
	pv := v.LookupPath(cue.ParsePath("policies"))
	if !pv.Exists() {
		return nil, diag.List{{Code: CodePolicyLoad, Severity: diag.Error, Message: fmt.Sprintf("policy package %s has no policies field", dir),
			Positions: convertPositions([]token.Pos{v.Pos()}), Hint: `declare policies: {"<id>": {message: "...", require: {...}}}`}}
	}
	if err := shape.Unify(pv).Validate(); err != nil {
		return nil, policyErrors(CodePolicyShape, dir, err, "a policy has message, severity (\"error\" or \"warning\"), an optional when and a require on spec and facts")
	}
	var out []policy
	var diags diag.List
	it, _ := pv.Fields()
	for it.Next() {
		pol := it.Value()
		p := policy{id: it.Selector().Unquoted(), pos: pol.Pos(), severity: diag.Error,
			when: pol.LookupPath(cue.ParsePath("when")), require: pol.LookupPath(cue.ParsePath("require")),
			readsNodes: mentions(pol, "node")}
		if kcCode.MatchString(p.id) {
			diags = append(diags, diag.Diagnostic{Code: CodePolicyShape, Severity: diag.Error, Path: "policies." + quoteLabel(p.id),
				Positions: convertPositions([]token.Pos{p.pos}),
				Message:   fmt.Sprintf("policy id %s looks like a kcompile diagnostic code", p.id),
				Hint:      "name the policy for what it asks, e.g. \"prod-etcd-zones\""})
			continue
		}
		if !policyID.MatchString(p.id) {
			diags = append(diags, diag.Diagnostic{Code: CodePolicyShape, Severity: diag.Error, Path: "policies." + quoteLabel(p.id),
				Positions: convertPositions([]token.Pos{labelPos(pol)}),
				Message:   fmt.Sprintf("policy id %s is not an id: it is printed as the code of every violation", diag.Quote(p.id)),
				Hint:      "an id is lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 63 characters, e.g. \"prod-etcd-zones\""})
			continue
		}
		p.message, _ = pol.LookupPath(cue.ParsePath("message")).String()
		if s, _ := pol.LookupPath(cue.ParsePath("severity")).String(); s == "warning" {
			p.severity = diag.Warning
		}
		if !constrains(p.require) {
			diags = append(diags, diag.Diagnostic{Code: CodePolicyNothing, Severity: diag.Error, Path: "policies." + quoteLabel(p.id),
				Positions: convertPositions([]token.Pos{p.require.Pos(), p.pos}),
				Message:   fmt.Sprintf("policy %s requires nothing: every cluster passes it", p.id),
				Hint:      "constrain a field of spec or facts in require, e.g. require: facts: etcd: members: >=3"})
			continue
		}
		// A field the spec or the facts do not have is a mistake of the
		// policy (both are closed), not a violation.
		for _, part := range []struct {
			v    cue.Value
			name string
		}{{p.require, "require"}, {p.when, "when"}} {
			if !part.v.Exists() {
				continue
			}
			if d := unknownFields(part.v, input, p.id, part.name); len(d) > 0 {
				diags = append(diags, d...)
				p.require = cue.Value{}
			}
		}
		if p.require.Exists() {
			out = append(out, p)
		}
	}
	return out, diags
}

// labelPos is where the field holding v is labelled (a policy's id), or
// v's own position when its source is not a field.
func labelPos(v cue.Value) token.Pos {
	if f, ok := v.Source().(*ast.Field); ok && f.Label != nil && f.Label.Pos().IsValid() {
		return f.Label.Pos()
	}
	return v.Pos()
}

// constrains says whether v holds a constraint on some field: a
// require of {} or {spec: {}} passes every cluster.
func constrains(v cue.Value) bool {
	if !v.Exists() {
		return false
	}
	if v.IncompleteKind() != cue.StructKind {
		return true
	}
	// A pattern constrains every field it matches: every pool, node or
	// zone.
	if p := v.LookupPath(cue.MakePath(cue.AnyString)); p.Exists() && constrains(p) {
		return true
	}
	it, err := v.Fields(cue.Optional(true), cue.Hidden(true))
	if err != nil {
		return true
	}
	for it.Next() {
		// A hidden field is a value the rule computes from spec and
		// facts and requires (_fits: facts.nodes.total <= n, _fits:
		// true): it constrains what it reads.
		if it.Selector().LabelType() == cue.HiddenLabel || constrains(it.Value()) {
			return true
		}
	}
	return false
}

// unknownFields reports the fields of v, the part (require, when) of
// policy id, that input has no place for.
func unknownFields(v, input cue.Value, id, part string) diag.List {
	var out diag.List
	var walk func(v, in cue.Value, path []string)
	walk = func(v, in cue.Value, path []string) {
		if v.IncompleteKind() != cue.StructKind {
			return
		}
		it, err := v.Fields(cue.Optional(true))
		if err != nil {
			return
		}
		for it.Next() {
			sel := it.Selector()
			name := sel.Unquoted()
			child := in.LookupPath(cue.MakePath(cue.Str(name)))
			if !child.Exists() {
				// An optional field the spec leaves unset, or a key of a
				// map, is the spec's to give; anything else is a typo.
				if !in.Allows(cue.Str(name)) {
					out = append(out, diag.Diagnostic{Code: CodePolicyShape, Severity: diag.Error, Path: "policies." + quoteLabel(id) + "." + part,
						Positions: convertPositions([]token.Pos{it.Value().Pos()}),
						Message:   fmt.Sprintf("policy %s reads %s, which %s", id, strings.Join(append(slices.Clone(path), name), "."), specOrFacts(path)),
						Hint:      "see the fields of #Cluster (spec) and #Facts (facts) in schema/v1alpha1"})
				}
				continue
			}
			walk(it.Value(), child, append(path, name))
		}
		// A pattern is read against the input's own: every pool
		// (node, zone) has the fields of one.
		if p := v.LookupPath(cue.MakePath(cue.AnyString)); p.Exists() {
			if inp := in.LookupPath(cue.MakePath(cue.AnyString)); inp.Exists() {
				walk(p, inp, append(path, "[string]"))
			}
		}
	}
	walk(v, input, nil)
	return out
}

func specOrFacts(path []string) string {
	if len(path) > 0 && path[0] == "facts" {
		return "the facts (#Facts) do not have"
	}
	return "the spec (#Cluster) does not have"
}

// violations unifies the rule with the input: every conflict, and every
// value the rule adds that the spec does not give (an incomplete value,
// or a concrete one where the spec has none), breaks it.
func (p policy) violations(input cue.Value, m *model) diag.List {
	var out diag.List
	seen := map[string]bool{}
	add := func(path []string, polPos []token.Pos) {
		key := strings.Join(path, ".")
		if seen[key] {
			return
		}
		seen[key] = true
		out = append(out, p.diagnose(path, polPos, input, m))
	}
	unified := p.require.Unify(input)
	err := unified.Validate(cue.Concrete(true))
	for _, e := range cueerrors.Errors(err) {
		// The error's path runs through the policy package down to
		// require; what follows is the input's.
		path := e.Path()
		if i := slices.Index(path, "require"); i >= 0 {
			path = path[i+1:]
		}
		if len(path) > 0 && strings.HasPrefix(path[0], "_") {
			// A value the rule computes, false or in conflict.
			if !seen[path[0]] {
				seen[path[0]] = true
				out = append(out, p.computed(path[0], e, input, unified, m))
			}
			continue
		}
		if len(path) < 2 || (path[0] != "spec" && path[0] != "facts") {
			continue
		}
		var polPos []token.Pos
		for _, pos := range cueerrors.Positions(e) {
			if pos.Filename() == p.pos.Filename() {
				polPos = append(polPos, pos)
			}
		}
		add(path, polPos)
	}
	for _, path := range absent(p.require, input, nil) {
		add(path, nil)
	}
	if err != nil && len(out) == 0 {
		out = append(out, diag.Diagnostic{Code: p.id, Severity: p.severity, Positions: convertPositions([]token.Pos{p.pos}),
			Message: fmt.Sprintf("%s: %v", p.message, err)})
	}
	return out
}

// absent are the paths of the values require states that the input does
// not hold: unified, a concrete value would fill the gap silently.
func absent(require, input cue.Value, path []string) [][]string {
	var out [][]string
	it, err := require.Fields()
	if err != nil {
		return nil
	}
	for it.Next() {
		name := it.Selector().Unquoted()
		child := input.LookupPath(cue.MakePath(cue.Str(name)))
		p := append(slices.Clone(path), name)
		switch {
		case !child.Exists():
			out = append(out, p)
		case it.Value().IncompleteKind() == cue.StructKind:
			out = append(out, absent(it.Value(), child, p)...)
		}
	}
	// A pattern states its values for every field of the input it
	// matches.
	if pat := require.LookupPath(cue.MakePath(cue.AnyString)); pat.Exists() && pat.IncompleteKind() == cue.StructKind {
		if in, err := input.Fields(); err == nil {
			for in.Next() {
				out = append(out, absent(pat, in.Value(), append(slices.Clone(path), in.Selector().Unquoted()))...)
			}
		}
	}
	return out
}

// diagnose is the violation of the rule at path (spec... or facts...),
// at the spec value and at the rule's constraint.
func (p policy) diagnose(path []string, polPos []token.Pos, input cue.Value, m *model) diag.Diagnostic {
	var specPath string
	var ps []diag.Pos
	if path[0] == "facts" {
		specPath, ps = m.factSource(path[1:])
	} else {
		specPath, ps = m.writtenAt(path[1:])
	}
	sels := make([]cue.Selector, len(path))
	for i, s := range path {
		sels[i] = cue.Str(s)
	}
	rule := ruleAt(p.require, path)
	// The constraint's own line, when the error does not name it (a
	// disjunction's does not).
	if len(polPos) == 0 && rule.Exists() {
		src := rule.Source()
		if f, ok := src.(*ast.Field); ok {
			src = f.Value
		}
		if src != nil && src.Pos().IsValid() {
			polPos = []token.Pos{src.Pos()}
		} else if rule.Pos().IsValid() {
			polPos = []token.Pos{rule.Pos()}
		}
	}
	if len(polPos) == 0 {
		polPos = []token.Pos{p.pos}
	}
	key := strings.Join(path, ".")
	msg := fmt.Sprintf("%s: %s breaks it", p.message, key)
	if have := input.LookupPath(cue.MakePath(sels...)); have.Exists() && rule.Exists() {
		msg = fmt.Sprintf("%s: %s is %v, the policy asks %v", p.message, key, have, rule)
	} else if rule.Exists() {
		msg = fmt.Sprintf("%s: %s is not set, the policy asks %v", p.message, key, rule)
	}
	return diag.Diagnostic{Code: p.id, Severity: p.severity, Path: specPath,
		Positions: append(ps, convertPositions(polPos[:1])...),
		Message:   msg,
		Hint:      fmt.Sprintf("policy %s (waive it with policies: waivers: %q: reason: \"...\")", p.id, p.id)}
}

// writtenAt is where the user wrote the spec value at path, or, for a
// default, the nearest enclosing value they wrote; the spec's name when
// they wrote none of it.
func (m *model) writtenAt(path []string) (string, []diag.Pos) {
	for i := len(path); i > 0; i-- {
		if p := cue.MakePath(selectors(path[:i])...).String(); m.written(p) {
			return strings.Join(path, "."), m.at(p)
		}
	}
	return strings.Join(path, "."), m.at("name")
}

// factSource is the spec path a fact is derived from, where a violation
// of the fact points: the first of its sources the user wrote, or the
// last, which the spec always has.
func (m *model) factSource(path []string) (string, []diag.Pos) {
	var from []string
	switch path[0] {
	case "nodes", "zones", "racksSharedByEtcdAndWorkers":
		from = []string{"workers.pools", "workers.nodes", "controlPlane.nodes"}
	case "etcd":
		from = []string{"etcd.members", "etcd.topology", "controlPlane.nodes"}
		if len(path) > 1 && (path[1] == "zones" || strings.HasPrefix(path[1], "quorumSurvives")) {
			// Where the members' zones and racks are written.
			from = []string{"etcd.members", "controlPlane.nodes"}
		}
	case "certificates":
		if len(path) > 1 {
			from = append(from, "pki."+map[string]string{"keyAlgorithm": "keyAlgorithm", "caValidityDays": "caValidity", "leafValidityDays": "leafValidity"}[path[1]])
		}
		from = append(from, "pki", "name")
	case "cni":
		from = []string{"network.cni.plugin", "network"}
	case "kubeProxy":
		from = []string{"network.kubeProxy.mode", "network"}
	case "runtime":
		from = []string{"runtime.engine", "name"}
	case "operatingSystems":
		from = []string{"os", "name"}
	case "node":
		// The node's own declaration: its pool's, or its own.
		if len(path) > 1 {
			from = append(from, m.nodeSpecPath(path[1])...)
		}
		from = append(from, "workers.pools", "workers.nodes", "controlPlane.nodes")
	case "pools":
		if len(path) > 1 {
			from = []string{"workers.pools." + quoteLabel(path[1])}
			if len(path) > 2 && (path[2] == "zones" || path[2] == "racks") {
				from = append([]string{from[0] + "." + path[2]}, from...)
			}
		}
		from = append(from, "workers.pools")
	case "apiServerMinors":
		from = []string{"kubernetes.components.apiServer", "kubernetes.version"}
	}
	// The profile is check's flag, not the spec's: the spec as a whole.
	from = append(from, "name")
	for _, f := range from {
		if m.written(f) {
			return f, m.at(f)
		}
	}
	return "name", m.at("name")
}

// policyErrors turns CUE errors of a policy package into diagnostics at
// their positions in the package: one per path (a value outside a
// disjunction fails each of its arms), schema lines left out.
func policyErrors(code, dir string, err error, hint string) diag.List {
	if err == nil {
		return diag.List{{Code: code, Severity: diag.Error, Message: fmt.Sprintf("%s: not one CUE package", dir), Hint: hint}}
	}
	var out diag.List
	byPath := map[string]int{}
	for _, e := range cueerrors.Errors(err) {
		var ps []token.Pos
		for _, p := range cueerrors.Positions(e) {
			if !strings.HasPrefix(p.Filename(), "schema/") {
				ps = append(ps, p)
			}
		}
		path := strings.Join(e.Path(), ".")
		path = strings.TrimPrefix(path, "#Policies.")
		if path != "" && !strings.HasPrefix(path, "policies.") && code == CodePolicyShape {
			path = "policies." + path
		}
		format, args := e.Msg()
		msg := fmt.Sprintf(format, args...)
		if i, ok := byPath[path]; ok && path != "" {
			// Another arm of the same disjunction: one diagnostic, with
			// the value's position if the first had none.
			if len(out[i].Positions) == 0 {
				out[i].Positions = convertPositions(ps)
			}
			out[i].Message = "the value matches none of the schema's choices"
			continue
		}
		byPath[path] = len(out)
		h := hint
		if strings.Contains(msg, "requires concrete value") {
			// A bound or an operator over a value the spec gives: the
			// policy loads before the spec is known.
			h = "a bound (<=, >=, <, >) or an operator needs concrete operands when the policy loads, before the spec is known: compute in a hidden field and require it, e.g. _fits: facts.nodes.total <= slots/2 and _fits: true"
		}
		out = append(out, diag.Diagnostic{Code: code, Severity: diag.Error, Path: path,
			Positions: convertPositions(ps), Message: msg, Hint: h})
	}
	return out
}

// Waiver is one waiver of the spec's policies.waivers, as a review of a
// change shows it.
type Waiver struct {
	// ID is the waived policy's id.
	ID     string
	Reason string
	// Positions are where the waiver is written.
	Positions []diag.Pos
	// Waives are the violations the waiver hides, as they would be
	// reported without it.
	Waives diag.List
}

// CompileWaivers compiles the spec at src as Compile does and also
// returns its policy waivers, sorted by id, with the violations of
// src.Policies each one hides.
func CompileWaivers(src Source) (*ir.Cluster, diag.List, []Waiver) {
	ctx := cuecontext.New()
	var l *loaded
	var m *model
	var c *ir.Cluster
	var early diag.List
	err := runBounded(src.Bound, func() {
		var diags diag.List
		if l, diags = loadSpec(ctx, src); diags.HasErrors() {
			early = diags
			return
		}
		if m, diags = newModel(l); diags.HasErrors() {
			early = diags
			return
		}
		m.profile = src.Profile
		for _, code := range src.Tolerate {
			if m.severity[code] == diag.Error {
				m.severity[code] = diag.Warning
			}
		}
		for _, f := range families() {
			f.check(m)
		}
		if m.diags.HasErrors() {
			early = m.diags
			return
		}
		c = lower(m)
	})
	if err != nil {
		return nil, diag.List{{Code: CodeEvalBound, Severity: diag.Error, Positions: []diag.Pos{{File: src.Dir}},
			Message: fmt.Sprintf("evaluating the spec %s %v; nothing of it was checked", diag.Printable(src.Dir, 200), err),
			Hint:    "a comprehension or recursion that grows without end can take unbounded time and memory: bound it, or raise --eval-timeout / --eval-memory if the spec is really that large"}}, nil
	}
	if early != nil {
		return nil, early.Sorted(), nil
	}
	hidden := map[string]diag.List{}
	if len(src.Policies) > 0 {
		m.diags = append(m.diags, checkPolicies(ctx, l, m, c, src.Policies, hidden)...)
	}
	var ws []Waiver
	for _, id := range sortedKeys(m.spec.Policies.Waivers) {
		ws = append(ws, Waiver{ID: id, Reason: m.spec.Policies.Waivers[id].Reason,
			Positions: m.at("policies.waivers." + quoteLabel(id)), Waives: hidden[id].Sorted()})
	}
	return c, m.diags.Sorted(), ws
}

// nodeSpecPath is where the node named name is declared: itself, or the
// pool it was expanded from.
func (m *model) nodeSpecPath(name string) []string {
	for _, n := range m.nodes {
		if n.name == name {
			return []string{n.path}
		}
	}
	return nil
}

// computed is the violation of a hidden field of the rule, name, that
// computes a requirement from spec and facts: reported at the spec
// values it reads (the first one's path), at the nodes it names, and at
// the policy's line, with what it computed and the values it read.
func (p policy) computed(name string, e cueerrors.Error, input, unified cue.Value, m *model) diag.Diagnostic {
	var polPos []token.Pos
	for _, pos := range cueerrors.Positions(e) {
		if pos.Filename() == p.pos.Filename() {
			polPos = append(polPos, pos)
		}
	}
	hidden := func(v cue.Value) cue.Value {
		if it, err := v.Fields(cue.Hidden(true)); err == nil {
			for it.Next() {
				if it.Selector().String() == name {
					return it.Value()
				}
			}
		}
		return cue.Value{}
	}
	rule := hidden(p.require)
	if len(polPos) == 0 && rule.Pos().IsValid() {
		polPos = []token.Pos{rule.Pos()}
	}
	if len(polPos) == 0 {
		polPos = []token.Pos{p.pos}
	}
	var specPath string
	var ps []diag.Pos
	var read []string
	for _, path := range reads(rule, 0) {
		sp, at := m.writtenAt(path[1:])
		if path[0] == "facts" {
			sp, at = m.factSource(path[1:])
		}
		if specPath == "" {
			specPath = sp
		}
		ps = append(ps, at...)
		sels := make([]cue.Selector, len(path))
		for i, s := range path {
			sels[i] = cue.Str(s)
		}
		// Scalars only: a struct read whole (facts.node) is the size of
		// the cluster.
		if v := input.LookupPath(cue.MakePath(sels...)); v.Exists() && len(read) < 4 && v.IncompleteKind()&(cue.StructKind|cue.ListKind) == 0 {
			read = append(read, strings.Join(path, ".")+" is "+cueLiteral(v))
		}
	}
	msg := fmt.Sprintf("%s: %s does not hold", p.message, name)
	// The field's conjuncts, evaluated with the input: the one the rule
	// states concretely is what it asks, the others what it computed.
	_, stated := rule.Expr()
	if op, args := hidden(unified).Expr(); op == cue.AndOp && len(args) == len(stated) && len(args) == 2 {
		asked := slices.IndexFunc(stated, func(a cue.Value) bool { return a.IsConcrete() && a.Validate(cue.Concrete(true)) == nil })
		if asked >= 0 {
			got := args[1-asked]
			msg = fmt.Sprintf("%s: %s is %s, the policy asks %s", p.message, name, cueLiteral(got), cueLiteral(args[asked]))
			// A list of node names says where to look.
			if it, err := got.List(); err == nil {
				for it.Next() {
					if s, err := it.Value().String(); err == nil && len(ps) < 8 {
						if at := m.nodeSpecPath(s); len(at) > 0 {
							ps = append(ps, m.at(at[0])...)
							if specPath == "" {
								specPath = at[0]
							}
						}
					}
				}
			}
		}
	}
	if len(read) > 0 {
		msg += " (" + strings.Join(read, ", ") + ")"
	}
	return diag.Diagnostic{Code: p.id, Severity: p.severity, Path: specPath,
		Positions: append(ps, convertPositions(polPos[:1])...),
		Message:   msg,
		Hint:      fmt.Sprintf("policy %s (waive it with policies: waivers: %q: reason: \"...\")", p.id, p.id)}
}

// cueLiteral is v as CUE writes it, made printable and bounded.
func cueLiteral(v cue.Value) string {
	b, err := format.Node(v.Syntax(cue.Concrete(true)), format.Simplify())
	if err != nil {
		return fmt.Sprint(v)
	}
	return diag.Printable(string(b), maxLiteral)
}

// reads are the spec and facts paths the expression of v refers to,
// first seen first, without repeats: the input values a computed rule
// depends on.
func reads(v cue.Value, depth int) [][]string {
	var out [][]string
	seen := map[string]bool{}
	var walk func(v cue.Value, depth int)
	walk = func(v cue.Value, depth int) {
		if depth > 12 || len(out) >= 8 {
			return
		}
		if root, ref := v.ReferencePath(); len(ref.Selectors()) > 0 {
			var path []string
			for _, s := range ref.Selectors() {
				path = append(path, s.String())
			}
			if i := slices.Index(path, "require"); i >= 0 && len(path) > i+2 && (path[i+1] == "spec" || path[i+1] == "facts") {
				path = path[i+1:]
				for j := range path {
					path[j] = cue.ParsePath(path[j]).Selectors()[0].Unquoted()
				}
				if key := strings.Join(path, "."); !seen[key] {
					seen[key] = true
					out = append(out, path)
				}
				return
			}
			// Another value the rule computes (a hidden field, a let):
			// what it reads.
			if key := ref.String(); !seen[key] {
				seen[key] = true
				if target := root.LookupPath(ref); target.Exists() {
					walk(target, depth+1)
				}
			}
			return
		}
		op, args := v.Expr()
		if op == cue.NoOp && len(args) == 1 && args[0].Equals(v) {
			return
		}
		for _, a := range args {
			walk(a, depth+1)
		}
	}
	walk(v, depth)
	return out
}

// ruleAt is what require states at path: its field, or where it has
// none, its pattern ([string]: ...) that matches every field there.
func ruleAt(require cue.Value, path []string) cue.Value {
	v := require
	for _, name := range path {
		next := v.LookupPath(cue.MakePath(cue.Str(name)))
		if !next.Exists() {
			next = v.LookupPath(cue.MakePath(cue.AnyString))
		}
		if !next.Exists() {
			return next
		}
		v = next
	}
	return v
}

// mentions says whether the source of v names name, as a field or a
// reference: conservatively true when v has no single source.
func mentions(v cue.Value, name string) bool {
	src := v.Source()
	if src == nil {
		return true
	}
	found := false
	ast.Walk(src, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			found = found || n.Name == name
		case *ast.BasicLit:
			found = found || n.Value == strconv.Quote(name)
		}
		return !found
	}, nil)
	return found
}
