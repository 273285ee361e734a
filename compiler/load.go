package compiler

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/build"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/load"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/schema"
)

// Source is where a spec is read from: a directory holding one CUE package,
// optionally with files replaced or added in memory (tests and fuzzing use
// the overlay; keys are paths inside Dir).
type Source struct {
	Dir     string
	Overlay map[string][]byte
}

// loaded is a spec after loading: the user's own value, the same value
// unified with #Cluster, and where in the user's files each path was written.
type loaded struct {
	user    cue.Value
	value   cue.Value
	version schema.Version
	def     cue.Value
	// written maps a path to the positions the user wrote it at.
	written map[string][]token.Pos
	// labels maps a path to the positions of its field label.
	labels map[string][]token.Pos
	// firstFile is the first spec file, for diagnostics about the spec as a
	// whole.
	firstFile string
}

// load reads the spec package, checks its apiVersion and unifies it with the
// schema. Every problem comes back as a diagnostic; on errors the returned
// value must not be used.
func loadSpec(ctx *cue.Context, src Source) (*loaded, diag.List) {
	var diags diag.List
	dir, err := filepath.Abs(src.Dir)
	if err != nil {
		return nil, diag.List{{Code: CodeLoad, Severity: diag.Error, Message: err.Error()}}
	}
	if d := checkDir(src, dir); d != nil {
		return nil, diag.List{*d}
	}
	cfg := &load.Config{Dir: dir}
	if len(src.Overlay) > 0 {
		cfg.Overlay = map[string]load.Source{}
		for name, b := range src.Overlay {
			cfg.Overlay[filepath.Join(dir, name)] = load.FromBytes(b)
		}
	}
	insts := load.Instances([]string{"."}, cfg)
	if len(insts) != 1 {
		return nil, diag.List{{Code: CodeLoad, Severity: diag.Error, Message: fmt.Sprintf("%s: expected one CUE package, found %d", src.Dir, len(insts)),
			Hint: "put the spec's .cue files in one directory, all with the same package clause"}}
	}
	inst := insts[0]
	if inst.Err != nil {
		diags := fromCUE(inst.Err, CodeLoad, nil, "")
		for i := range diags {
			d := &diags[i]
			switch {
			case strings.Contains(d.Message, "no package name"):
				file := strings.TrimSuffix(strings.TrimSpace(d.Message[strings.LastIndex(d.Message, "\n")+1:]), ": no package name")
				d.Message = "spec file has no package clause"
				d.Positions = []diag.Pos{{File: file, Line: 1, Column: 1}}
				d.Hint = "start every .cue file of the spec with the same package clause, such as `package cluster`"
			case strings.Contains(d.Message, "found packages"):
				d.Hint = "a spec is one CUE package: give every .cue file in the directory the same package clause"
			default:
				d.Hint = "fix the syntax error at the position shown"
			}
			if len(d.Positions) == 0 {
				d.Positions = []diag.Pos{{File: dir}}
			}
		}
		return nil, diags
	}
	var orphans diag.List
	for _, f := range append(inst.OrphanedFiles, inst.IgnoredFiles...) {
		if strings.HasSuffix(f.Filename, ".cue") {
			// The loader leaves out a file without a package clause
			// silently; its settings would vanish from the cluster.
			orphans.Add(diag.Diagnostic{Code: CodeLoad, Severity: diag.Error,
				Message:   fmt.Sprintf("spec file %s is not part of the spec's package", filepath.Base(f.Filename)),
				Positions: []diag.Pos{{File: f.Filename, Line: 1, Column: 1}},
				Hint:      fmt.Sprintf("start it with the package clause of the other files (package %s)", inst.PkgName)})
		}
	}
	if len(orphans) > 0 {
		return nil, orphans
	}
	user := ctx.BuildInstance(inst)
	l := &loaded{user: user, written: map[string][]token.Pos{}, labels: map[string][]token.Pos{}}
	if len(inst.BuildFiles) > 0 {
		l.firstFile = inst.BuildFiles[0].Filename
	}
	if err := user.Err(); err != nil {
		return nil, fromCUE(err, CodeSchema, l, "")
	}
	recordWritten(user, l.written, l.labels)

	av := user.LookupPath(cue.MakePath(cue.Str("apiVersion")))
	if !av.Exists() {
		diags.Add(diag.Diagnostic{Code: CodeAPIVersion, Severity: diag.Error, Path: "apiVersion",
			Message:   "the spec does not say which schema version it is written against",
			Positions: []diag.Pos{{File: l.firstFile}},
			Hint:      fmt.Sprintf("add `apiVersion: %q` at the top level", schema.Versions()[len(schema.Versions())-1].APIVersion)})
		return nil, diags
	}
	name, err := av.String()
	version, ok := schema.Lookup(name)
	if err != nil || !ok {
		var known []string
		for _, v := range schema.Versions() {
			known = append(known, fmt.Sprintf("%q", v.APIVersion))
		}
		diags.Add(diag.Diagnostic{Code: CodeAPIVersion, Severity: diag.Error, Path: "apiVersion",
			Message:   fmt.Sprintf("unknown apiVersion %s", formatValue(av)),
			Positions: convertPositions(valuePositions(av)),
			Hint:      "this kcompile understands apiVersion " + strings.Join(known, ", ")})
		return nil, diags
	}
	l.version = version

	def, err := buildSchema(ctx, version)
	if err != nil {
		// The schema is embedded and tested; failing here is a kcompile bug.
		return nil, diag.List{{Code: CodeInternal, Severity: diag.Error, Message: "internal error: embedded schema does not build: " + err.Error()}}
	}
	l.def = def
	l.value = user.Unify(def)
	if err := l.value.Validate(cue.Concrete(true)); err != nil {
		diags = fromCUE(err, CodeSchema, l, "")
	}
	// CUE leaves out missing values when other errors exist; report them
	// too, so the user sees every problem at once.
	for _, path := range missingValues(l.value) {
		v := l.value.LookupPath(cue.ParsePath(path))
		if len(diags) > 0 && consequence(diags, path, v, l.def) {
			continue
		}
		diags.Add(missingDiagnostic(l, path, v))
	}
	if diags.HasErrors() {
		return nil, diags
	}
	return l, nil
}

