// Package schedule owns recurrence schedules: RFC 5545 text (a DTSTART line and
// one RRULE line) parsed, validated and evaluated through teambition/rrule-go,
// guarded against that library's known traps.
//
// The guards, each tested:
//
//   - Rules are parsed here, not by the library, so every bad key or value gets
//     a message that names it and says what is expected, and silent library
//     defaults (a missing DTSTART becoming time.Now, a second RRULE replacing the
//     first, ignored EXRULE lines) cannot happen.
//   - HOURLY, MINUTELY and SECONDLY rules whose BYHOUR/BYMINUTE/BYSECOND can
//     never be reached from DTSTART with their INTERVAL would loop forever
//     inside the library; Parse proves reachability first and refuses them.
//   - Rules without any occurrence are refused by [Schedule.Validate].
//   - Evaluation is rebased near the queried time, so [Schedule.Next] costs the
//     same whatever the age of DTSTART.
//   - A *Schedule is immutable and safe for concurrent use: every call builds
//     its own library iterator.
//
// # Time zones and daylight saving time
//
// DTSTART may carry a TZID; occurrences are then wall-clock times in that zone.
// The rule is evaluated on wall-clock (floating) time and each occurrence is
// then placed in the zone, following RFC 5545:
//
//   - an occurrence at a local time that does not exist (the hour skipped when
//     clocks go forward) is ignored (§3.3.10);
//   - an occurrence at a local time that happens twice (the hour repeated when
//     clocks go back) means the first of the two instants (§3.3.5).
//
// So DAILY at 02:30 America/New_York has no occurrence on the spring-forward
// day, and HOURLY in that zone fires once per wall-clock hour, never twice.
// DTSTART without TZID and without "Z" is read as UTC, and a missing DTSTART
// becomes the time the schedule is saved, in UTC.
package schedule

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/teambition/rrule-go"
)

// ErrInvalid is wrapped by every error that reports a schedule the package
// refuses, so callers can tell bad input from other failures with errors.Is.
var ErrInvalid = errors.New("invalid schedule")

// Schedule is a parsed, validated recurrence rule. The zero value and a nil
// *Schedule are empty schedules: they have no occurrences.
type Schedule struct {
	text string         // canonical text, as returned by String
	loc  *time.Location // zone of DTSTART; occurrences are wall-clock times in it
	opt  rrule.ROption  // the rule on floating (UTC-labelled wall-clock) time
	// pinned holds BYHOUR/BYMINUTE/BYSECOND and the BY* day fields the library
	// derives from DTSTART, so the rule can be rebased onto a later DTSTART
	// without changing its meaning.
	pinned rrule.ROption
}

// Parse reads schedule text: an optional DTSTART line and one RRULE line,
// separated by newlines (LF or CRLF) or a literal `\n`. Property names and
// rule keys are case-insensitive. Empty text is the empty schedule (nil, nil).
//
// When DTSTART is missing, defaultStart is used (callers pass the time the
// record is saved, and store the canonical String so it is explicit from then
// on). A zero defaultStart makes a missing DTSTART an error.
func Parse(text string, defaultStart time.Time) (*Schedule, error) {
	text = strings.TrimSpace(strings.ReplaceAll(text, `\n`, "\n"))
	if text == "" {
		return nil, nil
	}
	var dtLine, ruleLine string
	for _, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" {
			continue
		}
		name, _, _ := strings.Cut(line, ":")
		name, _, _ = strings.Cut(name, ";")
		switch strings.ToUpper(name) {
		case "DTSTART":
			if dtLine != "" {
				return nil, invalid("more than one DTSTART line")
			}
			dtLine = line
		case "RRULE":
			if ruleLine != "" {
				return nil, invalid("more than one RRULE line: only one rule per schedule is supported")
			}
			ruleLine = line
		default:
			return nil, invalid("unsupported line %q: a schedule is one DTSTART line and one RRULE line", line)
		}
	}
	if ruleLine == "" {
		return nil, invalid("missing RRULE line (e.g. RRULE:FREQ=DAILY;BYHOUR=6,16)")
	}

	var start time.Time
	var loc *time.Location
	if dtLine != "" {
		var err error
		if start, loc, err = parseDTStart(dtLine); err != nil {
			return nil, err
		}
	} else {
		if defaultStart.IsZero() {
			return nil, invalid("missing DTSTART line (e.g. DTSTART:20240101T060000Z)")
		}
		loc = time.UTC
		start = defaultStart.UTC().Truncate(time.Second)
	}

	_, value, _ := strings.Cut(ruleLine, ":")
	opt, err := parseRule(value, loc)
	if err != nil {
		return nil, err
	}
	opt.Dtstart = floating(start)
	if err := checkReachable(opt); err != nil {
		return nil, err
	}
	if _, err := rrule.NewRRule(opt); err != nil {
		// parseRule checks every bound the library checks; this is a safety net.
		return nil, invalid("%v", err)
	}
	s := &Schedule{loc: loc, opt: opt, pinned: pin(opt)}
	s.text = s.canonical(value)
	return s, nil
}

