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
	// Profile adds the checks of a benchmark the cluster must meet:
	// ProfileCIS, or none.
	Profile string
	// Policies are directories of organisation policies (CUE packages
	// with a policies field) the spec must satisfy.
	Policies []string
}

// loaded is a spec after loading: the user's own value, the same value
// unified with #Cluster, and where in the user's files each path was written.
type loaded struct {
	src     Source
	user    cue.Value
	value   cue.Value
	version schema.Version
	// schema is the version's schema package; def its #Cluster.
	schema cue.Value
	def    cue.Value
	// written maps a path to the positions the user wrote it at.
	written map[string][]token.Pos
	// labels maps a path to the positions of its field label.
	labels map[string][]token.Pos
	// firstFile is the first spec file, for diagnostics about the spec as a
	// whole.
	firstFile string
	// words name what was loaded in hints; zero for a spec.
	words docWords
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
		return nil, loadErrors(src, dir, inst.Err)
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
	l := &loaded{src: src, user: user, written: map[string][]token.Pos{}, labels: map[string][]token.Pos{}}
	if len(inst.BuildFiles) > 0 {
		l.firstFile = inst.BuildFiles[0].Filename
	}
	// Recorded first, so that errors of the user's value alone (a
	// structural cycle) can point where it was written.
	recordWritten(user, l.written, l.labels)
	if err := user.Err(); err != nil {
		return nil, fromCUE(err, CodeSchema, l, "")
	}

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

	root, err := schemaPackage(ctx, version)
	def := root.LookupPath(cue.ParsePath("#Cluster"))
	if err == nil {
		err = def.Err()
	}
	if err != nil {
		// The schema is embedded and tested; failing here is a kcompile bug.
		return nil, diag.List{{Code: CodeInternal, Severity: diag.Error, Message: "internal error: embedded schema does not build: " + err.Error()}}
	}
	l.schema, l.def = root, def
	l.value = user.Unify(def)
	diags = l.validate()
	if ambiguous := ambiguities(l); len(ambiguous) > 0 {
		// A disjunction left open leaves every value computed from it
		// open too: report the choice the user has to make, once, and
		// not the values waiting for it.
		kept := ambiguous
		for _, d := range diags {
			if d.Code != CodeMissing && !strings.Contains(d.Message, "unresolved disjunction") && !strings.Contains(d.Message, "incomplete value") {
				kept = append(kept, d)
			}
		}
		diags = kept
	}
	if diags.HasErrors() {
		return nil, diags
	}
	return l, nil
}

// validate reports every way the unified value does not match the schema.
func (l *loaded) validate() diag.List {
	var diags diag.List
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
	return diags
}

// ambiguities finds the disjunctions the user wrote that the schema does
// not narrow to one value and that have no default.
func ambiguities(l *loaded) diag.List {
	var out diag.List
	var walk func(v cue.Value)
	walk = func(v cue.Value) {
		if op, _ := v.Expr(); op == cue.OrOp {
			path := v.Path().String()
			eff := l.value.LookupPath(cue.ParsePath(path))
			if _, hasDefault := eff.Default(); !hasDefault && !eff.IsConcrete() {
				text := diag.Printable(fmt.Sprint(v), maxLiteral)
				out.Add(diag.Diagnostic{Code: CodeAmbiguous, Severity: diag.Error, Path: path,
					Message:   fmt.Sprintf("%s is ambiguous: %s leaves more than one value", path, text),
					Positions: convertPositions(l.userPositions(path)),
					Hint:      "choose one value, or mark the one to use with * (a default)"})
			}
			return
		}
		eachChild(v, walk)
	}
	walk(l.user)
	return out
}

// loadErrors converts what CUE's loader reports (syntax errors, package
// clauses, imports, unreadable files) into diagnostics that name the file
// and what to do about it.
func loadErrors(src Source, dir string, err error) diag.List {
	var out diag.List
	for _, e := range cueerrors.Errors(err) {
		format, args := e.Msg()
		msg := fmt.Sprintf(format, args...)
		positions := convertPositions(cueerrors.Positions(e))
		d := diag.Diagnostic{Code: CodeLoad, Severity: diag.Error, Message: msg, Positions: positions}
		full := e.Error()
		switch {
		case strings.Contains(full, "no package name"):
			file := strings.TrimSuffix(strings.TrimSpace(full[strings.LastIndex(full, "\n")+1:]), ": no package name")
			d.Message = "spec file has no package clause"
			d.Positions = []diag.Pos{{File: file, Line: 1, Column: 1}}
			d.Hint = "start every .cue file of the spec with the same package clause, such as `package cluster`"
		case strings.Contains(full, "found packages"):
			d.Hint = "a spec is one CUE package: give every .cue file in the directory the same package clause"
		case msg == "import failed" && len(d.Positions) > 0:
			reason := full[strings.LastIndex(full, ": ")+2:]
			d.Message = fmt.Sprintf("import %s cannot be loaded: %s", sourceText(src, cueerrors.Positions(e)[0]), reason)
			d.Hint = "a spec may import CUE's standard library (such as \"strings\" or \"list\"); another package needs a CUE module (`cue mod init` in the spec directory, with the dependency), or write its values into the spec"
		case len(d.Positions) == 0 && strings.HasPrefix(full, "open "):
			// The loader could not open a file: a dangling or looping
			// symbolic link, or a file it may not read.
			file, reason, _ := strings.Cut(strings.TrimPrefix(full, "open "), ": ")
			d.Message = fmt.Sprintf("spec file %s cannot be read: %s", diag.Quote(filepath.Base(file)), reason)
			d.Positions = []diag.Pos{{File: file}}
			d.Hint = "a symbolic link must lead to a readable .cue file: replace it by the file, or remove it"
			if strings.Contains(reason, "too many levels of symbolic links") {
				d.Message = fmt.Sprintf("spec file %s is a symbolic link that leads back to itself", diag.Quote(filepath.Base(file)))
			}
		default:
			if strings.TrimSpace(msg) == "" || msg == "%s" {
				d.Message = full
			}
			d.Hint = "fix the syntax error at the position shown"
		}
		if len(d.Positions) == 0 {
			d.Positions = []diag.Pos{{File: dir}}
		}
		out = append(out, d)
	}
	return out
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
		Hint:      fmt.Sprintf("set %s in the %s; %s", path, l.docWords().noun, l.docWords().explains)}
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
// its definition def (#Cluster, #Scenario).
func buildSchema(ctx *cue.Context, v schema.Version, def string) (cue.Value, error) {
	root, err := schemaPackage(ctx, v)
	if err != nil {
		return cue.Value{}, err
	}
	d := root.LookupPath(cue.ParsePath(def))
	return d, d.Err()
}

// schemaPackage compiles the embedded schema package of a version. File
// names are repository-relative so positions in diagnostics point at
// schema/v1alpha1/*.cue.
func schemaPackage(ctx *cue.Context, v schema.Version) (cue.Value, error) {
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
	return val, val.Err()
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

func toIRPos(p token.Pos) ir.Pos {
	if !p.IsValid() {
		return ir.Pos{}
	}
	return ir.Pos{File: p.Filename(), Line: p.Line(), Column: p.Column()}
}
