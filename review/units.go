package review

import (
	"github.com/kcompile/kcompile/internal/unitfile"
	"slices"
	"strings"
)

// unitDirectives reads a systemd unit with the parser the target
// verifies its units with, into "[Section] Key" → values in order; Exec
// settings keep their arguments as systemd splits them. False when the
// file is not a unit kcompile could have written.
func unitDirectives(data []byte) (map[string][]unitfile.Directive, []string, bool) {
	u, err := unitfile.Parse(data)
	if err != nil {
		return nil, nil, false
	}
	out := map[string][]unitfile.Directive{}
	var order []string
	for _, s := range u.Sections {
		for _, d := range s.Directives {
			k := "[" + s.Name + "] " + d.Key
			if _, seen := out[k]; !seen {
				order = append(order, k)
			}
			out[k] = append(out[k], d)
		}
	}
	return out, order, true
}

// shown is how a directive's value is printed: a command line's
// arguments quoted as the unit writes them.
func shown(d unitfile.Directive) string {
	if d.Command == nil {
		return d.Value
	}
	words := make([]string, len(d.Command.Argv))
	for i, a := range d.Command.Argv {
		words[i], _ = unitfile.QuoteArg(a)
	}
	return d.Command.Prefix + strings.Join(words, " ")
}

func shownAll(ds []unitfile.Directive) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = shown(d)
	}
	return out
}

// unitLines describes how a unit changed, directive by directive; the
// command lines of Exec directives flag by flag. A file that does not
// read as a unit is described by its unified diff alone.
func unitLines(old, new []byte) []string {
	a, orderA, okA := unitDirectives(old)
	b, orderB, okB := unitDirectives(new)
	if !okA || !okB {
		return nil
	}
	keys := slices.Clone(orderA)
	for _, k := range orderB {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	var out []string
	for _, k := range keys {
		va, vb := shownAll(a[k]), shownAll(b[k])
		if slices.Equal(va, vb) {
			continue
		}
		if len(a[k]) == 1 && len(b[k]) == 1 && a[k][0].Command != nil && b[k][0].Command != nil {
			out = append(out, commandLines(k, *a[k][0].Command, *b[k][0].Command)...)
			continue
		}
		switch {
		case va == nil:
			out = append(out, k+" added: "+strings.Join(vb, "; "))
		case vb == nil:
			out = append(out, k+" removed: "+strings.Join(va, "; "))
		default:
			out = append(out, k+": "+strings.Join(va, "; ")+" → "+strings.Join(vb, "; "))
		}
	}
	return out
}

// commandLines compares two command lines by program, flags and other
// arguments.
func commandLines(k string, a, b unitfile.Command) []string {
	progA, flagsA, argsA := splitCommand(a.Argv)
	progB, flagsB, argsB := splitCommand(b.Argv)
	var out []string
	if progA != progB {
		out = append(out, k+" program: "+progA+" → "+progB)
	}
	for _, name := range unionKeys(flagsA, flagsB) {
		fa, okA := flagsA[name]
		fb, okB := flagsB[name]
		switch {
		case !okA:
			out = append(out, k+" "+name+" added: "+fb)
		case !okB:
			out = append(out, k+" "+name+" removed: "+fa)
		case fa != fb && (strings.Contains(fa, ",") || strings.Contains(fb, ",")):
			// A list: say which items changed, not the whole of it.
			added, removed := setDiff(strings.Split(fa, ","), strings.Split(fb, ","))
			for _, x := range removed {
				out = append(out, k+" "+name+" item removed: "+x)
			}
			for _, x := range added {
				out = append(out, k+" "+name+" item added: "+x)
			}
			if len(added)+len(removed) == 0 {
				out = append(out, k+" "+name+" reordered: "+fa+" → "+fb)
			}
		case fa != fb:
			out = append(out, k+" "+name+": "+fa+" → "+fb)
		}
	}
	if !slices.Equal(argsA, argsB) {
		out = append(out, k+" arguments: "+strings.Join(argsA, " ")+" → "+strings.Join(argsB, " "))
	}
	return out
}

// splitCommand splits [prog --a=1 --b x] into its program, flags (a
// repeated flag's values joined by ", ") and other arguments.
func splitCommand(words []string) (string, map[string]string, []string) {
	flags := map[string]string{}
	var args []string
	if len(words) == 0 {
		return "", flags, nil
	}
	for _, w := range words[1:] {
		if !strings.HasPrefix(w, "-") {
			args = append(args, w)
			continue
		}
		name, value, _ := strings.Cut(w, "=")
		if prev, ok := flags[name]; ok {
			value = prev + ", " + value
		}
		flags[name] = value
	}
	return words[0], flags, args
}