// MustParse is Parse for schedules known to be valid, such as literals in
// tests and examples; it panics on error.
func MustParse(text string) *Schedule {
	s, err := Parse(text, time.Time{})
	if err != nil {
		panic(err)
	}
	return s
}

// String returns the canonical text: DTSTART with its zone, a newline, and
// the RRULE line with upper-case keys. Parse(s.String()) is equivalent to s.
func (s *Schedule) String() string {
	if s == nil {
		return ""
	}
	return s.text
}

// Start returns DTSTART as an instant.
func (s *Schedule) Start() time.Time {
	if s == nil {
		return time.Time{}
	}
	dt := s.opt.Dtstart
	return time.Date(dt.Year(), dt.Month(), dt.Day(), dt.Hour(), dt.Minute(), dt.Second(), 0, s.loc)
}

// Location returns the zone the schedule's wall-clock times are in.
func (s *Schedule) Location() *time.Location {
	if s == nil {
		return time.UTC
	}
	return s.loc
}

// Validate reports an error when the schedule has no occurrence at all (for
// example FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30), so such a rule is refused when
// it is saved rather than silently never firing.
func (s *Schedule) Validate() error {
	if s == nil {
		return nil
	}
	if s.Next(s.Start().Add(-time.Second)).IsZero() {
		return invalid("the rule has no occurrence: it would never fire")
	}
	return nil
}

// Next returns the first occurrence strictly after t, or the zero time when
// there is none (empty schedule, or COUNT/UNTIL reached).
func (s *Schedule) Next(t time.Time) time.Time {
	if s == nil {
		return time.Time{}
	}
	w := floating(t.In(s.loc))
	r, err := rrule.NewRRule(s.rebased(w))
	if err != nil {
		return time.Time{} // unreachable: the options were validated by Parse
	}
	next := r.Iterator()
	for {
		c, ok := next()
		if !ok {
			return time.Time{}
		}
		if !c.After(w) {
			continue
		}
		// Walls at or below w map to instants at or before t (see the package
		// doc), so only later walls need placing; a wall in the repeated hour
		// can still map before t, and a skipped wall maps nowhere.
		if at, ok := s.place(c); ok && at.After(t) {
			return at
		}
	}
}

// place maps a floating wall-clock time to an instant in the schedule's zone:
// false when the wall time does not exist there, the earlier instant when it
// exists twice.
func (s *Schedule) place(w time.Time) (time.Time, bool) {
	y, mo, d := w.Date()
	h, mi, sec := w.Clock()
	t := time.Date(y, mo, d, h, mi, sec, 0, s.loc)
	if !sameWall(t, w) {
		return time.Time{}, false
	}
	// Look for an earlier instant with the same wall clock (clocks went back).
	best := t
	for _, probe := range []time.Duration{-12 * time.Hour, 12 * time.Hour} {
		_, off := t.Add(probe).Zone()
		u := w.Add(-time.Duration(off) * time.Second).In(s.loc)
		if sameWall(u, w) && u.Before(best) {
			best = u
		}
	}
	return best, true
}

