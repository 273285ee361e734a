package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
)

// The command-line grammar every command shares: -o/--output is the
// format of what a command prints, -d/--out-dir the directory it writes,
// -s/--secrets the secrets bundle it reads or writes. Earlier releases
// spelled a directory or a bundle file -o; those spellings are read for
// one more release with a notice on stderr.

// formatOrLegacyDir reads -o of a command that writes a directory: a
// format, or, as earlier releases spelled it, the directory itself.
func formatOrLegacyDir(e *env, output, dir *string, dirDefault string, formats ...string) (string, error) {
	if slices.Contains(formats, *output) {
		return *output, nil
	}
	// A mistyped format must not become a directory holding every
	// node's private keys.
	for _, f := range formats {
		if diag.Distance(strings.ToLower(*output), f) <= 2 {
			return "", statusError{code: exitUsage, msg: fmt.Sprintf("-o %s is not an output format (%s); did you mean %s? (a directory is -d %s)",
				shellWord(*output), strings.Join(formats, ", "), f, shellWord(*output))}
		}
	}
	if *dir != dirDefault {
		return "", statusError{code: exitUsage, msg: fmt.Sprintf("-o %s is not an output format (%s), and --out-dir is given too",
			shellWord(*output), strings.Join(formats, ", "))}
	}
	deprecated(e, "-o DIR for the output directory", "-d "+shellWord(*output))
	*dir = *output
	return formats[0], nil
}

// legacyPath reads the hidden -o of a command that writes one file or
// directory (what) named by another flag now.
func legacyPath(e *env, legacy string, file *string, fileDefault, flag, what string) error {
	if legacy == "" {
		return nil
	}
	if *file != fileDefault {
		return statusError{code: exitUsage, msg: fmt.Sprintf("-o %s and %s %s both name the %s to write; give only %s", shellWord(legacy), flag, shellWord(*file), what, flag)}
	}
	deprecated(e, "-o for the "+what+" to write", flag+" "+shellWord(legacy))
	*file = legacy
	return nil
}

// deprecated tells the user once that a spelling will go.
func deprecated(e *env, old, instead string) {
	e.progress.pause()
	fmt.Fprintf(e.stderr, "kcompile: %s is deprecated and will be refused in the next release; write %s\n", old, instead)
}

// exitCodes is the "Exit status" section of a command's help, from pairs
// of status and meaning.
func exitCodes(pairs ...string) string {
	var b strings.Builder
	b.WriteString("\nExit status:\n")
	for i := 0; i+1 < len(pairs); i += 2 {
		fmt.Fprintf(&b, "  %s  %s\n", pairs[i], pairs[i+1])
	}
	return b.String()
}

// shellWord quotes a word for a message a user may paste into a shell.
// Control characters are escaped first: they would act on the terminal.
func shellWord(s string) string {
	s = diag.Printable(s, maxShown)
	if strings.HasPrefix(s, "-") {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return shQuote(s)
}

// shQuote quotes a word for a POSIX shell, leaving plain words as they
// are.
func shQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./+,:@=-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
