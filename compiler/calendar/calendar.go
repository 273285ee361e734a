// Package calendar reads systemd's calendar events (systemd.time(7), the
// OnCalendar= of a timer) as systemd 252 does: the same expressions
// accepted, the same normalized form, the same elapses. A spec's schedule
// is checked here, on the machine that evaluates the spec, rather than by
// the node's systemd at boot, and its elapses say how far back a number
// of snapshots reaches.
//
// It reads a subset, and refuses the rest by name: fractions of a second,
// "@" timestamps, time zones other than UTC (the node's tz database
// decides them) and "~" (the last days of a month) with a range or a
// repetition, whose meaning systemd's own documentation and code differ
// on.
package calendar

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Event is one calendar event expression.
type Event struct {
	// weekdays is a bit per day, Monday the lowest; 0 is any day.
	weekdays uint8
	year     chain
	month    chain
	day      chain
	hour     chain
	minute   chain
	second   chain
	// endOfMonth counts the day from the month's end ("~").
	endOfMonth bool
	utc        bool
}

// chain is the values of one component; none is any ("*").
type chain []component

// component is a value, a range start..stop, each with an optional
// repetition. stop is -1 for a value.
type component struct {
	start, stop, repeat int
}

// The years systemd accepts: from the epoch to its MAX_YEAR.
const (
	minYear = 1970
	maxYear = 2199
)

var shorthands = map[string]string{
	"minutely":     "*-*-* *:*:00",
	"hourly":       "*-*-* *:00:00",
	"daily":        "*-*-* 00:00:00",
	"monthly":      "*-*-01 00:00:00",
	"weekly":       "Mon *-*-* 00:00:00",
	"yearly":       "*-01-01 00:00:00",
	"annually":     "*-01-01 00:00:00",
	"quarterly":    "*-01,04,07,10-01 00:00:00",
	"semiannually": "*-01,07-01 00:00:00",
}