func sameWall(t, w time.Time) bool {
	y1, m1, d1 := t.Date()
	y2, m2, d2 := w.Date()
	h1, n1, s1 := t.Clock()
	h2, n2, s2 := w.Clock()
	return y1 == y2 && m1 == m2 && d1 == d2 && h1 == h2 && n1 == n2 && s1 == s2
}

// floating returns the wall clock of t labelled as UTC, truncated to seconds.
func floating(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func parseDTStart(line string) (time.Time, *time.Location, error) {
	head, value, ok := strings.Cut(line, ":")
	if !ok || strings.TrimSpace(value) == "" {
		return time.Time{}, nil, invalid("DTSTART line %q has no value (e.g. DTSTART:20240101T060000Z)", line)
	}
	value = strings.TrimSpace(value)
	loc := time.UTC
	dateOnly := false
	params := strings.Split(head, ";")[1:]
	for _, p := range params {
		k, v, _ := strings.Cut(p, "=")
		switch strings.ToUpper(strings.TrimSpace(k)) {
		case "TZID":
			l, err := time.LoadLocation(strings.TrimSpace(v))
			if err != nil || v == "" {
				return time.Time{}, nil, invalid("unknown TZID %q: expected an IANA zone such as Europe/Paris", v)
			}
			loc = l
		case "VALUE":
			switch strings.ToUpper(v) {
			case "DATE":
				dateOnly = true
			case "DATE-TIME":
			default:
				return time.Time{}, nil, invalid("DTSTART VALUE=%s: expected DATE or DATE-TIME", v)
			}
		default:
			return time.Time{}, nil, invalid("unsupported DTSTART parameter %q: expected TZID or VALUE", p)
		}
	}
	layout := "20060102T150405"
	if dateOnly {
		layout = "20060102"
	}
	utc := strings.HasSuffix(strings.ToUpper(value), "Z")
	if utc {
		value = value[:len(value)-1]
		if len(params) > 0 && loc != time.UTC {
			return time.Time{}, nil, invalid("DTSTART %q has both TZID and a trailing Z: use one", line)
		}
	}
	t, err := time.ParseInLocation(layout, value, loc)
	if err != nil {
		return time.Time{}, nil, invalid("DTSTART value %q: expected %s (e.g. 20240101T060000Z)", value, strings.ReplaceAll(layout, "20060102", "YYYYMMDD"))
	}
	return t, loc, nil
}

var freqs = map[string]rrule.Frequency{
	"YEARLY": rrule.YEARLY, "MONTHLY": rrule.MONTHLY, "WEEKLY": rrule.WEEKLY, "DAILY": rrule.DAILY,
	"HOURLY": rrule.HOURLY, "MINUTELY": rrule.MINUTELY, "SECONDLY": rrule.SECONDLY,
}

var weekdays = map[string]rrule.Weekday{
	"MO": rrule.MO, "TU": rrule.TU, "WE": rrule.WE, "TH": rrule.TH, "FR": rrule.FR, "SA": rrule.SA, "SU": rrule.SU,
}

// parseRule parses the value of an RRULE line into library options, checking
// every key and bound itself.
func parseRule(value string, loc *time.Location) (rrule.ROption, error) {
	var opt rrule.ROption
	seen := map[string]bool{}
	hasFreq := false
	for _, part := range strings.Split(strings.TrimSpace(value), ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.ToUpper(strings.TrimSpace(k))
		v = strings.ToUpper(strings.TrimSpace(v))
		if !ok || v == "" {
			return opt, invalid("RRULE part %q: expected KEY=VALUE", part)
		}
		if seen[k] {
			return opt, invalid("RRULE key %s given twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "FREQ":
			f, ok := freqs[v]
			if !ok {
				return opt, invalid("FREQ=%s: expected one of YEARLY, MONTHLY, WEEKLY, DAILY, HOURLY, MINUTELY, SECONDLY", v)
			}
			opt.Freq, hasFreq = f, true
		case "INTERVAL":
			opt.Interval, err = intIn(k, v, 1, 1_000_000)
		case "COUNT":
			opt.Count, err = intIn(k, v, 1, 1_000_000)
		case "UNTIL":
			opt.Until, err = parseUntil(v, loc)
		case "WKST":
			wd, ok := weekdays[v]
			if !ok {
				return opt, invalid("WKST=%s: expected MO, TU, WE, TH, FR, SA or SU", v)
			}
			opt.Wkst = wd
		case "BYSECOND":
			opt.Bysecond, err = intList(k, v, 0, 59, false)
		case "BYMINUTE":
			opt.Byminute, err = intList(k, v, 0, 59, false)
		case "BYHOUR":
			opt.Byhour, err = intList(k, v, 0, 23, false)
		case "BYMONTH":
			opt.Bymonth, err = intList(k, v, 1, 12, false)
		case "BYMONTHDAY":
			opt.Bymonthday, err = intList(k, v, 1, 31, true)
		case "BYYEARDAY":
			opt.Byyearday, err = intList(k, v, 1, 366, true)
		case "BYWEEKNO":
			opt.Byweekno, err = intList(k, v, 1, 53, true)
		case "BYSETPOS":
			opt.Bysetpos, err = intList(k, v, 1, 366, true)
		case "BYDAY":
			opt.Byweekday, err = dayList(v)
		default:
			return opt, invalid("unknown RRULE key %s", k)
		}
		if err != nil {
			return opt, err
		}
	}
	if !hasFreq {
		return opt, invalid("RRULE has no FREQ (e.g. FREQ=DAILY)")
	}
	if seen["COUNT"] && seen["UNTIL"] {
		return opt, invalid("RRULE has both COUNT and UNTIL: RFC 5545 allows one of them")
	}
	if seen["BYWEEKNO"] && opt.Freq != rrule.YEARLY {
		return opt, invalid("BYWEEKNO is only allowed with FREQ=YEARLY")
	}
	if seen["BYYEARDAY"] && (opt.Freq == rrule.DAILY || opt.Freq == rrule.WEEKLY || opt.Freq == rrule.MONTHLY) {
		return opt, invalid("BYYEARDAY is not allowed with FREQ=DAILY, WEEKLY or MONTHLY")
	}
	if seen["BYMONTHDAY"] && opt.Freq == rrule.WEEKLY {
		return opt, invalid("BYMONTHDAY is not allowed with FREQ=WEEKLY")
	}
	if opt.Freq != rrule.MONTHLY && opt.Freq != rrule.YEARLY {
		for _, d := range opt.Byweekday {
			if d.N() != 0 {
				return opt, invalid("BYDAY with a number (like 2MO) needs FREQ=MONTHLY or YEARLY")
			}
		}
	}
	if seen["BYSETPOS"] && len(seen) == 2+boolInt(seen["INTERVAL"])+boolInt(seen["COUNT"])+boolInt(seen["UNTIL"])+boolInt(seen["WKST"]) {
		return opt, invalid("BYSETPOS needs another BYxxx rule part to select from")
	}
	if opt.Interval == 0 {
		opt.Interval = 1
	}
	return opt, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func intIn(key, v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, invalid("%s=%s: expected a whole number from %d to %d", key, v, lo, hi)
	}
	return n, nil
}

func intList(key, v string, lo, hi int, negative bool) ([]int, error) {
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		ok := err == nil && (n >= lo && n <= hi || negative && n <= -lo && n >= -hi)
		if !ok {
			if negative {
				return nil, invalid("%s value %q: expected %d to %d or -%d to -%d", key, s, lo, hi, lo, hi)
			}
			return nil, invalid("%s value %q: expected %d to %d", key, s, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}

func dayList(v string) ([]rrule.Weekday, error) {
	var out []rrule.Weekday
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if len(s) < 2 {
			return nil, invalid("BYDAY value %q: expected a day such as MO or 2MO or -1FR", s)
		}
		wd, ok := weekdays[s[len(s)-2:]]
		if !ok {
			return nil, invalid("BYDAY value %q: expected a day such as MO or 2MO or -1FR", s)
		}
		if num := s[:len(s)-2]; num != "" {
			n, err := strconv.Atoi(num)
			if err != nil || n == 0 || n > 53 || n < -53 {
				return nil, invalid("BYDAY value %q: the number must be 1 to 53 or -1 to -53", s)
			}
			wd = wd.Nth(n)
		}
		out = append(out, wd)
	}
	return out, nil
}

func parseUntil(v string, loc *time.Location) (time.Time, error) {
	for _, layout := range []string{"20060102T150405Z", "20060102T150405", "20060102"} {
		if layout == "20060102T150405Z" {
			if t, err := time.Parse(layout, v); err == nil {
				return floating(t.In(loc)), nil
			}
			continue
		}
		if t, err := time.Parse(layout, v); err == nil {
			if layout == "20060102" {
				t = t.Add(24*time.Hour - time.Second) // the whole day is included
			}
			return t, nil // already wall-clock time
		}
	}
	return time.Time{}, invalid("UNTIL=%s: expected YYYYMMDDTHHMMSSZ or YYYYMMDD", v)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// checkReachable refuses HOURLY, MINUTELY and SECONDLY rules whose time-of-day
// filters can never match: rrule-go advances the clock by INTERVAL units until
// BYHOUR/BYMINUTE/BYSECOND match and never gives up. Starting at time-of-day
// x0 (in units since midnight), the clock visits exactly the times x with
// (x - x0) mod gcd(INTERVAL, units per day) == 0.
func checkReachable(opt rrule.ROption) error {
	var unit int // seconds per step unit
	switch opt.Freq {
	case rrule.HOURLY:
		if len(opt.Byhour) == 0 {
			return nil
		}
		unit = 3600
	case rrule.MINUTELY:
		if len(opt.Byhour) == 0 && len(opt.Byminute) == 0 {
			return nil
		}
		unit = 60
	case rrule.SECONDLY:
		if len(opt.Byhour) == 0 && len(opt.Byminute) == 0 && len(opt.Bysecond) == 0 {
			return nil
		}
		unit = 1
	default:
		return nil
	}
	perDay := 86400 / unit
	g := gcd(opt.Interval, perDay)
	h0, m0, s0 := opt.Dtstart.Clock()
	x0 := (h0*3600 + m0*60 + s0) / unit
	all := func(list []int, n int) []int {
		if len(list) > 0 {
			return list
		}
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	hours := all(opt.Byhour, 24)
	minutes, seconds := []int{0}, []int{0}
	if unit <= 60 {
		minutes = all(opt.Byminute, 60)
	}
	if unit == 1 {
		seconds = all(opt.Bysecond, 60)
	}
	for _, h := range hours {
		for _, m := range minutes {
			for _, s := range seconds {
				x := (h*3600 + m*60 + s) / unit
				if ((x-x0)%g+g)%g == 0 {
					return nil
				}
			}
		}
	}
	return invalid("the rule can never fire: with INTERVAL=%d from DTSTART %s, the BYHOUR/BYMINUTE/BYSECOND values are never reached",
		opt.Interval, opt.Dtstart.Format("15:04:05"))
}

// pin returns the options with every field the library would derive from
// DTSTART made explicit, so DTSTART can move without changing the rule.
func pin(opt rrule.ROption) rrule.ROption {
	r, err := rrule.NewRRule(opt)
	if err != nil {
		return opt
	}
	p := r.Options // derived BYMONTH/BYMONTHDAY/BYDAY filled in
	dt := opt.Dtstart
	if len(p.Byhour) == 0 && p.Freq < rrule.HOURLY {
		p.Byhour = []int{dt.Hour()}
	}
	if len(p.Byminute) == 0 && p.Freq < rrule.MINUTELY {
		p.Byminute = []int{dt.Minute()}
	}
	if len(p.Bysecond) == 0 && p.Freq < rrule.SECONDLY {
		p.Bysecond = []int{dt.Second()}
	}
	return p
}

// rebased returns options equivalent to the rule for occurrences at or after
// the start of the period containing w, with DTSTART moved to that period's
// start. Every period start is DTSTART's period plus a whole number of
// INTERVALs, so the phase is kept; BY* fields are pinned. COUNT rules are not
// rebased (the occurrences before would have to be counted); their cost is
// bounded by COUNT.
func (s *Schedule) rebased(w time.Time) rrule.ROption {
	o, dt := s.pinned, s.opt.Dtstart
	if o.Count != 0 || !w.After(dt) {
		return s.opt
	}
	iv := o.Interval
	var start time.Time
	switch o.Freq {
	case rrule.SECONDLY, rrule.MINUTELY, rrule.HOURLY:
		unit := map[rrule.Frequency]time.Duration{rrule.SECONDLY: time.Second, rrule.MINUTELY: time.Minute, rrule.HOURLY: time.Hour}[o.Freq]
		step := unit * time.Duration(iv)
		k := w.Sub(dt) / step
		start = dt.Add(k * step).Truncate(unit)
	case rrule.DAILY:
		d0 := time.Date(dt.Year(), dt.Month(), dt.Day(), 0, 0, 0, 0, time.UTC)
		days := int(w.Sub(d0) / (24 * time.Hour))
		start = d0.AddDate(0, 0, days/iv*iv)
	case rrule.WEEKLY:
		// Weeks begin on WKST (rrule-go numbers Monday as 0).
		d0 := time.Date(dt.Year(), dt.Month(), dt.Day(), 0, 0, 0, 0, time.UTC)
		wd := (int(d0.Weekday()) + 6) % 7
		d0 = d0.AddDate(0, 0, -((wd - o.Wkst.Day() + 7) % 7))
		weeks := int(w.Sub(d0) / (7 * 24 * time.Hour))
		start = d0.AddDate(0, 0, weeks/iv*iv*7)
	case rrule.MONTHLY:
		months := (w.Year()-dt.Year())*12 + int(w.Month()-dt.Month())
		start = time.Date(dt.Year(), dt.Month()+time.Month(months/iv*iv), 1, 0, 0, 0, 0, time.UTC)
	case rrule.YEARLY:
		// One period earlier than w's: with BYWEEKNO a year's set can spill
		// into the first days of the next year.
		years := w.Year() - dt.Year()
		start = time.Date(dt.Year()+years/iv*iv-iv, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if !start.After(dt) {
		return s.opt
	}
	o.Dtstart = start
	return o
}

// canonical renders the schedule with an explicit DTSTART.
func (s *Schedule) canonical(ruleValue string) string {
	var b strings.Builder
	dt := s.opt.Dtstart
	if s.loc == time.UTC {
		b.WriteString("DTSTART:" + dt.Format("20060102T150405") + "Z")
	} else {
		b.WriteString("DTSTART;TZID=" + s.loc.String() + ":" + dt.Format("20060102T150405"))
	}
	var parts []string
	for _, p := range strings.Split(strings.TrimSpace(ruleValue), ";") {
		if k, v, ok := strings.Cut(p, "="); ok {
			parts = append(parts, strings.ToUpper(strings.TrimSpace(k))+"="+strings.ToUpper(strings.TrimSpace(v)))
		}
	}
	b.WriteString("\nRRULE:" + strings.Join(parts, ";"))
	return b.String()
}
