package compiler

import (
	"bytes"
	"encoding/json"
	"fmt"

	"cuelang.org/go/cue/cuecontext"

	"github.com/kcompile/kcompile/compiler/diag"
)

// StateFile is the one file of a spec held in memory (StateSource).
const StateFile = "kcompile-state.cue"

// Concrete is the spec at src as plain data: the values the user wrote,
// evaluated (references, comprehensions), as maps, lists, strings,
// json.Numbers and bools, and none of the schema's defaults, so that a
// check that tells a written value from a default judges the state as
// it judged the spec. kcompile plan edits it into the states between
// two specs and compiles each as a spec of its own (StateSource);
// compiled as it is, it gives the same cluster as src.
func Concrete(src Source) (map[string]any, diag.List) {
	var out map[string]any
	var diags diag.List
	err := runBounded(src.Bound, func() {
		l, d := loadSpec(cuecontext.New(), src)
		if d.HasErrors() {
			diags = d
			return
		}
		b, err := l.user.MarshalJSON()
		if err == nil {
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			err = dec.Decode(&out)
		}
		if err != nil {
			diags = diag.List{{Code: CodeInternal, Severity: diag.Error, Positions: []diag.Pos{{File: src.Dir}},
				Message: "internal error: a checked spec is not concrete data: " + err.Error()}}
		}
	})
	if err != nil {
		return nil, diag.List{{Code: CodeEvalBound, Severity: diag.Error, Positions: []diag.Pos{{File: src.Dir}},
			Message: fmt.Sprintf("evaluating the spec %s %v", diag.Printable(src.Dir, 200), err)}}
	}
	return out, diags
}

// StateSource is a spec given as data (Concrete's, edited), compiled
// as if it were the only file of dir, with src's profile, policies,
// tolerated codes and bound. Its diagnostics point into StateFile.
func StateSource(src Source, data map[string]any) (Source, error) {
	text, err := StateText(data)
	if err != nil {
		return Source{}, err
	}
	return Source{Dir: src.Dir, Overlay: map[string][]byte{StateFile: text}, OverlayOnly: true,
		Profile: src.Profile, Policies: src.Policies, Tolerate: src.Tolerate, Bound: src.Bound}, nil
}

// StateText is spec data written as a spec file: a CUE package whose one
// value is the data (a JSON object is a CUE struct; the file embeds it).
// kcompile plan --states writes each state so, and StateSource compiles
// the same text.
func StateText(data map[string]any) ([]byte, error) {
	b, err := json.MarshalIndent(data, "", "\t")
	if err != nil {
		return nil, err
	}
	return append(append([]byte("package state\n\n"), b...), '\n'), nil
}