var weekdayNames = []string{"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}

// Parse reads expr. Its errors say what of it is wrong.
func Parse(expr string) (*Event, error) {
	if expr == "" || strings.TrimSpace(expr) != expr {
		return nil, fmt.Errorf("%q: a calendar event is neither empty nor begins or ends with a space", expr)
	}
	if strings.HasPrefix(expr, "@") {
		return nil, fmt.Errorf("%q: a timestamp (@SECONDS) elapses once; a schedule repeats", expr)
	}
	words := strings.Fields(expr)
	e := &Event{}
	// A time zone, last: a word of its own that begins with a letter.
	if last := words[len(words)-1]; len(words) > 1 && isLetter(last[0]) {
		if last != "UTC" {
			return nil, fmt.Errorf("%q: time zone %q: kcompile takes only UTC (another depends on the node's time zone database); write the time in UTC", expr, last)
		}
		e.utc = true
		words = words[:len(words)-1]
	}
	if len(words) == 1 {
		if s, ok := shorthands[strings.ToLower(words[0])]; ok {
			words = strings.Fields(s)
		}
	}
	// Weekdays, first: they begin with a letter.
	if isLetter(words[0][0]) {
		bits, err := parseWeekdays(words[0])
		if err != nil {
			return nil, fmt.Errorf("%q: %v", expr, err)
		}
		e.weekdays = bits
		words = words[1:]
	}
	var date, clock string
	for _, w := range words {
		switch {
		case strings.Contains(w, ":") && clock == "":
			clock = w
		case strings.ContainsAny(w, "-~") && date == "" && clock == "":
			date = w
		case date == "" && clock == "" && !strings.Contains(w, ":"):
			// A word of neither shape before any date or time ("12").
			return nil, fmt.Errorf("%q: %q is neither a date (YYYY-MM-DD, MM-DD) nor a time (HH:MM[:SS])", expr, w)
		default:
			return nil, fmt.Errorf("%q: %q: expected [WEEKDAYS] [DATE] [TIME] [UTC]", expr, w)
		}
	}
	if err := e.parseDate(date); err != nil {
		return nil, fmt.Errorf("%q: %v", expr, err)
	}
	if err := e.parseTime(clock); err != nil {
		return nil, fmt.Errorf("%q: %v", expr, err)
	}
	e.normalize()
	return e, nil
}

func isLetter(c byte) bool { return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' }

func parseWeekdays(s string) (uint8, error) {
	var bits uint8
	s = strings.TrimSuffix(s, ",")
	for _, item := range strings.Split(s, ",") {
		from, to, isRange := strings.Cut(item, "..")
		a, err := weekday(from)
		if err != nil {
			return 0, err
		}
		b := a
		if isRange {
			if b, err = weekday(to); err != nil {
				return 0, err
			}
			if b < a {
				return 0, fmt.Errorf("weekdays %q: a range runs from Monday towards Sunday", item)
			}
		}
		for d := a; d <= b; d++ {
			bits |= 1 << d
		}
	}
	return bits, nil
}

func weekday(s string) (int, error) {
	l := strings.ToLower(s)
	for i, n := range weekdayNames {
		if l == n || l == n[:3] {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%q is not a weekday (Mon, Monday, ..., Sun)", s)
}

func (e *Event) parseDate(s string) error {
	if s == "" {
		return nil
	}
	if strings.Contains(s, "~") {
		e.endOfMonth = true
		if strings.Count(s, "~") > 1 {
			return fmt.Errorf("date %q: one ~ at most", s)
		}
	}
	parts := strings.FieldsFunc(s, func(r rune) bool { return r == '-' || r == '~' })
	seps := strings.Count(s, "-") + strings.Count(s, "~")
	if len(parts) != seps+1 || len(parts) < 2 || len(parts) > 3 {
		return fmt.Errorf("date %q: write YYYY-MM-DD or MM-DD, each part a value, a list, a range or *", s)
	}
	if e.endOfMonth && !strings.Contains(s[strings.LastIndexAny(s, "-~"):], "~") {
		return fmt.Errorf("date %q: ~ counts the day from the month's end: it stands before the day", s)
	}
	var err error
	if len(parts) == 3 {
		if e.year, err = parseChain(parts[0], 0, maxYear, "year"); err != nil {
			return err
		}
		for i := range e.year {
			e.year[i].start = fullYear(e.year[i].start)
			if e.year[i].stop >= 0 {
				e.year[i].stop = fullYear(e.year[i].stop)
			}
			if e.year[i].start < minYear || e.year[i].stop > maxYear {
				return fmt.Errorf("year %q: between %d and %d", parts[0], minYear, maxYear)
			}
		}
		parts = parts[1:]
	}
	if e.month, err = parseChain(parts[0], 1, 12, "month"); err != nil {
		return err
	}
	if e.day, err = parseChain(parts[1], 1, 31, "day"); err != nil {
		return err
	}
	if e.endOfMonth {
		for _, c := range e.day {
			if c.stop >= 0 || c.repeat > 0 {
				return fmt.Errorf("date %q: kcompile takes ~ with single days only (~01, ~03,05), not a range or a repetition", s)
			}
		}
	}
	return nil
}

// fullYear reads a year of two digits as systemd does.
func fullYear(y int) int {
	switch {
	case y < 70:
		return y + 2000
	case y < 100:
		return y + 1900
	}
	return y
}

func (e *Event) parseTime(s string) error {
	if s == "" {
		e.hour, e.minute, e.second = chain{{0, -1, 0}}, chain{{0, -1, 0}}, chain{{0, -1, 0}}
		return nil
	}
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return fmt.Errorf("time %q: write HH:MM or HH:MM:SS", s)
	}
	var err error
	if e.hour, err = parseChain(parts[0], 0, 23, "hour"); err != nil {
		return err
	}
	if e.minute, err = parseChain(parts[1], 0, 59, "minute"); err != nil {
		return err
	}
	e.second = chain{{0, -1, 0}}
	if len(parts) == 3 {
		if strings.Contains(parts[2], ".") {
			return fmt.Errorf("time %q: kcompile takes whole seconds", s)
		}
		if e.second, err = parseChain(parts[2], 0, 59, "second"); err != nil {
			return err
		}
	}
	return nil
}

// parseChain reads a component: *, or values, ranges and repetitions
// separated by commas, each within [lo, hi].
func parseChain(s string, lo, hi int, what string) (chain, error) {
	if s == "*" {
		return nil, nil
	}
	var out chain
	for _, item := range strings.Split(s, ",") {
		c := component{stop: -1}
		body, rep, hasRep := strings.Cut(item, "/")
		from, to, isRange := strings.Cut(body, "..")
		var err error
		if c.start, err = number(from, lo, hi, what); err != nil {
			return nil, err
		}
		if isRange {
			if c.stop, err = number(to, lo, hi, what); err != nil {
				return nil, err
			}
			if c.stop < c.start {
				return nil, fmt.Errorf("%s %q: a range runs from the smaller value", what, item)
			}
		}
		if hasRep {
			if c.repeat, err = number(rep, 1, hi+1, what+" repetition"); err != nil {
				return nil, err
			}
		}
		out = append(out, c)
	}
	return out, nil
}

func number(s string, lo, hi int, what string) (int, error) {
	if s == "" || len(s) > 4 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("%s %q is not a number", what, s)
	}
	n, _ := strconv.Atoi(s)
	if n < lo || n > hi {
		return 0, fmt.Errorf("%s %d: between %d and %d", what, n, lo, hi)
	}
	return n, nil
}

// normalize puts each chain in systemd's order and drops its repeats: a
// range of one value is the value, a repeated range ends at the last
// value it reaches.
func (e *Event) normalize() {
	if e.weekdays == 0x7f {
		e.weekdays = 0
	}
	for _, c := range []*chain{&e.year, &e.month, &e.day, &e.hour, &e.minute, &e.second} {
		var out chain
		for _, x := range *c {
			if x.stop == x.start {
				x.stop = -1
			}
			if x.stop >= 0 && x.repeat > 0 {
				x.stop = x.start + (x.stop-x.start)/x.repeat*x.repeat
				if x.stop == x.start {
					x.stop = -1
				}
			}
			out = append(out, x)
		}
		slices.SortFunc(out, func(a, b component) int {
			return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.stop, b.stop), cmp.Compare(a.repeat, b.repeat))
		})
		*c = slices.Compact(out)
	}
}

