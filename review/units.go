package review

import (
	"slices"
	"strings"
)

// unitDirectives reads a systemd unit into "[Section] Key" → values, in
// order, joining continuation lines as systemd does.
func unitDirectives(data []byte) (map[string][]string, []string) {
	out := map[string][]string{}
	var order []string
	section := ""
	var pending strings.Builder
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line
			continue
		}
		pending.Reset()
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			pending.WriteString(strings.TrimSuffix(line, "\\"))
			pending.WriteByte(' ')
			i++
			line = strings.TrimSpace(lines[i])
		}
		pending.WriteString(line)
		key, value, ok := strings.Cut(pending.String(), "=")
		if !ok {
			continue
		}
		k := section + " " + strings.TrimSpace(key)
		if _, seen := out[k]; !seen {
			order = append(order, k)
		}
		out[k] = append(out[k], strings.Join(strings.Fields(value), " "))
	}
	return out, order
}

// unitLines describes how a unit changed, directive by directive; the
// command lines of Exec directives flag by flag.
func unitLines(old, new []byte) []string {
	a, orderA := unitDirectives(old)
	b, orderB := unitDirectives(new)
	keys := slices.Clone(orderA)
	for _, k := range orderB {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	var out []string
	for _, k := range keys {
		va, vb := a[k], b[k]
		if slices.Equal(va, vb) {
			continue
		}
		_, key, _ := strings.Cut(k, " ")
		if strings.HasPrefix(key, "Exec") && len(va) == 1 && len(vb) == 1 {
			out = append(out, commandLines(k, va[0], vb[0])...)
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
func commandLines(k, a, b string) []string {
	progA, flagsA, argsA := splitCommand(a)
	progB, flagsB, argsB := splitCommand(b)
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

// splitCommand splits "prog --a=1 --b x" into its program, flags (a
// repeated flag's values joined by ", ") and other arguments.
func splitCommand(s string) (string, map[string]string, []string) {
	words := strings.Fields(s)
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
