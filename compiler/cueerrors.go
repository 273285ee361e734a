package compiler

// This file turns CUE's errors into diagnostics: every position kept, the
// user's first, messages that name the allowed values, hints that say what
// to do.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/token"

	"github.com/kcompile/kcompile/compiler/diag"
)

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
				user := l.userPositions(path)
				// A hidden field or a definition of the user's is not
				// recorded as written, and CUE gives a structural cycle
				// no position: find where the user wrote it rather than
				// fall back to the top of the spec.
				if _, ok := l.written[path]; !ok && path != "" {
					if own := l.unrecordedPositions(e.Path()); len(own) > 0 {
						user = own
					}
				}
				positions = append(slices.Clone(user), positions...)
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
			w := l.docWords()
			d.Hint = fmt.Sprintf("set %s in the %s; %s", path, w.noun, w.explains)
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

// unrecordedPositions finds where the user wrote the value at the
// error path sels, through hidden fields and definitions, which the
// record of written paths leaves out.
func (l *loaded) unrecordedPositions(sels []string) []token.Pos {
	v := l.user
	for _, sel := range sels {
		if n, err := strconv.Atoi(sel); err == nil && v.IncompleteKind() == cue.ListKind {
			if v = v.LookupPath(cue.MakePath(cue.Index(n))); !v.Exists() {
				return nil
			}
			continue
		}
		it, err := v.Fields(cue.Hidden(true), cue.Definitions(true), cue.Optional(true))
		if err != nil {
			return nil
		}
		found := false
		for it.Next() {
			if s := it.Selector(); s.String() == sel || (s.IsString() && s.Unquoted() == sel) {
				v, found = it.Value(), true
				break
			}
		}
		if !found {
			return nil
		}
	}
	return valuePositions(v)
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
		vals = append(vals, fmt.Sprintf("%s at %s:%d:%d", sourceText(l.src, p), filepath.Base(p.Filename()), p.Line(), p.Column()))
	}
	return fmt.Sprintf("%s is set to different values: %s", path, strings.Join(vals, " and ")), true
}

// sourceText returns the literal written at p, for messages, escaped and
// cut for a terminal.
func sourceText(src Source, p token.Pos) string {
	b, err := readSpecFile(src, p.Filename())
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
	return diag.Printable(strings.TrimSpace(rest), maxLiteral)
}

// maxLiteral bounds a literal quoted from the spec into a message.
const maxLiteral = 80

// readSpecFile reads a spec file from the overlay or the disk.
func readSpecFile(src Source, file string) ([]byte, error) {
	for name, b := range src.Overlay {
		if filepath.Join(src.Dir, name) == file || name == file {
			return b, nil
		}
	}
	if abs, err := filepath.Abs(src.Dir); err == nil {
		for name, b := range src.Overlay {
			if filepath.Join(abs, name) == file {
				return b, nil
			}
		}
	}
	return os.ReadFile(file)
}

func kindOf(msg string) string {
	msg = strings.TrimPrefix(msg, "incomplete value ")
	msg = strings.TrimPrefix(msg, "non-concrete value ")
	return "expected " + msg
}

