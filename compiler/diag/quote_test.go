package diag

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
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

// TestEncodeJSONEscapes: control, format and bidirectional characters
// of spec text leave EncodeJSON as \u escapes, and a decoder reads the
// same strings back.
func TestEncodeJSONEscapes(t *testing.T) {
	in := map[string]string{"v": "a\u202eb\u2066c\u200bd\u0085e\x1bf\u2028g\U000e0001h<i>&j é"}
	var b bytes.Buffer
	if err := EncodeJSON(&b, in); err != nil {
		t.Fatal(err)
	}
	for _, r := range b.String() {
		if r >= utf8.RuneSelf && r != 'é' {
			t.Errorf("raw %U in %s", r, b.String())
		}
	}
	for _, want := range []string{`\u202e`, `\u2066`, `\u200b`, `\u0085`, `\u001b`, `\u2028`, `\udb40\udc01`, "é"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("%s lacks %s", b.String(), want)
		}
	}
	var out map[string]string
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out["v"] != in["v"] {
		t.Errorf("read back %q, want %q", out["v"], in["v"])
	}
}
