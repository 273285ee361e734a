package compiler

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/build"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/inject/embed"
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
	// OverlayOnly reads the overlay's files alone, none of Dir's: a spec
	// held in memory, such as a state of kcompile plan (StateSource).
	OverlayOnly bool
	// Tolerate are codes whose errors are reported as warnings: a state
	// of kcompile plan between two etcd memberships has, while it lasts,
	// an even one.
	Tolerate []string
	// Profile adds the checks of a benchmark the cluster must meet:
	// ProfileCIS, or none.
	Profile string
	// Policies are directories of organisation policies (CUE packages
	// with a policies field) the spec must satisfy.
	Policies []string
	// Bound, when set, runs each stage of the evaluation (the spec's
	// loading, checks and lowering; each policy directory) and returns an
	// error, such as "ran longer than 1m0s", when the stage went past what
	// the caller allows: the stage is then abandoned (CUE cannot be
	// interrupted; its goroutine ends with the process) and reported at
	// the spec or policy directory. The caller owns the clock and the
	// memory limit; nil runs every stage unbounded.
	Bound func(eval func()) error
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
	// Everything CUE reads, @embed included, stays inside the spec
	// directory and is a regular file.
	fsys, err := openConfined(dir, src.Overlay)
	if err == nil {
		fsys.only = src.OverlayOnly
	}
	if err != nil {
		return nil, diag.List{{Code: CodeLoad, Severity: diag.Error, Message: err.Error(), Positions: []diag.Pos{{File: dir}}}}
	}
	defer fsys.Close()
	insts := load.Instances([]string{"."}, fsys.config(""))
	if len(insts) != 1 {
		return nil, diag.List{{Code: CodeLoad, Severity: diag.Error, Message: fmt.Sprintf("%s: expected one CUE package, found %d", src.Dir, len(insts)),
			Hint: "put the spec's .cue files in one directory, all with the same package clause"}}
	}
	inst := insts[0]
	if d := fsys.diagnostics(CodeLoad, "spec", inst.Err); len(d) > 0 {
		return nil, d
	}
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
	if d := fsys.diagnostics(CodeLoad, "spec", user.Err()); len(d) > 0 {
		return nil, d
	}
	if err := user.Err(); err != nil {
		out, rest := importProblems(CodeLoad, "spec", err)
		if rest != nil {
			out = append(out, fromCUE(rest, CodeSchema, l, "")...)
		}
		return nil, out
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
			d = importFailed(src, CodeLoad, "spec", e)
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

// importFailed words CUE's "import failed", of a package that cannot be
// loaded, naming the import path at the import; what is what imports
// it ("spec", "policy"). e must carry the import's position.
func importFailed(src Source, code, what string, e cueerrors.Error) diag.Diagnostic {
	full := e.Error()
	reason := full[strings.LastIndex(full, ": ")+2:]
	at := cueerrors.Positions(e)[0]
	return diag.Diagnostic{Code: code, Severity: diag.Error, Positions: convertPositions([]token.Pos{at}),
		Message: fmt.Sprintf("import %s cannot be loaded: %s", sourceText(src, at), reason),
		Hint:    fmt.Sprintf("a %s may import CUE's standard library (such as \"strings\" or \"list\"); another package needs a CUE module (`cue mod init` in the %s directory, with the dependency), or write its values into the %s", what, what, what)}
}

// stdlib are the packages of CUE's standard library, which any CUE file
// may import without a module.
var stdlib = []string{"crypto/ed25519", "crypto/hmac", "crypto/md5", "crypto/sha1", "crypto/sha256", "crypto/sha512",
	"encoding/base64", "encoding/csv", "encoding/hex", "encoding/json", "encoding/toml", "encoding/yaml",
	"html", "list", "math", "math/bits", "net", "path", "regexp", "strconv", "strings", "struct",
	"text/tabwriter", "text/template", "time", "uuid"}

// importProblems takes the errors about imports out of err, which CUE
// reports when it builds a package: an import of a package the standard
// library does not have is one diagnostic per import path, at each
// import of it (CUE also reports it as unused where nothing refers to
// it), naming the standard package of the nearest name; an import left
// unused is one at the import. The rest of err is returned. code is the
// diagnostics' code, what names what imports ("spec", "policy").
func importProblems(code, what string, err error) (diag.List, error) {
	var out diag.List
	var rest cueerrors.Error
	undefined := map[string]int{}
	at := func(p token.Pos) string { return fmt.Sprintf("%s:%d:%d", p.Filename(), p.Line(), p.Column()) }
	undefinedAt := map[string]bool{}
	errs := cueerrors.Errors(err)
	for _, e := range errs {
		format, args := e.Msg()
		ps := cueerrors.Positions(e)
		if format != "builtin package %q undefined" || len(args) != 1 || len(ps) == 0 {
			continue
		}
		for _, p := range ps {
			undefinedAt[at(p)] = true
		}
		name := fmt.Sprint(args[0])
		if i, ok := undefined[name]; ok {
			out[i].Positions = append(out[i].Positions, convertPositions(ps)...)
			continue
		}
		hint := fmt.Sprintf("a %s imports the standard library by name (such as \"strings\", \"list\" or \"net\"); another package needs a CUE module", what)
		best, dist := "", 3
		for _, std := range stdlib {
			if d := diag.Distance(name, std); d < dist {
				best, dist = std, d
			}
		}
		if best != "" {
			hint = fmt.Sprintf("did you mean %q? ", best) + hint
		}
		undefined[name] = len(out)
		out = append(out, diag.Diagnostic{Code: code, Severity: diag.Error, Positions: convertPositions(ps),
			Message: fmt.Sprintf("import %q is not a package of CUE's standard library", name), Hint: hint})
	}
	for _, e := range errs {
		format, args := e.Msg()
		ps := cueerrors.Positions(e)
		switch {
		case format == "builtin package %q undefined" && len(args) == 1 && len(ps) > 0:
		case strings.HasPrefix(format, "imported and not used: ") && len(args) > 0 && len(ps) > 0:
			if undefinedAt[at(ps[0])] {
				// The same import, reported above.
				continue
			}
			out = append(out, diag.Diagnostic{Code: code, Severity: diag.Error, Positions: convertPositions(ps),
				Message: fmt.Sprintf("import %v is not used", args[0]),
				Hint:    fmt.Sprintf("remove the import, or refer to the package in the %s", what)})
		default:
			rest = cueerrors.Append(rest, e)
		}
	}
	if rest == nil {
		return out, nil
	}
	return out, rest
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
	case errors.Is(err, syscall.ELOOP):
		d.Message = fmt.Sprintf("spec directory %s is a symbolic-link loop: following its links leads back to them", src.Dir)
		d.Hint = "pass the directory that holds the spec's .cue files, or point the link at it"
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		d.Message = fmt.Sprintf("spec directory %s cannot be read: %v", src.Dir, errors.Unwrap(err))
		d.Hint = "pass a directory kcompile may read, holding the spec's .cue files"
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

// confinedFS is the file system CUE's loader, and through it @embed,
// reads a spec or policy directory by: an os.Root, so that no path and no
// symbolic link leads out of the directory (absolute links are refused
// too), with the in-memory overlay of a Source over it. It opens only
// regular files: a FIFO, device or socket is refused before it is
// opened, and opened without blocking should it be swapped in after the
// check. Every refusal is recorded, to be reported as a diagnostic
// naming the file: CUE's own messages word some of them as a missing
// file.
type confinedFS struct {
	root *os.Root
	// dir is the directory's absolute path, for positions and messages.
	dir     string
	overlay map[string][]byte
	// only hides the directory's own files behind the overlay's.
	only bool
	// cwd is where a policy is loaded from by import path: the working
	// directory, inside the module root.
	cwd     string
	mu      sync.Mutex
	refused []refusal
}

// refusal is a file the confined file system would not read: path is
// slash-separated inside the directory.
type refusal struct {
	path, reason string
}

// openConfined opens dir (after resolving its symbolic links) as the
// root of a confined file system; overlay keys are paths inside dir.
func openConfined(dir string, overlay map[string][]byte) (*confinedFS, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	c := &confinedFS{root: root, dir: dir, overlay: map[string][]byte{}}
	for name, b := range overlay {
		c.overlay[filepath.ToSlash(filepath.Clean(name))] = b
	}
	return c, nil
}

// config is a loader configuration reading through c, with positions
// naming the files by their real paths; dir is where to load from, a
// slash path inside c.
func (c *confinedFS) config(dir string) *load.Config {
	return &load.Config{FS: c, Dir: "/" + strings.TrimPrefix(dir, "/"), FromFSPath: c.osPath}
}

// osPath maps a path of the loader (slash-separated, from the root of c)
// to the file's path on disk.
func (c *confinedFS) osPath(p string) string {
	return filepath.Join(c.dir, filepath.FromSlash(strings.TrimPrefix(p, "/")))
}

func (c *confinedFS) Close() error { return c.root.Close() }

func (c *confinedFS) refuse(op, name, reason string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.ContainsFunc(c.refused, func(r refusal) bool { return r.path == name }) {
		c.refused = append(c.refused, refusal{path: name, reason: reason})
	}
	return &fs.PathError{Op: op, Path: c.osPath(name), Err: errors.New(reason)}
}

// failed turns an error of the root into a refusal when the path leaves
// the directory or loops; other errors (a missing file) pass unchanged,
// under the file's real path.
func (c *confinedFS) failed(op, name string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case errors.Is(err, syscall.ELOOP):
		return c.refuse(op, name, "is a symbolic link that leads back to itself")
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, fs.ErrPermission):
	default:
		if fi, lerr := c.root.Lstat(name); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 || strings.Contains(err.Error(), "escapes") {
			return c.refuse(op, name, "is a symbolic link that leads out of the directory (or is absolute)")
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &fs.PathError{Op: op, Path: c.osPath(name), Err: err}
}

// special names what a file that is not a regular file or a directory
// is.
func special(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "is a named pipe (FIFO), not a regular file"
	case m&fs.ModeSocket != 0:
		return "is a socket, not a regular file"
	case m&fs.ModeDevice != 0:
		return "is a device, not a regular file"
	}
	return "is not a regular file"
}

// Open opens a regular file or a directory of the root.
func (c *confinedFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if b, ok := c.overlay[name]; ok {
		return &memFile{Reader: bytes.NewReader(b), info: memInfo{name: path.Base(name), size: int64(len(b))}}, nil
	}
	fi, err := c.Stat(name)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		f, err := c.root.Open(name)
		if err != nil {
			if c.overlayDir(name) {
				return &memFile{Reader: bytes.NewReader(nil), info: memInfo{name: path.Base(name), dir: true}}, nil
			}
			return nil, c.failed("open", name, err)
		}
		return f, nil
	}
	if !fi.Mode().IsRegular() {
		return nil, c.refuse("open", name, special(fi.Mode()))
	}
	// Not blocking, should a FIFO have replaced the file since.
	f, err := c.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, c.failed("open", name, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return nil, c.failed("open", name, err)
		}
		return nil, c.refuse("open", name, special(fi.Mode()))
	}
	return f, nil
}