// schemaAt looks path up in the schema, following optional fields,
// pattern constraints ([string]: #Node) and list element types where the
// path names a key or an index the schema cannot know.
func schemaAt(def cue.Value, path cue.Path) cue.Value {
	v := def
	for _, sel := range path.Selectors() {
		next := v.LookupPath(cue.MakePath(sel))
		if !next.Exists() && sel.Type() == cue.StringLabel {
			next = v.LookupPath(cue.MakePath(sel.Optional()))
		}
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
	// noun names the alternatives when they are a definition that has
	// a name for them (#OS: the operating-system families).
	noun := ""
	var walk func(v cue.Value, depth int) bool
	walk = func(v cue.Value, depth int) bool {
		if depth > 8 {
			return false
		}
		if _, ref := v.ReferencePath(); len(ref.Selectors()) > 0 {
			if n, ok := enumNouns[ref.String()]; ok {
				noun = n
			}
		}
		op, args := v.Expr()
		switch {
		case op == cue.OrOp:
			for _, a := range args {
				if !walk(a, depth+1) {
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
		case op != cue.NoOp:
			// A reference to a definition (#OS) or a computed default:
			// its value holds the alternatives.
			if e := v.Eval(); e.Err() == nil {
				if eop, _ := e.Expr(); eop == cue.OrOp || e.IsConcrete() {
					return walk(e, depth+1)
				}
			}
		}
		return false
	}
	if !walk(want, 0) || len(alts) == 0 {
		return ""
	}
	if noun != "" {
		field := path[lastDot(path)+1:]
		bare := make([]string, len(alts))
		for i, a := range alts {
			if u, err := strconv.Unquote(a); err == nil {
				a = u
			}
			bare[i] = a
		}
		return fmt.Sprintf("%s %s is not a %s: %s", field, formatValue(got), noun, strings.Join(bare, ", "))
	}
	return fmt.Sprintf("%s is not allowed here; allowed: %s", formatValue(got), strings.Join(alts, ", "))
}

// enumNouns name the alternatives of a schema definition in messages
// about a value that is none of them.
var enumNouns = map[string]string{
	"#OS": "supported family",
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
			// CUE's error paths keep a quoted label quoted ("1.2.1").
			if u, err := strconv.Unquote(s); err == nil && strings.HasPrefix(s, `"`) {
				s = u
			}
			sels = append(sels, cue.Str(s))
		}
	}
	return sels
}

// docWords are the words hints use for what was loaded and where its
// fields are explained: a spec and a scenario differ.
type docWords struct{ noun, explains, lists string }

// docWords are the words of the document l loaded; a spec's when l is nil
// or says nothing.
func (l *loaded) docWords() docWords {
	if l != nil && l.words.noun != "" {
		return l.words
	}
	return docWords{noun: "spec", explains: "`kcompile explain` shows what each field means", lists: "`kcompile explain` lists the fields"}
}

// hintFor suggests a fix for the common CUE error messages.
func hintFor(msg, path string, l *loaded) string {
	switch {
	case strings.Contains(msg, "field not allowed"):
		field := path[lastDot(path)+1:]
		if s := l.suggest(path); s != "" {
			return fmt.Sprintf("%s is not a field here; did you mean %s?", field, s)
		}
		return fmt.Sprintf("%s is not a field here; remove it or check its spelling (%s)", field, l.docWords().lists)
	case strings.Contains(msg, "is not allowed here; allowed:"):
		return "use one of the allowed values"
	case strings.Contains(msg, "is not a supported family:"):
		return "kcompile configures these operating-system families only: write one of them"
	case strings.Contains(msg, "mismatched types"):
		return "the value has the wrong type: write it as the schema declares (see the schema position)"
	case strings.Contains(msg, "conflicting values"), strings.Contains(msg, "empty disjunction"):
		return "the value does not match the schema: see the schema position for what is allowed"
	case strings.Contains(msg, `=~"^[0-9]+\\.[0-9]+\\.[0-9]+$"`):
		return `write MAJOR.MINOR.PATCH without a leading "v", such as "1.37.2": kcompile adds the prefix each release uses`
	case strings.Contains(msg, `invalid value "" (out of bound !="")`):
		return "the value may not be empty: write it, or leave the field out"
	case strings.Contains(msg, "invalid value"), strings.Contains(msg, "out of bound"):
		return "the value is outside what the schema allows: see the constraint at the schema position"
	case strings.Contains(msg, "structural cycle"):
		return "a value may not contain itself: refer to another field, or write the value out"
	case strings.Contains(msg, "reference") && strings.Contains(msg, "not found"):
		return fmt.Sprintf("the %s refers to a name that is not defined; check its spelling", l.docWords().noun)
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
		if d := diag.Distance(strings.ToLower(name), strings.ToLower(field)); d < bestDist {
			best, bestDist = name, d
		}
	}
	return best
}

func formatValue(v cue.Value) string {
	b, err := v.MarshalJSON()
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
