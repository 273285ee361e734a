package diag

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
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

// EncodeJSON writes v as one indented JSON document in which every
// control, format (bidirectional overrides, zero-width characters) and
// unprintable character is a \u escape: a JSON decoder reads the same
// strings, while a terminal, a browser or a review tool showing the raw
// document sees none of them act. encoding/json escapes only C0
// controls, U+2028 and U+2029.
func EncodeJSON(w io.Writer, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(escapeJSON(data), '\n'))
	return err
}

// escapeJSON escapes unsafe runes of encoded JSON. Outside strings JSON
// holds only ASCII, so every such rune lies inside a string, where the
// escape means the same rune.
func escapeJSON(data []byte) []byte {
	if !bytes.ContainsFunc(data, func(r rune) bool { return r >= utf8.RuneSelf && unsafeRune(r, nil) }) {
		return data
	}
	var b bytes.Buffer
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		switch {
		case r < utf8.RuneSelf || !unsafeRune(r, nil) || r == utf8.RuneError && size == 1:
			// encoding/json has already replaced invalid UTF-8.
			b.Write(data[:size])
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		data = data[size:]
	}
	return b.Bytes()
}