// InUTC is the event in UTC whatever its expression said: a node's
// timer with it elapses at the same instants in any time zone the node
// is set to.
func (e *Event) InUTC() *Event {
	u := *e
	u.utc = true
	return &u
}

// String is the normalized form, as systemd-analyze calendar prints it.
func (e *Event) String() string {
	var b strings.Builder
	if e.weekdays != 0 {
		writeWeekdays(&b, e.weekdays)
		b.WriteByte(' ')
	}
	e.year.write(&b, 4)
	b.WriteByte('-')
	e.month.write(&b, 2)
	if e.endOfMonth {
		b.WriteByte('~')
	} else {
		b.WriteByte('-')
	}
	e.day.write(&b, 2)
	b.WriteByte(' ')
	e.hour.write(&b, 2)
	b.WriteByte(':')
	e.minute.write(&b, 2)
	b.WriteByte(':')
	e.second.write(&b, 2)
	if e.utc {
		b.WriteString(" UTC")
	}
	return b.String()
}

// writeWeekdays names runs of three days or more as a range, shorter
// ones one by one.
func writeWeekdays(b *strings.Builder, bits uint8) {
	names := []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
	first := true
	for d := 0; d < 7; {
		if bits&(1<<d) == 0 {
			d++
			continue
		}
		end := d
		for end+1 < 7 && bits&(1<<(end+1)) != 0 {
			end++
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(names[d])
		switch {
		case end >= d+2:
			b.WriteString(".." + names[end])
		case end == d+1:
			b.WriteString("," + names[end])
		}
		d = end + 1
	}
}

func (c chain) write(b *strings.Builder, width int) {
	if len(c) == 0 {
		b.WriteByte('*')
		return
	}
	for i, x := range c {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(b, "%0*d", width, x.start)
		if x.stop >= 0 {
			fmt.Fprintf(b, "..%0*d", width, x.stop)
		}
		if x.repeat > 0 {
			fmt.Fprintf(b, "/%d", x.repeat)
		}
	}
}

// matches says v is one of the chain's values.
func (c chain) matches(v int) bool {
	if len(c) == 0 {
		return true
	}
	for _, x := range c {
		switch {
		case v < x.start:
		case x.stop >= 0 && v > x.stop:
		case x.repeat > 0 && (v-x.start)%x.repeat != 0:
		case x.repeat == 0 && x.stop < 0 && v != x.start:
		default:
			return true
		}
	}
	return false
}

// Next is the first elapse strictly after t, in UTC (a node's clock, for
// an event without a time zone, is taken to be UTC too), and false when
// the event never elapses again.
func (e *Event) Next(t time.Time) (time.Time, bool) {
	t = t.UTC().Truncate(time.Second)
	for y := t.Year(); y <= maxYear; y++ {
		if !e.year.matches(y) {
			continue
		}
		for m := time.January; m <= time.December; m++ {
			if y == t.Year() && m < t.Month() || !e.month.matches(int(m)) {
				continue
			}
			days := time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
			for d := 1; d <= days; d++ {
				day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
				if day.Add(24*time.Hour).Compare(t) <= 0 {
					continue
				}
				n := d
				if e.endOfMonth {
					n = days - d + 1
				}
				if !e.day.matches(n) || e.weekdays != 0 && e.weekdays&(1<<((int(day.Weekday())+6)%7)) == 0 {
					continue
				}
				if at, ok := e.onDay(day, t); ok {
					return at, true
				}
			}
		}
	}
	return time.Time{}, false
}

// onDay is the first elapse on day strictly after t.
func (e *Event) onDay(day, t time.Time) (time.Time, bool) {
	for h := 0; h < 24; h++ {
		if !e.hour.matches(h) || day.Add(time.Duration(h+1)*time.Hour).Compare(t) <= 0 {
			continue
		}
		for m := 0; m < 60; m++ {
			if !e.minute.matches(m) || day.Add(time.Duration(h)*time.Hour+time.Duration(m+1)*time.Minute).Compare(t) <= 0 {
				continue
			}
			for s := 0; s < 60; s++ {
				at := day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(s)*time.Second)
				if e.second.matches(s) && at.After(t) {
					return at, true
				}
			}
		}
	}
	return time.Time{}, false
}