// Stat describes a file of the root, following symbolic links inside it.
func (c *confinedFS) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrInvalid}
	}
	if b, ok := c.overlay[name]; ok {
		return memInfo{name: path.Base(name), size: int64(len(b))}, nil
	}
	fi, err := c.root.Stat(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && c.overlayDir(name) {
			return memInfo{name: path.Base(name), dir: true}, nil
		}
		// The loader stats what it opens next: report its open.
		return nil, c.failed("open", name, err)
	}
	return fi, nil
}

// Lstat describes a file of the root, a symbolic link as itself.
func (c *confinedFS) Lstat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrInvalid}
	}
	if _, ok := c.overlay[name]; ok || c.overlayDir(name) {
		return c.Stat(name)
	}
	fi, err := c.root.Lstat(name)
	if err != nil {
		return nil, c.failed("lstat", name, err)
	}
	return fi, nil
}

// ReadLink reads a symbolic link of the root (not what it leads to).
func (c *confinedFS) ReadLink(name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	t, err := c.root.Readlink(name)
	if err != nil {
		return "", c.failed("readlink", name, err)
	}
	return t, nil
}

// ReadDir lists a directory of the root with the overlay's files in it.
func (c *confinedFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	var out []fs.DirEntry
	f, err := c.root.Open(name)
	if err == nil {
		out, err = f.ReadDir(-1)
		f.Close()
	}
	if c.only {
		out, err = nil, nil
	}
	if err != nil && !(errors.Is(err, fs.ErrNotExist) && c.overlayDir(name)) {
		return nil, c.failed("open", name, err)
	}
	for p, b := range c.overlay {
		if path.Dir(p) != name {
			continue
		}
		out = slices.DeleteFunc(out, func(e fs.DirEntry) bool { return e.Name() == path.Base(p) })
		out = append(out, fs.FileInfoToDirEntry(memInfo{name: path.Base(p), size: int64(len(b))}))
	}
	for p := range c.overlay {
		// A directory only the overlay has.
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if path.Dir(d) == name && !slices.ContainsFunc(out, func(e fs.DirEntry) bool { return e.Name() == path.Base(d) }) {
				out = append(out, fs.FileInfoToDirEntry(memInfo{name: path.Base(d), dir: true}))
			}
		}
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// overlayDir reports whether the overlay holds files below name.
func (c *confinedFS) overlayDir(name string) bool {
	for p := range c.overlay {
		if name == "." || strings.HasPrefix(p, name+"/") {
			return true
		}
	}
	return false
}

// diagnostics reports each refused file under code, at the positions of
// the CUE errors of err that name it (an @embed attribute), else at the
// file; what names the directory's kind ("spec", "policy").
func (c *confinedFS) diagnostics(code, what string, err error) diag.List {
	c.mu.Lock()
	refused := slices.Clone(c.refused)
	c.mu.Unlock()
	if len(refused) == 0 {
		return nil
	}
	embeds := c.embeds()
	var out diag.List
	for _, r := range refused {
		d := diag.Diagnostic{Code: code, Severity: diag.Error,
			Message: fmt.Sprintf("%s file %s %s: kcompile reads only regular files inside the %s directory", what, diag.Quote(r.path), r.reason, what),
			Hint:    fmt.Sprintf("replace it by a regular file inside %s, or remove it", c.dir)}
		// Where it is embedded: CUE's loader reads data files beside the
		// package before any @embed is evaluated, so its errors carry
		// no position; the attributes are found here.
		var ps []token.Pos
		for _, e := range embeds {
			if e.Matches(r.path) {
				ps = append(ps, e.Attribute.Pos)
			}
		}
		for _, e := range cueerrors.Errors(err) {
			if msg := e.Error(); strings.Contains(msg, path.Base(r.path)+":") || strings.Contains(msg, path.Base(r.path)+`"`) {
				ps = append(ps, cueerrors.Positions(e)...)
			}
		}
		d.Positions = sortPositions(convertPositions(ps))
		d.Positions = slices.Compact(d.Positions)
		if len(d.Positions) > 0 {
			d.Hint = fmt.Sprintf("embed only regular files inside %s: copy the file there, or remove the @embed", c.dir)
		}
		d.Positions = append(d.Positions, diag.Pos{File: c.osPath(r.path)})
		out = append(out, d)
	}
	return out
}

// embeds lists the @embed attributes of the .cue files in the directory
// a package is loaded from, reading only what the confined file system
// lets through (a file it refuses is left out).
func (c *confinedFS) embeds() []*embed.Embed {
	dir := path.Clean(strings.TrimPrefix(c.cwd, "/"))
	if dir == "" {
		dir = "."
	}
	entries, err := c.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []*embed.Embed
	for _, e := range entries {
		name := path.Join(dir, e.Name())
		if e.IsDir() || !strings.HasSuffix(name, ".cue") {
			continue
		}
		b, err := fs.ReadFile(c, name)
		if err != nil {
			continue
		}
		f, err := parser.ParseFile(c.osPath(name), b, parser.ParseComments)
		if err != nil {
			continue
		}
		found, _ := embed.EmbeddedPaths(name, f)
		out = append(out, found...)
	}
	return out
}

// memFile is a file of the overlay.
type memFile struct {
	*bytes.Reader
	info memInfo
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *memFile) Close() error               { return nil }

type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string { return i.name }
func (i memInfo) Size() int64  { return i.size }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }

// confinePolicy opens the file system a policy package is loaded from,
// and the argument to load it by: a directory is its own root; an import
// path is resolved in the CUE module of the working directory (locally,
// never fetched), confined to the module's root.
func confinePolicy(dir string) (*confinedFS, string, *diag.Diagnostic) {
	d := &diag.Diagnostic{Code: CodePolicyLoad, Severity: diag.Error, Positions: []diag.Pos{{File: dir}},
		Hint: "give --policy a directory holding one CUE package with a policies field, or an import path of the CUE module here"}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, syscall.ELOOP):
		d.Message = fmt.Sprintf("policy directory %s is a symbolic-link loop: following its links leads back to them", dir)
		return nil, "", d
	case err == nil && fi.IsDir():
		abs, err := filepath.Abs(dir)
		if err == nil {
			d.Positions = []diag.Pos{{File: abs}}
			if cue, _ := filepath.Glob(filepath.Join(abs, "*.cue")); len(cue) == 0 {
				d.Message = fmt.Sprintf("policy directory %s holds no CUE files", dir)
				d.Hint = "give --policy the directory that holds the policy package's .cue files (see examples/policies)"
				return nil, "", d
			}
			var fsys *confinedFS
			if fsys, err = openConfined(abs, nil); err == nil {
				return fsys, ".", nil
			}
		}
		d.Message = fmt.Sprintf("policy directory %s cannot be read: %v", dir, err)
		return nil, "", d
	case err == nil:
		d.Message = fmt.Sprintf("policy path %s is a file, not a directory", dir)
		d.Hint = "give --policy the directory that holds the policy package's .cue files: " + filepath.Dir(dir)
		return nil, "", d
	case !errors.Is(err, fs.ErrNotExist):
		d.Message = fmt.Sprintf("policy directory %s cannot be read: %v", dir, errors.Unwrap(err))
		return nil, "", d
	case strings.HasPrefix(dir, ".") || filepath.IsAbs(dir) || !strings.Contains(dir, "/"):
		d.Message = fmt.Sprintf("policy directory %s does not exist", dir)
		d.Hint = "give --policy the directory that holds the policy package's .cue files, relative to the working directory or absolute"
		return nil, "", d
	}
	// Not a directory: a package of the CUE module here.
	wd, err := os.Getwd()
	if err != nil {
		d.Message = fmt.Sprintf("policy package %s: %v", dir, err)
		return nil, "", d
	}
	root := ""
	for m := wd; ; {
		if fi, err := os.Stat(filepath.Join(m, "cue.mod")); err == nil && fi.IsDir() {
			root = m
			break
		}
		up := filepath.Dir(m)
		if up == m {
			break
		}
		m = up
	}
	if root == "" {
		// No module to resolve an import path in: the path is a
		// directory that is not there.
		d.Message = fmt.Sprintf("policy path %s: no such directory, and not an import path of the CUE module here", dir)
		d.Hint = "give --policy the directory that holds the policy package's .cue files; an import path needs a CUE module (cue.mod) in or above the working directory"
		return nil, "", d
	}
	fsys, err := openConfined(root, nil)
	if err != nil {
		d.Message = fmt.Sprintf("policy package %s: %v", dir, err)
		return nil, "", d
	}
	rel, _ := filepath.Rel(root, wd)
	fsys.cwd = filepath.ToSlash(rel)
	return fsys, dir, nil
}

// Definition compiles the embedded schema of the newest version and
// returns its definition def (#Cluster, #Scenario), for tests that derive
// what they cover from the schema itself.
func Definition(ctx *cue.Context, def string) (cue.Value, error) {
	vs := schema.Versions()
	return buildSchema(ctx, vs[len(vs)-1], def)
}