// consequence reports whether a missing value at path is only the
// consequence of an error already reported: a default that could not be
// computed (a disjunction left open), or a field refined by a comprehension
// over a sibling or ancestor value that is in error. Reporting those would
// tell the user to set fields they need not touch.
func consequence(reported diag.List, path string, v, def cue.Value) bool {
	if op, _ := v.Expr(); op == cue.OrOp {
		return true
	}
	if _, ok := schemaAt(def, cue.ParsePath(path)).Default(); ok {
		return true
	}
	for _, d := range reported {
		if d.Path == path {
			return true
		}
		// An unknown field changes nothing else.
		if strings.Contains(d.Message, "field not allowed") {
			continue
		}
		if i := lastDot(d.Path); i > 0 && strings.HasPrefix(path, d.Path[:i+1]) {
			return true
		}
	}
	return false
}

// missingValues lists the paths of regular fields that have no concrete
// value and no error of their own.
func missingValues(v cue.Value) []string {
	var out []string
	var walk func(v cue.Value)
	walk = func(v cue.Value) {
		// An error below a struct makes the struct itself an error; its
		// fields can still be walked.
		if kind := v.IncompleteKind(); kind == cue.StructKind || kind == cue.ListKind || kind == cue.BottomKind {
			eachChild(v, walk)
			return
		}
		if _, isDefault := v.Default(); v.Err() == nil && !v.IsConcrete() && !isDefault {
			out = append(out, v.Path().String())
		}
	}
	walk(v)
	return out
}