// Reach is how far back n snapshots taken at the event's elapses reach
// at the least: the shortest span from the first to the n-th of n
// consecutive elapses, over the elapses of a year from t (at most
// 10,000 of them: a schedule that fires more often reaches less than a
// week with any n a spec would keep). An event that elapses fewer than n
// times in that year reaches the year; one that never elapses after t,
// false.
func (e *Event) Reach(t time.Time, n int) (time.Duration, bool) {
	at, end := e.yearFrom(t)
	if len(at) == 0 {
		return 0, false
	}
	return reach(at, n, end.Sub(t)), true
}

// Needed is the fewest snapshots at the event's elapses that reach back
// d, by Reach's measure, up to most; false when most do not.
func (e *Event) Needed(t time.Time, d time.Duration, most int) (int, bool) {
	at, end := e.yearFrom(t)
	for n := 1; n <= most && len(at) > 0; n++ {
		if reach(at, n, end.Sub(t)) >= d {
			return n, true
		}
	}
	return 0, false
}

// yearFrom is the event's elapses in the year from t, at most 10,000, and
// the year's end.
func (e *Event) yearFrom(t time.Time) ([]time.Time, time.Time) {
	end := t.AddDate(1, 0, 0)
	var at []time.Time
	for next, ok := e.Next(t); ok && !next.After(end) && len(at) < 10000; next, ok = e.Next(next) {
		at = append(at, next)
	}
	return at, end
}

func reach(at []time.Time, n int, year time.Duration) time.Duration {
	if n < 1 || len(at) < n {
		return year
	}
	r := at[n-1].Sub(at[0])
	for i := n; i < len(at); i++ {
		r = min(r, at[i].Sub(at[i-n+1]))
	}
	return r
}
