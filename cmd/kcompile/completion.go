package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/alecthomas/kong"
)

type completionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"Shell to complete for: bash, zsh or fish."`
}

// command is what completion needs to know of one subcommand.
type command struct {
	name, help string
	flags      []string
	// dirs says the command takes a spec directory argument.
	dirs bool
}

// commands reads the subcommands and their flags from kong's model, so the
// scripts never fall out of step with the grammar.
func commands(app *kong.Kong) []command {
	var out []command
	for _, n := range app.Model.Children {
		if n.Type != kong.CommandNode {
			continue
		}
		c := command{name: n.Name, help: n.Help}
		for _, f := range n.Flags {
			if f.Hidden {
				continue
			}
			c.flags = append(c.flags, "--"+f.Name)
		}
		c.flags = append(c.flags, "--help")
		sort.Strings(c.flags)
		for _, p := range n.Positional {
			if p.Name == "dir" {
				c.dirs = true
			}
		}
		out = append(out, c)
	}
	return out
}

func (c *completionCmd) Run(e *env) error {
	cmds := commands(e.app)
	var b strings.Builder
	switch c.Shell {
	case "bash", "zsh":
		if c.Shell == "zsh" {
			b.WriteString("autoload -U +X bashcompinit && bashcompinit\n")
		}
		var names []string
		for _, cmd := range cmds {
			names = append(names, cmd.name)
		}
		b.WriteString("_kcompile() {\n")
		b.WriteString("\tlocal cur=\"${COMP_WORDS[COMP_CWORD]}\" opts=\"\" dirs=0\n")
		fmt.Fprintf(&b, "\tif [ \"$COMP_CWORD\" -eq 1 ]; then\n\t\tCOMPREPLY=($(compgen -W %q -- \"$cur\"))\n\t\treturn\n\tfi\n", strings.Join(append(names, "--help"), " "))
		b.WriteString("\tcase \"${COMP_WORDS[1]}\" in\n")
		for _, cmd := range cmds {
			dirs := 0
			if cmd.dirs {
				dirs = 1
			}
			words := strings.Join(cmd.flags, " ")
			if cmd.name == "completion" {
				words += " bash zsh fish"
			}
			fmt.Fprintf(&b, "\t%s) opts=%q; dirs=%d ;;\n", cmd.name, words, dirs)
		}
		b.WriteString("\tesac\n")
		b.WriteString("\tif [[ \"$cur\" == -* || \"$dirs\" -eq 0 ]]; then\n\t\tCOMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n\telse\n\t\tCOMPREPLY=($(compgen -d -- \"$cur\"))\n\tfi\n")
		b.WriteString("}\ncomplete -F _kcompile kcompile\n")
	case "fish":
		b.WriteString("complete -c kcompile -f\n")
		for _, cmd := range cmds {
			fmt.Fprintf(&b, "complete -c kcompile -n __fish_use_subcommand -a %s -d %q\n", cmd.name, cmd.help)
			for _, f := range cmd.flags {
				fmt.Fprintf(&b, "complete -c kcompile -n '__fish_seen_subcommand_from %s' -l %s\n", cmd.name, strings.TrimPrefix(f, "--"))
			}
			if cmd.dirs {
				fmt.Fprintf(&b, "complete -c kcompile -n '__fish_seen_subcommand_from %s' -a '(__fish_complete_directories)'\n", cmd.name)
			}
		}
	}
	_, err := fmt.Fprint(e.stdout, b.String())
	return err
}
