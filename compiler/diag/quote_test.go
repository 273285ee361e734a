package diag

import (
	"strings"
	"testing"
)

func TestQuoteEscapesAndCuts(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                   `"plain"`,
		"a\nb":                    `"a\nb"`,
		"\x1b[2J":                 `"\x1b[2J"`,
		"\u202eevil":              `"\u202eevil"`,
		strings.Repeat("x", 1000): `"` + strings.Repeat("x", 64) + `"… (1000 bytes)`,
		strings.Repeat("é", 40):   `"` + strings.Repeat("é", 32) + `"… (80 bytes)`,
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestPrintable(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"ok text", "ok text"},
		{"tab\tstays", "tab\tstays"},
		{"bell\a esc\x1b[31m cr\r", `bell\a esc\x1b[31m cr\r`},
		{"line\nbreak", `line\nbreak`},
		{"bidi \u202e and zero width \u200b", `bidi \u202e and zero width \u200b`},
		{"invalid \xff byte", `invalid \xff byte`},
		{"c1 \u009b", `c1 \u009b`},
	} {
		if got := Printable(c.in, 0); got != c.want {
			t.Errorf("Printable(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := Printable("a\nb\x1b", 0, '\n'); got != "a\nb\\x1b" {
		t.Errorf("kept line break: %q", got)
	}
	if got := Printable(strings.Repeat("y", 50), 10); got != "yyyyyyyyyy… (50 bytes)" {
		t.Errorf("cut: %q", got)
	}
}

// TestWriteTextEscapes: a diagnostic whose message, path or positions
// carry a spec's control characters prints them escaped.
func TestWriteTextEscapes(t *testing.T) {
	l := List{{Code: "KC0000", Severity: Error, Path: "a.\"\x1b[2J\"", Message: "value \x1b]0;title\a\nKC9999 forged",
		Positions: []Pos{{File: "spec\x1b.cue", Line: 1, Column: 1}}, Hint: "two\nlines"}}
	var b strings.Builder
	if err := l.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.ContainsAny(out, "\x1b\a") || strings.Contains(out, "\nKC9999") {
		t.Errorf("control characters reach the terminal:\n%q", out)
	}
	if !strings.Contains(out, "hint: two\n          lines") {
		t.Errorf("the hint's own line break is lost:\n%s", out)
	}
}