// missingDiagnostic reports a required value the user did not set, at the
// nearest place they did write, with the schema's declaration after it.
func missingDiagnostic(l *loaded, path string, v cue.Value) diag.Diagnostic {
	ps := append(slices.Clone(l.userPositions(path)), v.Pos())
	return diag.Diagnostic{Code: CodeMissing, Severity: diag.Error, Path: path,
		Message:   fmt.Sprintf("required value %s is not set (expected %s)", path, v.IncompleteKind()),
		Positions: sortPositions(convertPositions(ps)),
		Hint:      fmt.Sprintf("set %s in the spec; `kcompile explain` shows what each field means", path)}
}

// checkDir reports a spec directory that does not exist, is a file or holds
// no .cue files, which CUE's loader words obscurely.
func checkDir(src Source, dir string) *diag.Diagnostic {
	d := &diag.Diagnostic{Code: CodeLoad, Severity: diag.Error, Positions: []diag.Pos{{File: dir}}}
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		d.Message = fmt.Sprintf("spec directory %s does not exist", src.Dir)
		d.Hint = "pass the directory that holds the spec's .cue files"
	case !fi.IsDir():
		d.Message = fmt.Sprintf("%s is a file, not a spec directory", src.Dir)
		d.Hint = "pass the directory that holds the spec's .cue files: " + filepath.Dir(src.Dir)
	default:
		if len(src.Overlay) > 0 {
			return nil
		}
		cue, _ := filepath.Glob(filepath.Join(dir, "*.cue"))
		if len(cue) > 0 {
			return nil
		}
		d.Message = fmt.Sprintf("spec directory %s holds no .cue files", src.Dir)
		d.Hint = "pass the directory that holds the spec's .cue files (see examples/)"
	}
	return d
}

// buildSchema compiles the embedded schema package of a version and returns
// its #Cluster definition. File names are repository-relative so positions
// in diagnostics point at schema/v1alpha1/*.cue.
func buildSchema(ctx *cue.Context, v schema.Version) (cue.Value, error) {
	files, err := schema.Files(v)
	if err != nil {
		return cue.Value{}, err
	}
	inst := build.NewContext().NewInstance("kcompile.dev/schema/"+v.Dir, nil)
	for _, name := range schema.Names(files) {
		f, err := parser.ParseFile(name, files[name], parser.ParseComments)
		if err != nil {
			return cue.Value{}, err
		}
		if err := inst.AddSyntax(f); err != nil {
			return cue.Value{}, err
		}
	}
	val := ctx.BuildInstance(inst)
	if err := val.Err(); err != nil {
		return cue.Value{}, err
	}
	def := val.LookupPath(cue.ParsePath("#Cluster"))
	return def, def.Err()
}

// recordWritten walks the user's value and records where each path was
// written (at its value) and where its label is, so defaults can be told
// from spec values, errors that carry only schema positions can point at
// the user's file, and problems with a key can point at the key.
func recordWritten(v cue.Value, out, labels map[string][]token.Pos) {
	var walk func(v cue.Value)
	walk = func(v cue.Value) {
		p := v.Path().String()
		out[p] = append(out[p], valuePositions(v)...)
		if f, ok := v.Source().(*ast.Field); ok && f.Label != nil {
			labels[p] = append(labels[p], f.Label.Pos())
		}
		eachChild(v, walk)
	}
	walk(v)
}

// eachChild calls fn for every regular field of a struct or element of a
// list; other values have no children.
func eachChild(v cue.Value, fn func(cue.Value)) {
	if v.IncompleteKind() == cue.ListKind {
		if it, err := v.List(); err == nil {
			for it.Next() {
				fn(it.Value())
			}
		}
		return
	}
	if it, err := v.Fields(); err == nil {
		for it.Next() {
			fn(it.Value())
		}
	}
}

