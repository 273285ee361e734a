package review

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/targets"
)

// TestWaiversShown: a violation the head waives that the base did not
// have is introduced, waived by this change; one the base reports and the
// head waives is not fixed; every waiver added, removed or changed is
// listed, and the sides are not equal.
func TestWaiversShown(t *testing.T) {
	at := func(file string, line int) []diag.Pos { return []diag.Pos{{File: file, Line: line, Column: 3}} }
	newV := diag.Diagnostic{Code: "prod-new", Severity: diag.Error, Path: "a", Message: "new", Positions: at("head/c.cue", 2)}
	oldV := diag.Diagnostic{Code: "prod-old", Severity: diag.Error, Path: "b", Message: "old", Positions: at("base/c.cue", 3)}
	base := Side{Label: "base", Tree: targets.NewTree(), Checks: diag.List{}, Policies: diag.List{oldV},
		Waivers: []Waiver{{ID: "prod-gone", Reason: "was", Positions: at("base/w.cue", 1)}, {ID: "prod-same", Reason: "before"}}}
	head := Side{Label: "head", Tree: targets.NewTree(), Checks: diag.List{}, Policies: diag.List{},
		Waivers: []Waiver{
			{ID: "prod-new", Reason: "a lab", Positions: at("head/w.cue", 4), Waives: diag.List{newV}},
			{ID: "prod-old", Reason: "later", Positions: at("head/w.cue", 5), Waives: diag.List{oldV}},
			{ID: "prod-same", Reason: "after"},
		}}
	r := Compare(base, head, Options{})
	if r.Equal() {
		t.Fatal("a change that adds waivers is not equal")
	}
	if len(r.Findings) != 1 || !r.Findings[0].Waived || r.Findings[0].Code != "prod-new" || r.Findings[0].Change != Introduces {
		t.Fatalf("findings: %+v", r.Findings)
	}
	var got []string
	for _, w := range r.Waivers {
		got = append(got, w.Change+" "+w.Policy+" "+w.Position)
	}
	want := "removed prod-gone base/w.cue:1:3,added prod-new head/w.cue:4:3,added prod-old head/w.cue:5:3,changed prod-same "
	if strings.Join(got, ",") != want {
		t.Fatalf("waivers: %q, want %q", strings.Join(got, ","), want)
	}
	var text, md bytes.Buffer
	if err := r.WriteText(&text, false); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteMarkdown(&md, MarkdownOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"regressions and fixes: 1 introduced (1 error; 1 waived by this change), 0 fixed, 2 waivers added, 1 waiver changed, 1 waiver removed (check diagnostics and policy violations)\n",
		"  introduces policy prod-new (error) at a (head/c.cue:2:3): new, waived by this change: \"a lab\"\n",
		"  waiver changed: waives policy prod-same: reason \"after\", was \"before\" (hides 0 violations in the head)\n",
		"  waiver removed (base/w.cue:1:3): waives policy prod-gone: reason \"was\" (hides 0 violations in the base)\n",
	} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text lacks %q:\n%s", s, text.String())
		}
	}
	if !strings.Contains(md.String(), "- **waiver added** (`head/w.cue:4:3`): waives policy `prod-new`: reason \"a lab\"") {
		t.Errorf("markdown lacks the added waiver:\n%s", md.String())
	}
}
