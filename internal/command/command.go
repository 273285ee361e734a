// Package command is what kcompile and kcompile-sim share of being a
// command: kong's parser set up with the same conventions and exit
// statuses, and the one clock they read.
package command

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/alecthomas/kong"
)

// Exit statuses of both commands.
const (
	ExitOK       = 0
	ExitProblems = 1
	ExitUsage    = 2
)

// exit carries an exit status out of kong's Exit hook, which would
// otherwise end the process (and a test with it).
type exit int

// Parse parses args into grammar, a kong grammar, for the command name.
// Help and usage errors are printed by kong (usage errors as "name:
// error: ..."); then ok is false and code is the exit status: 0 after
// help, ExitUsage after an error.
func Parse(grammar any, name, description string, args []string, stdout, stderr io.Writer, options ...kong.Option) (parser *kong.Kong, ctx *kong.Context, code int, ok bool) {
	options = append([]kong.Option{
		kong.Name(name),
		kong.Description(description),
		kong.Writers(stdout, stderr),
		kong.UsageOnError(),
		kong.Exit(func(code int) { panic(exit(code)) }),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
	}, options...)
	parser, err := kong.New(grammar, options...)
	if err != nil {
		fmt.Fprintf(stderr, "%s: internal error: %v\n", name, err)
		return nil, nil, ExitUsage, false
	}
	defer func() {
		if r := recover(); r != nil {
			e, isExit := r.(exit)
			if !isExit {
				panic(r)
			}
			ctx, ok, code = nil, false, ExitOK
			if e != ExitOK {
				code = ExitUsage
			}
		}
	}()
	ctx, err = parser.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: error: %v\n", name, err)
		return parser, nil, ExitUsage, false
	}
	return parser, ctx, ExitOK, true
}

// Clock reads the time once for a run; SOURCE_DATE_EPOCH replaces it,
// for reproducible output.
func Clock() (time.Time, error) {
	if s, ok := os.LookupEnv("SOURCE_DATE_EPOCH"); ok {
		secs, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", s)
		}
		return time.Unix(secs, 0).UTC(), nil
	}
	return time.Now().UTC(), nil
}