// valuePositions returns where each conjunct of v was written, at the value
// rather than its label, so a value written in two files names both.
func valuePositions(v cue.Value) []token.Pos {
	at := func(x cue.Value) token.Pos {
		if f, ok := x.Source().(*ast.Field); ok && f.Value != nil && f.Value.Pos().IsValid() {
			return f.Value.Pos()
		}
		return x.Pos()
	}
	var ps []token.Pos
	if op, args := v.Expr(); op == cue.AndOp {
		for _, a := range args {
			if p := at(a); p.IsValid() {
				ps = append(ps, p)
			}
		}
	}
	if len(ps) == 0 {
		if p := at(v); p.IsValid() {
			ps = append(ps, p)
		}
	}
	return ps
}

// userPositions returns where the user wrote path, or, when the user did
// not write it (a missing required field), where they wrote its nearest
// ancestor.
func (l *loaded) userPositions(path string) []token.Pos {
	for {
		if ps, ok := l.written[path]; ok && len(ps) > 0 {
			return ps
		}
		// An element the user did not write (a pool's n-th MAC): use the
		// list's position.
		if strings.HasSuffix(path, "]") {
			if i := strings.LastIndex(path, "["); i > 0 {
				path = path[:i]
				continue
			}
		}
		i := lastDot(path)
		if i < 0 {
			if ps := l.written[""]; len(ps) > 0 {
				return ps[:1]
			}
			return nil
		}
		path = path[:i]
	}
}

// lastDot finds the last path separator outside quotes.
func lastDot(path string) int {
	inQuote := false
	last := -1
	for i := 0; i < len(path); i++ {
		switch path[i] {
		case '"':
			inQuote = !inQuote
		case '\\':
			i++
		case '.':
			if !inQuote {
				last = i
			}
		}
	}
	return last
}

// fromCUE converts a CUE error into diagnostics. Errors at one path are
// merged: a defaulted disjunction reports one mistake several times.
func fromCUE(err error, code string, l *loaded, hint string) diag.List {
	var out diag.List
	byPath := map[string]int{}
	for _, e := range cueerrors.Errors(err) {
		path := ""
		if len(e.Path()) > 0 {
			path = cue.MakePath(selectors(e.Path())...).String()
		}
		format, args := e.Msg()
		msg := fmt.Sprintf(format, args...)
		positions := cueerrors.Positions(e)
		d := diag.Diagnostic{Code: code, Severity: diag.Error, Path: path, Hint: hint}
		if l != nil {
			// The user's own position comes first, at the value they wrote:
			// a schema position alone does not tell them which file to edit.
			// An unknown field is reported at its label, which CUE gives.
			if !strings.Contains(msg, "field not allowed") {
				positions = append(slices.Clone(l.userPositions(path)), positions...)
			}
			if strings.Contains(msg, "conflicting values") || strings.Contains(msg, "empty disjunction") {
				if m := l.allowedMessage(path); m != "" {
					msg = m
				}
			}
		}
		if l != nil && strings.HasPrefix(msg, "conflicting values") {
			if m, ok := l.disagreement(path, cueerrors.Positions(e)); ok {
				msg = m
				d.Hint = "a value can be set only once: keep one of them, or move the other into a default with *"
			}
		}
		d.Message = msg
		if strings.Contains(msg, "incomplete value") || strings.Contains(msg, "non-concrete value") {
			d.Code = CodeMissing
			d.Message = fmt.Sprintf("required value %s is not set (%s)", path, kindOf(msg))
			d.Hint = fmt.Sprintf("set %s in the spec; `kcompile explain` shows what each field means", path)
		}
		if d.Hint == "" {
			d.Hint = hintFor(msg, path, l)
		}
		d.Positions = sortPositions(convertPositions(positions))
		if i, ok := byPath[path]; ok && path != "" {
			out[i].Positions = append(out[i].Positions, d.Positions...)
			if informativeness(d.Message) > informativeness(out[i].Message) {
				out[i].Message, out[i].Hint = d.Message, d.Hint
			}
			continue
		}
		byPath[path] = len(out)
		out = append(out, d)
	}
	return out
}

