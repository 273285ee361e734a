package unitfile

import (
	"strings"
	"testing"
)

// render is File.Render for units a test builds, which must render.
func render(t testing.TB, u File) []byte {
	t.Helper()
	b, err := u.Render()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestUnitRoundTrip(t *testing.T) {
	u := File{Sections: []Section{
		{Name: "Unit", Directives: []Directive{{Key: "Description", Value: "demo"}, {Key: "After", Value: "network-online.target etcd.service"}}},
		{Name: "Service", Directives: []Directive{{Key: "ExecStart", Command: &Command{Argv: []string{"/usr/local/bin/demo", "--a=1", "--b=x,y"}, OnePerLine: true}}}},
	}}
	got, err := Parse(render(t, u))
	if err != nil {
		t.Fatal(err)
	}
	if exec := got.Commands("Service", "ExecStart"); len(exec) != 1 || strings.Join(exec[0].Argv, " ") != "/usr/local/bin/demo --a=1 --b=x,y" {
		t.Errorf("ExecStart %+v", exec)
	}
	if after := got.Get("Unit", "After"); len(after) != 1 || after[0] != "network-online.target etcd.service" {
		t.Errorf("After %q", after)
	}
	if !strings.Contains(string(render(t, u)), " \\\n  --b=x,y\n") {
		t.Errorf("flags are not one per line:\n%s", render(t, u))
	}
}

// TestDropInResetsExecStart reads a drop-in that replaces a command: an
// empty ExecStart= resets the list, then the new command follows.
func TestDropInResetsExecStart(t *testing.T) {
	u, err := Parse([]byte("[Service]\nExecStart=\nExecStart=/bin/new --x\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Get("Service", "ExecStart"); len(got) != 2 || got[0] != "" {
		t.Errorf("values %q", got)
	}
	if cmds := u.Commands("Service", "ExecStart"); len(cmds) != 1 || strings.Join(cmds[0].Argv, " ") != "/bin/new --x" {
		t.Errorf("commands %+v", cmds)
	}
}

// TestQuoteArg holds the quoting of command-line arguments to systemd's
// rules, by rendering each argument and reading it back: what the program
// receives is exactly the argument, in one piece.
func TestQuoteArg(t *testing.T) {
	for _, arg := range []string{
		"plain", "--flag=value", "", " ", "two words", "a\nExecStartPre=/bin/sh -c id", `say "hi"`, "it's",
		`back\slash`, `trailing\`, "%n%H%%", "$HOME ${PATH} $$", ";", "a;b", "tab\there", "\x1b[31m", "\x7f",
		"zoné ✓", "--node-labels=a=b --anonymous-auth=true", `\x41`, "'single'", "#x", ";y", "#",
	} {
		q, err := QuoteArg(arg)
		if err != nil {
			t.Errorf("QuoteArg(%q): %v", arg, err)
			continue
		}
		u := File{Sections: []Section{{Name: "Service", Directives: []Directive{Exec("ExecStart", "", "/bin/prog", arg, "--last")}}}}
		data := render(t, u)
		got, err := Parse(data)
		if err != nil {
			t.Errorf("%q rendered as %s does not parse: %v", arg, q, err)
			continue
		}
		argv := got.Commands("Service", "ExecStart")[0].Argv
		if len(argv) != 3 || argv[1] != arg || argv[2] != "--last" {
			t.Errorf("%q rendered as %s reads back as %q", arg, q, argv)
		}
		if strings.Count(string(data), "\n") != strings.Count(string(render(t, File{Sections: []Section{{Name: "Service", Directives: []Directive{Exec("ExecStart", "", "/bin/prog", "x", "--last")}}}})), "\n") {
			t.Errorf("%q added a line:\n%s", arg, data)
		}
	}
	if _, err := QuoteArg("a\x00b"); err == nil {
		t.Error("QuoteArg accepted a NUL")
	}
}

// TestParseCommand reads command lines as systemd documents them.
func TestParseCommand(t *testing.T) {
	for raw, want := range map[string][]string{
		`/bin/echo one "two three" 'four five'`: {"/bin/echo", "one", "two three", "four five"},
		`/bin/echo a"b c"d`:                     {"/bin/echo", "ab cd"},
		`/bin/echo "a\nb" \x41 \101 \s`:         {"/bin/echo", "a\nb", "A", "A", " "},
		`/bin/echo %% $$ $`:                     {"/bin/echo", "%", "$", "$"},
		`-/sbin/modprobe overlay`:               {"/sbin/modprobe", "overlay"},
	} {
		c, err := parseCommand(raw)
		if err != nil {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		if strings.Join(c.Argv, "|") != strings.Join(want, "|") {
			t.Errorf("%s reads as %q, want %q", raw, c.Argv, want)
		}
	}
	for _, bad := range []string{`/bin/echo %n`, `/bin/echo $HOME`, `/bin/echo ${PATH}`, `/bin/echo "open`, `/bin/echo a ; /bin/sh`, `/bin/echo \q`, ``} {
		if _, err := parseCommand(bad); err == nil {
			t.Errorf("parseCommand accepted %s", bad)
		}
	}
}

func TestRenderRefusesBrokenValues(t *testing.T) {
	for _, v := range []string{"a\nExecStartPre=/bin/sh", " leading", "trailing ", `continued\`} {
		u := File{Sections: []Section{{Name: "Unit", Directives: []Directive{{Key: "Description", Value: v}}}}}
		if _, err := u.Render(); err == nil {
			t.Errorf("Render accepted the value %q", v)
		}
	}
	u := File{Sections: []Section{{Name: "Unit", Directives: []Directive{{Key: "Description", Value: "100% sure"}}}}}
	got, err := Parse(render(t, u))
	if err != nil || got.Get("Unit", "Description")[0] != "100% sure" {
		t.Errorf("a %% in a value reads back as %q (%v)", got.Get("Unit", "Description"), err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, bad := range []string{"Key=value\n", "[Unit]\nno equals sign\n", "[Service]\nExecStart=/bin/x \\\n", "[Unit]\nDescription=%n\n"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse accepted %q", bad)
		}
	}
	u, err := Parse([]byte("# comment\n; other\n\n[Unit]\nDescription = spaced  out \n"))
	if err != nil || u.Get("Unit", "Description")[0] != "spaced  out" {
		t.Errorf("Parse %+v %v", u, err)
	}
}

// TestCommentLikeArgumentsOnContinuationLines is issue 29: a command
// rendered one argument per line puts each argument at the start of a
// continuation line, where systemd.syntax(7) skips a line starting with
// '#' or ';' as a comment. Such arguments are quoted, so the command reads
// back with every argument, and no rendered line starts a comment.
func TestCommentLikeArgumentsOnContinuationLines(t *testing.T) {
	argv := []string{"/usr/local/bin/demo", "#x", ";y", "--a=1", "#", ";", "--z=#not-a-comment", "%#", "$;"}
	for _, onePerLine := range []bool{true, false} {
		u := File{Sections: []Section{{Name: "Service", Directives: []Directive{
			{Key: "ExecStart", Command: &Command{Argv: argv, OnePerLine: onePerLine}},
			{Key: "ExecStartPost", Command: &Command{Prefix: "-", Argv: []string{"/bin/true", "#last"}, OnePerLine: onePerLine}},
		}}}}
		data := render(t, u)
		for i, line := range strings.Split(string(data), "\n") {
			if i == 0 {
				continue // the generated-by comment
			}
			if l := strings.TrimLeft(line, " \t"); strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";") {
				t.Errorf("onePerLine=%v: line %d starts a comment: %q\n%s", onePerLine, i+1, line, data)
			}
		}
		got, err := Parse(data)
		if err != nil {
			t.Fatalf("onePerLine=%v: %v\n%s", onePerLine, err, data)
		}
		cmds := got.Commands("Service", "ExecStart")
		if len(cmds) != 1 || strings.Join(cmds[0].Argv, "\x00") != strings.Join(argv, "\x00") {
			t.Errorf("onePerLine=%v: ExecStart reads back as %+v, want %q\n%s", onePerLine, cmds, argv, data)
		}
		post := got.Commands("Service", "ExecStartPost")
		if len(post) != 1 || post[0].Prefix != "-" || strings.Join(post[0].Argv, "|") != "/bin/true|#last" {
			t.Errorf("onePerLine=%v: ExecStartPost reads back as %+v\n%s", onePerLine, post, data)
		}
	}
}
