package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress tells a user at a terminal what a long command is doing: a
// spinner with the current stage and the time so far, on stderr, erased
// before anything else is printed there. When stderr is not a terminal
// (a CI log, a pipe) or with --quiet it shows nothing, so logs carry only
// what commands say on purpose.
type progress struct {
	w     io.Writer
	show  bool
	bar   *progressbar.ProgressBar
	start time.Time
}

func newProgress(w io.Writer, show bool) *progress {
	return &progress{w: w, show: show, start: time.Now()}
}

// isTerminal says whether w is a terminal a person watches.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// stage says what the command does now; the spinner keeps turning until
// the next stage, a pause or the end.
func (p *progress) stage(what string) {
	if p == nil || !p.show {
		return
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions(-1,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(what),
			progressbar.OptionSpinnerType(14),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionThrottle(100*time.Millisecond),
		)
		_ = p.bar.RenderBlank()
		return
	}
	p.bar.Describe(what)
}

// pause erases the spinner, so that a warning or an error printed next
// starts on a clean line; the next stage draws it again.
func (p *progress) pause() {
	if p == nil || p.bar == nil {
		return
	}
	_ = p.bar.Finish()
	_ = p.bar.Close()
	p.bar = nil
}

// done ends the display of a command whose output is data (a diff, a
// listing) with a line on stderr saying what it did and how long it
// took: only where the progress was shown, so that logs and pipes carry
// the data alone.
func (p *progress) done(what string) {
	if p == nil || !p.show {
		return
	}
	p.pause()
	fmt.Fprintf(p.w, "kcompile: %s in %s\n", what, p.took())
}

// close ends the progress display for good.
func (p *progress) close() { p.pause() }

// took is the time since the command started, for its final line.
func (p *progress) took() string {
	d := time.Since(p.start)
	if d < 10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return d.Round(time.Second).String()
}