// informativeness ranks CUE messages about one path: a defaulted
// disjunction reports a mistake once against the default ("conflicting
// values 1500 and 9500") and once against the constraint it breaks, which
// is the one worth showing.
func informativeness(msg string) int {
	switch {
	case strings.HasSuffix(msg, "errors in empty disjunction:"):
		return 0
	case strings.HasPrefix(msg, "conflicting values") && !strings.Contains(msg, "mismatched types"):
		return 1
	case strings.Contains(msg, "mismatched types"):
		return 2
	}
	return 3
}

// disagreement rewrites a conflict between two values the user wrote in
// different places, which is no schema matter.
func (l *loaded) disagreement(path string, ps []token.Pos) (string, bool) {
	var user []token.Pos
	for _, p := range ps {
		if p.IsValid() && !strings.HasPrefix(p.Filename(), "schema/") {
			user = append(user, p)
		}
	}
	written := l.written[path]
	if len(written) < 2 || len(user) < 2 {
		return "", false
	}
	vals := make([]string, 0, len(written))
	for _, p := range written {
		vals = append(vals, fmt.Sprintf("%s at %s:%d:%d", l.sourceText(p), filepath.Base(p.Filename()), p.Line(), p.Column()))
	}
	return fmt.Sprintf("%s is set to different values: %s", path, strings.Join(vals, " and ")), true
}

// sourceText returns the literal written at p, for messages.
func (l *loaded) sourceText(p token.Pos) string {
	b, err := os.ReadFile(p.Filename())
	if err != nil {
		return "a value"
	}
	lines := strings.Split(string(b), "\n")
	if p.Line() < 1 || p.Line() > len(lines) {
		return "a value"
	}
	line := lines[p.Line()-1]
	if p.Column() < 1 || p.Column() > len(line) {
		return "a value"
	}
	rest := strings.TrimSpace(line[p.Column()-1:])
	if i := strings.IndexAny(rest, ",}/"); i > 0 && !strings.HasPrefix(rest, "\"") {
		rest = rest[:i]
	} else if strings.HasPrefix(rest, "\"") {
		if j := strings.Index(rest[1:], "\""); j >= 0 {
			rest = rest[:j+2]
		}
	}
	return strings.TrimSpace(rest)
}

func kindOf(msg string) string {
	msg = strings.TrimPrefix(msg, "incomplete value ")
	msg = strings.TrimPrefix(msg, "non-concrete value ")
	return "expected " + msg
}

// schemaAt looks path up in the schema, following pattern constraints
// ([string]: #Node) and list element types where the path names a key or
// an index the schema cannot know.
func schemaAt(def cue.Value, path cue.Path) cue.Value {
	v := def
	for _, sel := range path.Selectors() {
		next := v.LookupPath(cue.MakePath(sel))
		if !next.Exists() {
			any := cue.AnyString
			if sel.Type() == cue.IndexLabel {
				any = cue.AnyIndex
			}
			next = v.LookupPath(cue.MakePath(any))
		}
		if !next.Exists() {
			return next
		}
		v = next
	}
	return v
}

// allowedMessage explains a value that matches none of the alternatives
// the schema allows at path, listing the alternatives when they are
// concrete, instead of CUE's message about one pair of them.
func (l *loaded) allowedMessage(path string) string {
	if path == "" || l.def.Err() != nil {
		return ""
	}
	got := l.user.LookupPath(cue.ParsePath(path))
	if !got.Exists() || !got.IsConcrete() {
		return ""
	}
	want := schemaAt(l.def, cue.ParsePath(path))
	if !want.Exists() {
		return ""
	}
	var alts []string
	var walk func(v cue.Value) bool
	walk = func(v cue.Value) bool {
		op, args := v.Expr()
		switch {
		case op == cue.OrOp:
			for _, a := range args {
				if !walk(a) {
					return false
				}
			}
			return true
		case v.IsConcrete() && v.Kind() != cue.StructKind && v.Kind() != cue.ListKind:
			s := formatValue(v)
			if !slices.Contains(alts, s) {
				alts = append(alts, s)
			}
			return true
		}
		return false
	}
	if !walk(want) || len(alts) == 0 {
		return ""
	}
	return fmt.Sprintf("%s is not allowed here; allowed: %s", formatValue(got), strings.Join(alts, ", "))
}

