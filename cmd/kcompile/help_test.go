package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// TestEveryHelp: every command's --help shows an example and its exit
// statuses, and the grammar is the same everywhere: -o is a format, never
// a path (the old spellings are hidden), -d a directory, -s the bundle.
func TestEveryHelp(t *testing.T) {
	var c cli
	app, err := kong.New(&c, kong.Name("kcompile"), targetNames())
	if err != nil {
		t.Fatal(err)
	}
	var leaves []*kong.Node
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		sub := false
		for _, ch := range n.Children {
			if ch.Type == kong.CommandNode {
				sub = true
				walk(ch)
			}
		}
		if !sub && n.Type == kong.CommandNode {
			leaves = append(leaves, n)
		}
	}
	walk(app.Model.Node)
	if len(leaves) < 15 {
		t.Fatalf("found %d commands", len(leaves))
	}
	for _, n := range leaves {
		path := n.FullPath()
		if !strings.Contains(n.Detail, "Examples:\n  kcompile ") && !strings.Contains(n.Detail, "Examples:\n  sudo kcompile ") && !strings.Contains(n.Detail, "Examples:\n  source <(kcompile") {
			t.Errorf("%s --help has no example", path)
		}
		if !strings.Contains(n.Detail, "\nExit status:\n  0  ") {
			t.Errorf("%s --help does not give its exit statuses", path)
		}
		for _, f := range n.Flags {
			if f.Hidden {
				continue
			}
			switch f.Short {
			case 'o':
				if f.Name != "output" || f.Enum == "" && !strings.Contains(f.Help, "text or json") {
					t.Errorf("%s: -o is --%s (%q), not the output format", path, f.Name, f.Help)
				}
			case 'd':
				if f.Name != "out-dir" {
					t.Errorf("%s: -d is --%s, not --out-dir", path, f.Name)
				}
			case 's':
				if f.Name != "secrets" {
					t.Errorf("%s: -s is --%s, not --secrets", path, f.Name)
				}
			}
		}
		// The help reaches the user (sim's --help is kcompile-sim's own).
		if strings.HasPrefix(path, "kcompile sim") {
			continue
		}
		args := append(strings.Fields(strings.TrimPrefix(path, "kcompile ")), "--help")
		var out, errb bytes.Buffer
		if code := run(args, nil, &out, &errb); code != 0 {
			t.Errorf("%s: exit %d: %s", strings.Join(args, " "), code, errb.String())
		}
		if !strings.Contains(out.String(), "Exit status:") || !strings.Contains(out.String(), "Examples:") {
			t.Errorf("%s prints no examples or exit statuses:\n%s", strings.Join(args, " "), out.String())
		}
	}
}
