package review

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/targets"
)

// TestMarkdownBound: a change to 300 nodes is far past what a comment
// may hold. Under a bound the comment keeps its title and findings, cuts
// the files' diffs (whole files, in order), then the node table and the
// summary's lists, says what it left out and how to see it, and stays
// under the bound; without one it is whole.
func TestMarkdownBound(t *testing.T) {
	base, head := targets.NewTree(), targets.NewTree()
	for n := range 300 {
		for f := range 4 {
			p := fmt.Sprintf("nodes/w%03d/etc/kubernetes/f%d.yaml", n, f)
			base.Add(p, []byte(strings.Repeat("line: old\n", 20)), 0o644)
			head.Add(p, []byte(strings.Repeat("line: new\n", 20)), 0o644)
		}
	}
	warning := diag.List{{Code: "KC0405", Severity: diag.Warning, Path: "controlPlane.nodes.cp2.zone", Message: "losing zone \"b\" loses etcd quorum"}}
	r := Compare(Side{Label: "base", Tree: base, Checks: diag.List{}}, Side{Label: "head", Tree: head, Checks: warning}, Options{})
	write := func(max int) string {
		var b bytes.Buffer
		if err := r.WriteMarkdown(&b, MarkdownOptions{MaxSize: max, TextCommand: "kcompile diff base head -o text"}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	whole := write(0)
	if strings.Contains(whole, "left out") || strings.Count(whole, "**`nodes/") != 1200 {
		t.Fatalf("unbounded: %d characters, %d files", len(whole), strings.Count(whole, "**`nodes/"))
	}
	for _, c := range []struct {
		max  int
		want []string
	}{
		{DefaultMaxMarkdown, []string{" of 1200 files' diffs left out** (from ", " nodes) to keep this comment under 60,000 characters; run `kcompile diff base head -o text` for them.\n"}},
		{20000, []string{"files' diffs left out**"}},
		{3000, []string{"more nodes left out of the table to keep this comment under 3,000 characters", "300 changed (w000, w001, ", "w009 and 290 more)", "**1200 of 1200 files' diffs left out**"}},
	} {
		md := write(c.max)
		if n := utf8.RuneCountInString(md); n > c.max {
			t.Errorf("bound %d: %d characters", c.max, n)
		}
		for _, s := range append(c.want, "### kcompile diff `base` → `head`\n", "- **introduces** warning `KC0405` at controlPlane.nodes.cp2.zone: ") {
			if !strings.Contains(md, s) {
				t.Errorf("bound %d: no %q in\n%s", c.max, s, md)
			}
		}
		if strings.Count(md, "<details>") != strings.Count(md, "</details>") || strings.Count(md, "```diff\n")*2 != strings.Count(md, "```") {
			t.Errorf("bound %d: a section or a fence is cut in two:\n%s", c.max, md)
		}
		// The files shown are the first ones, each whole.
		shown := strings.Count(md, "**`nodes/")
		if shown > 0 && (!strings.Contains(md, "**`nodes/w000/etc/kubernetes/f0.yaml`**") || strings.Count(md, "+line: new\n") != 20*shown) {
			t.Errorf("bound %d: %d files shown, not the first ones whole", c.max, shown)
		}
	}
}
