package diag

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Spec values reach the user's terminal through diagnostics, explain,
// diff and pki listings. A value may hold a terminal escape sequence, a
// line break that forges another diagnostic, or megabytes: these
// functions are the only way such text is printed.

// maxQuoted bounds a value quoted into a message.
const maxQuoted = 64

// Quote writes a spec value for a message: Go-quoted, so that control and
// format characters are escaped, and cut with its length shown when long.
func Quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:cutAt(s, maxQuoted)]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// maxPrintable bounds one printed line of a diagnostic or listing.
const maxPrintable = 2000

// Printable makes text safe for a terminal: every control or format
// character (escape sequences, carriage returns, line breaks, bidi
// overrides) is written as its Go escape, and text longer than max bytes
// is cut with its length shown. keep lists control characters left as
// they are (a hint's own line breaks).
func Printable(s string, max int, keep ...rune) string {
	cut := ""
	if max > 0 && len(s) > max {
		cut = fmt.Sprintf("… (%d bytes)", len(s))
		s = s[:cutAt(s, max)]
	}
	if strings.IndexFunc(s, func(r rune) bool { return unsafeRune(r, keep) }) < 0 {
		return s + cut
	}
	var b strings.Builder
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				fmt.Fprintf(&b, `\x%02x`, s[i])
				continue
			}
		}
		if unsafeRune(r, keep) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String() + cut
}

func unsafeRune(r rune, keep []rune) bool {
	if r == '\t' || r == ' ' {
		return false
	}
	for _, k := range keep {
		if r == k {
			return false
		}
	}
	return r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || !unicode.IsPrint(r) && !unicode.IsSpace(r)
}

// cutAt is the largest rune boundary at or below n.
func cutAt(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}