// sortPositions puts user positions before schema positions, keeping order
// otherwise: the first is where the diagnostic is reported.
func sortPositions(ps []diag.Pos) []diag.Pos {
	slices.SortStableFunc(ps, func(a, b diag.Pos) int {
		as, bs := strings.HasPrefix(a.File, "schema/"), strings.HasPrefix(b.File, "schema/")
		switch {
		case as == bs:
			return 0
		case bs:
			return -1
		}
		return 1
	})
	return ps
}

func convertPositions(ps []token.Pos) []diag.Pos {
	out := make([]diag.Pos, 0, len(ps))
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		out = append(out, diag.Pos{File: p.Filename(), Line: p.Line(), Column: p.Column()})
	}
	return out
}

func selectors(path []string) []cue.Selector {
	sels := make([]cue.Selector, 0, len(path))
	for _, s := range path {
		switch {
		case strings.HasPrefix(s, "#"):
			sels = append(sels, cue.Def(s))
		case strings.HasPrefix(s, "_"):
			sels = append(sels, cue.Str(s))
		default:
			if s != "" && s[0] >= '0' && s[0] <= '9' {
				var n int
				if _, err := fmt.Sscanf(s, "%d", &n); err == nil && fmt.Sprint(n) == s {
					sels = append(sels, cue.Index(n))
					continue
				}
			}
			sels = append(sels, cue.Str(s))
		}
	}
	return sels
}

// hintFor suggests a fix for the common CUE error messages.
func hintFor(msg, path string, l *loaded) string {
	switch {
	case strings.Contains(msg, "field not allowed"):
		field := path[lastDot(path)+1:]
		if s := l.suggest(path); s != "" {
			return fmt.Sprintf("%s is not a field here; did you mean %s?", field, s)
		}
		return fmt.Sprintf("%s is not a field here; remove it or check its spelling (`kcompile explain` lists the fields)", field)
	case strings.Contains(msg, "is not allowed here; allowed:"):
		return "use one of the allowed values"
	case strings.Contains(msg, "mismatched types"):
		return "the value has the wrong type: write it as the schema declares (see the schema position)"
	case strings.Contains(msg, "conflicting values"), strings.Contains(msg, "empty disjunction"):
		return "the value does not match the schema: see the schema position for what is allowed"
	case strings.Contains(msg, "invalid value"), strings.Contains(msg, "out of bound"):
		return "the value is outside what the schema allows: see the constraint at the schema position"
	case strings.Contains(msg, "reference") && strings.Contains(msg, "not found"):
		return "the spec refers to a name that is not defined; check its spelling"
	}
	return "fix the value at the position shown"
}

// suggest finds a declared field close in spelling to the unknown one at
// path.
func (l *loaded) suggest(path string) string {
	if l == nil || !l.value.Exists() {
		return ""
	}
	i := lastDot(path)
	field := path[i+1:]
	parent := l.value
	if i >= 0 {
		parent = l.value.LookupPath(cue.ParsePath(path[:i]))
	}
	it, err := parent.Fields(cue.Optional(true))
	if err != nil {
		return ""
	}
	best, bestDist := "", 3
	for it.Next() {
		name := it.Selector().Unquoted()
		if name == field {
			continue
		}
		if d := editDistance(strings.ToLower(name), strings.ToLower(field)); d < bestDist {
			best, bestDist = name, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func formatValue(v cue.Value) string {
	b, err := v.MarshalJSON()
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func toIRPos(p token.Pos) ir.Pos {
	if !p.IsValid() {
		return ir.Pos{}
	}
	return ir.Pos{File: p.Filename(), Line: p.Line(), Column: p.Column()}
}
