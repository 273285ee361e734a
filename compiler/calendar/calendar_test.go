package calendar

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// expressions are held to systemd-analyze calendar: each one systemd
// accepts is accepted with systemd's normalized form and its next five
// elapses, each one it refuses is refused.
var expressions = []string{
	"daily", "DAILY", "hourly", "minutely", "weekly", "monthly", "yearly", "annually", "quarterly", "semiannually",
	"daily UTC", "weekly UTC",
	"00/12:00:00", "0/4:00", "*-*-* 00/6:00:00", "0..23/6:00", "*:2/3", "*:*:*", "*:0/15",
	"Mon..Fri 9..17:0/30", "Mon", "mon..wed,sat", "Sat,Thu,Mon..Wed,Sat..Sun", "Wed, 17:48", "Mon,Mon",
	"Wed *-1", "Wed..Wed,Wed *-1", "Wed..Sat,Tue 12-10-15 1:2:3", "*-*-7 0:0:0", "10-15",
	"monday *-12-* 17:00", "Mon,Fri *-*-3,1,2 *:30:45", "12,14,13,12:20,10,30", "12..14:10,20,30",
	"mon,fri *-1/2-1,3 *:30:45", "03-05 08:05:40", "08:05:40", "05:40", "Sat,Sun 12-05 08:05:40",
	"2003-03-05 05:40", "2003-02..04-05", "2003-03-05 05:40 UTC", "Thu,Fri 2012-*-1,5 11:12:13",
	"*-02~03", "*-*~1", "*-*~01,03", "3..3:00", "1,1..3:00", "*-1..12/3-01", "2199-12-31", "69-01-01",
	"70-01-01", "*-2-30", "Sun *-*-* 03:30", "Sat,Sun 1/6:00", "*-*-1..7 2:00", "Tue *-*-1..7 4:00",
	"sunday", "Monday..Friday 23:59:59", "*-*-29..31", "2028-02-29 12:00", "0,12:0",
	// refused by systemd
	"*/2:00", "*-*-* */4:00:00", "5..3:00", "2200-01-01", "00:60", "24:00", "*-13-01", "*-*-32",
	"1/0:00", " daily", "daily ", "Sat..Mon", "", "Mon Tue", "1:2:3:4", "*-*-*-*", "bogus", "12",
	"Monday *-*-* 00:00 *-*-*", "1..", "..3:00", "1,,2:00", "-1:00",
}

// subset are the expressions systemd accepts and kcompile refuses, each
// with what its error names.
var subset = map[string]string{
	"1:2:3.5":                     "whole seconds",
	"@1700000000":                 "timestamp",
	"*-*-* 00:00:00 Europe/Paris": "only UTC",
	"Mon *-05~07/1":               "single days",
	"*-*~1..3":                    "single days",
}

func TestAgainstSystemd(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, expr := range expressions {
		normal, elapses, ok := systemd(t, expr, base)
		e, err := Parse(expr)
		if !ok {
			if err == nil {
				t.Errorf("%q: systemd refuses it, kcompile reads %q", expr, e)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: systemd reads %q, kcompile refuses it: %v", expr, normal, err)
			continue
		}
		if got := e.String(); got != normal {
			t.Errorf("%q: normalized %q, systemd %q", expr, got, normal)
		}
		var got []string
		at := base
		for range 5 {
			next, ok := e.Next(at)
			if !ok {
				// systemd prints "never" for the first elapse only.
				if len(got) == 0 {
					got = append(got, "never")
				}
				break
			}
			got = append(got, next.Format("Mon 2006-01-02 15:04:05 MST"))
			at = next
		}
		if strings.Join(got, "|") != strings.Join(elapses, "|") {
			t.Errorf("%q: elapses %q, systemd %q", expr, got, elapses)
		}
	}
	for expr, why := range subset {
		if _, _, ok := systemd(t, expr, base); !ok {
			t.Errorf("%q: systemd refuses it: not a subset refusal", expr)
		}
		if _, err := Parse(expr); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v, want an error naming %q", expr, err, why)
		}
	}
}

var elapseLine = regexp.MustCompile(`(?m)^\s*(?:Next elapse|Iter\. #\d+): (.*)$`)

// systemd asks systemd-analyze for expr's normalized form and next five
// elapses after base; ok false when it refuses expr.
func systemd(t *testing.T, expr string, base time.Time) (normal string, elapses []string, ok bool) {
	t.Helper()
	cmd := exec.Command("systemd-analyze", "calendar", "--iterations=5", "--base-time="+base.Format("2006-01-02 15:04:05 UTC"), "--", expr)
	cmd.Env = append(os.Environ(), "TZ=UTC", "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("systemd-analyze: %v", err)
		}
		if !strings.Contains(string(out), "Failed to parse calendar specification") {
			t.Fatalf("systemd-analyze calendar %q: %v\n%s", expr, err, out)
		}
		return "", nil, false
	}
	m := regexp.MustCompile(`(?m)^\s*Normalized form: (.*)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze calendar %q printed no normalized form:\n%s", expr, out)
	}
	for _, l := range elapseLine.FindAllSubmatch(out, -1) {
		elapses = append(elapses, string(l[1]))
	}
	return string(m[1]), elapses, true
}

func TestReach(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		expr string
		n    int
		want time.Duration
		ok   bool
	}{
		{"00/12:00:00", 5, 48 * time.Hour, true},
		{"daily", 2, 24 * time.Hour, true},
		{"hourly", 5, 4 * time.Hour, true},
		// Weekdays only: five a week, the shortest run of three is
		// Monday to Wednesday.
		{"Mon..Fri 02:00", 3, 48 * time.Hour, true},
		// Monthly: February's 28 days are the shortest step.
		{"monthly", 2, 28 * 24 * time.Hour, true},
		{"2026-06-01", 3, 365 * 24 * time.Hour, true},
		{"2020-06-01", 3, 0, false},
		{"*:*:*", 5, 4 * time.Second, true},
	} {
		e, err := Parse(c.expr)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := e.Reach(base, c.n); got != c.want || ok != c.ok {
			t.Errorf("%q, %d snapshots: reach %s %v, want %s %v", c.expr, c.n, got, ok, c.want, c.ok)
		}
	}
}

func TestNeeded(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		expr string
		want int
		ok   bool
	}{
		{"00/12:00:00", 3, true},
		{"hourly", 25, true},
		{"daily", 2, true},
		// Weekdays at 02:00: Friday's to Monday's is 3 days, so 2 reach a
		// day everywhere.
		{"Mon..Fri 02:00", 2, true},
		{"minutely", 0, false},
	} {
		e, err := Parse(c.expr)
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := e.Needed(base, 24*time.Hour, 1000); n != c.want || ok != c.ok {
			t.Errorf("%q: %d snapshots reach a day (%v), want %d (%v)", c.expr, n, ok, c.want, c.ok)
		}
	}
}
