// Package schedule owns recurrence schedules: RFC 5545 text (a DTSTART line and
// one RRULE line) parsed, validated and evaluated exactly and within a bounded
// amount of work, whatever the rule.
//
// The package evaluates rules itself (engine.go) rather than through
// teambition/rrule-go, which cannot be bounded or made exact from outside: it
// materialises a whole period (31.6 million instants for a yearly rule listing
// every month, day, hour, minute and second), iterates from DTSTART and stops
// 292 years after it, counts local times that do not exist, compares UNTIL as
// a wall clock and can loop for minutes on a BYSETPOS that never matches. The
// library stays the in-process reference of the tests for the cases it gets
// right; python-dateutil is the differential reference for the rest.
//
// The guarantees, each tested:
//
//   - Rules are parsed here, so every bad key or value gets a message that
//     names it and says what is expected.
//   - No search does more than a fixed number of steps (maxSteps), so no rule
//     can hang a process or take its memory; the limits that make this
//     possible (README, "Schedules") are checked by [Parse] and
//     [Schedule.Validate], and their refusals name the limit.
//   - Rules without any occurrence are refused by [Schedule.Validate].
//   - [Schedule.Next] jumps to the period of the queried time: its cost does
//     not depend on the age of DTSTART, COUNT included (the last occurrence
//     of a COUNT rule is found once, by Parse).
//   - A *Schedule is immutable and safe for concurrent use.
//
// # Time zones and daylight saving time
//
// DTSTART may carry a TZID; the rule is then expanded on wall-clock times in
// that zone (the time of day of every occurrence comes from DTSTART's wall
// clock or the BY parts, never from an instant), and each occurrence is then
// placed in the zone, following RFC 5545:
//
//   - an occurrence at a local time that does not exist (the hour skipped when
//     clocks go forward) is ignored and not counted by COUNT (§3.3.10);
//   - an occurrence at a local time that happens twice (the hour repeated when
//     clocks go back) means the first of the two instants (§3.3.5).
//
// UNTIL with a trailing Z is an instant; without it, a wall clock in the zone
// of DTSTART (a date alone includes that whole day). DTSTART without TZID and
// without "Z" is read as UTC, and a missing DTSTART becomes the time the
// schedule is saved, in UTC. Years run from 0001 to 9999.
package schedule

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every error that reports a schedule the package
// refuses, so callers can tell bad input from other failures with errors.Is.
var ErrInvalid = errors.New("invalid schedule")

// maxTextLen is limit 1: the longest schedule text accepted, in bytes.
const maxTextLen = 4096

// Schedule is a parsed recurrence rule. The zero value and a nil *Schedule
// are empty schedules: they have no occurrences.
type Schedule struct {
	text string // canonical text, as returned by String
	p    *plan
}

// Parse reads schedule text: an optional DTSTART line and one RRULE line,
// separated by newlines (LF or CRLF) or a literal `\n`. Property names and
// rule keys are case-insensitive. Empty text is the empty schedule (nil, nil).
//
// When DTSTART is missing, defaultStart is used (callers pass the time the
// record is saved, and store the canonical String so it is explicit from then
// on). A zero defaultStart makes a missing DTSTART an error.
func Parse(text string, defaultStart time.Time) (*Schedule, error) {
	if len(text) > maxTextLen {
		return nil, invalid("the schedule is %d bytes long; at most %d are accepted (limit 1)", len(text), maxTextLen)
	}
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

	var start int64
	loc := time.UTC
	if dtLine != "" {
		var err error
		if start, loc, err = parseDTStart(dtLine); err != nil {
			return nil, err
		}
	} else {
		if defaultStart.IsZero() {
			return nil, invalid("missing DTSTART line (e.g. DTSTART:20240101T060000Z)")
		}
		start = wallOf(defaultStart.UTC())
	}

	_, value, _ := strings.Cut(ruleLine, ":")
	p, err := buildPlan(value, start, loc)
	if err != nil {
		return nil, err
	}
	s := &Schedule{p: p}
	if !s.Start().After(time.Time{}) {
		// Callers read the zero time as "no occurrence".
		return nil, invalid("DTSTART must be after 0001-01-01T00:00:00Z (Go's zero time, which stands for no time)")
	}
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

// Start returns DTSTART as an instant: the first instant of its local time,
// or, when that local time does not exist, the instant Go's time.Date gives
// it.
func (s *Schedule) Start() time.Time {
	if s == nil || s.p == nil {
		return time.Time{}
	}
	if t, ok := s.p.place(s.p.start); ok {
		return t
	}
	y, m, d := civilFromDays(floorDiv(s.p.start, secPerDay))
	sod := int(floorMod(s.p.start, secPerDay))
	return time.Date(y, time.Month(m), d, sod/3600, sod%3600/60, sod%60, 0, s.p.loc)
}

// Location returns the zone the schedule's wall-clock times are in.
func (s *Schedule) Location() *time.Location {
	if s == nil || s.p == nil {
		return time.UTC
	}
	return s.p.loc
}

// Validate reports an error when the schedule has no occurrence at all (for
// example FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30), so such a rule is refused when
// it is saved rather than silently never firing, and when its first
// occurrence cannot be found within the work limit.
func (s *Schedule) Validate() error {
	if s == nil || s.p == nil {
		return nil
	}
	p := s.p
	if p.count > 0 {
		if p.last < 0 {
			return invalid("the rule has no occurrence: it would never fire")
		}
		return nil
	}
	_, res := p.next(time.Unix(p.start-unixEpochWall-2*secPerDay, 0))
	switch res {
	case exhausted:
		return invalid("the rule has no occurrence: it would never fire")
	case overLimit:
		return invalid("no occurrence found within %d steps of DTSTART (limit 5): the rule cannot be evaluated cheaply", maxSteps)
	}
	return nil
}

// Next returns the first occurrence strictly after t, or the zero time when
// there is none (empty schedule, or COUNT/UNTIL reached, or past the year
// 9999).
func (s *Schedule) Next(t time.Time) time.Time {
	if s == nil || s.p == nil {
		return time.Time{}
	}
	at, _ := s.p.next(t)
	return at
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// parseDTStart returns DTSTART's wall clock and zone.
func parseDTStart(line string) (int64, *time.Location, error) {
	head, value, ok := strings.Cut(line, ":")
	if !ok || strings.TrimSpace(value) == "" {
		return 0, nil, invalid("DTSTART line %q has no value (e.g. DTSTART:20240101T060000Z)", line)
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
				return 0, nil, invalid("unknown TZID %q: expected an IANA zone such as Europe/Paris", v)
			}
			loc = l
		case "VALUE":
			switch strings.ToUpper(v) {
			case "DATE":
				dateOnly = true
			case "DATE-TIME":
			default:
				return 0, nil, invalid("DTSTART VALUE=%s: expected DATE or DATE-TIME", v)
			}
		default:
			return 0, nil, invalid("unsupported DTSTART parameter %q: expected TZID or VALUE", p)
		}
	}
	// Go's layouts, and the forms a user reads in errors (never Go's
	// reference time).
	layout, form := "20060102T150405", "YYYYMMDDTHHMMSS, with a trailing Z for UTC (e.g. 20240101T060000 or 20240101T060000Z)"
	if dateOnly {
		layout, form = "20060102", "YYYYMMDD with VALUE=DATE (e.g. 20240101)"
	}
	if strings.HasSuffix(strings.ToUpper(value), "Z") {
		value = value[:len(value)-1]
		if len(params) > 0 && loc != time.UTC {
			return 0, nil, invalid("DTSTART %q has both TZID and a trailing Z: use one", line)
		}
	}
	// The wall clock as written: a local time that does not exist stays
	// what it says, so later occurrences keep DTSTART's time of day.
	t, err := time.Parse(layout, value)
	if err != nil {
		return 0, nil, invalid("DTSTART value %q: expected %s", value, form)
	}
	if t.Year() < 1 {
		return 0, nil, invalid("DTSTART value %q: the year must be 0001 to 9999", value)
	}
	return wallOf(t), loc, nil
}

var freqs = map[string]freq{
	"YEARLY": yearly, "MONTHLY": monthly, "WEEKLY": weekly, "DAILY": daily,
	"HOURLY": hourly, "MINUTELY": minutely, "SECONDLY": secondly,
}

var weekdays = map[string]int{"MO": 0, "TU": 1, "WE": 2, "TH": 3, "FR": 4, "SA": 5, "SU": 6}

// buildPlan parses the value of an RRULE line, checking every key, bound and
// limit, and prepares the rule for evaluation from DTSTART start in loc.
func buildPlan(value string, start int64, loc *time.Location) (*plan, error) {
	p := &plan{loc: loc, start: start, interval: 1, untilWall: maxWall, last: -1}
	seen := map[string]bool{}
	var byhour, byminute, bysecond, bymonth, bymonthday, byyearday []int
	var plainDays []int
	for _, part := range strings.Split(strings.TrimSpace(value), ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.ToUpper(strings.TrimSpace(k))
		v = strings.ToUpper(strings.TrimSpace(v))
		if !ok || v == "" {
			return nil, invalid("RRULE part %q: expected KEY=VALUE", part)
		}
		if seen[k] {
			return nil, invalid("RRULE key %s given twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "FREQ":
			f, ok := freqs[v]
			if !ok {
				return nil, invalid("FREQ=%s: expected one of YEARLY, MONTHLY, WEEKLY, DAILY, HOURLY, MINUTELY, SECONDLY", v)
			}
			p.freq = f
		case "INTERVAL":
			var n int
			n, err = intIn(k, v, 1, 1_000_000)
			p.interval = int64(n)
		case "COUNT":
			p.count, err = intIn(k, v, 1, 1_000_000)
		case "UNTIL":
			err = parseUntil(p, v)
		case "WKST":
			wd, ok := weekdays[v]
			if !ok {
				return nil, invalid("WKST=%s: expected MO, TU, WE, TH, FR, SA or SU", v)
			}
			p.wkst = int64(wd)
		case "BYSECOND":
			bysecond, err = intList(k, v, 0, 59, false)
		case "BYMINUTE":
			byminute, err = intList(k, v, 0, 59, false)
		case "BYHOUR":
			byhour, err = intList(k, v, 0, 23, false)
		case "BYMONTH":
			bymonth, err = intList(k, v, 1, 12, false)
		case "BYMONTHDAY":
			bymonthday, err = intList(k, v, 1, 31, true)
		case "BYYEARDAY":
			byyearday, err = intList(k, v, 1, 366, true)
		case "BYWEEKNO":
			p.weeknos, err = intList(k, v, 1, 53, true)
		case "BYSETPOS":
			p.setpos, err = intList(k, v, 1, 366, true)
		case "BYDAY":
			plainDays, p.nth, err = dayList(v)
		default:
			return nil, invalid("unknown RRULE key %s", k)
		}
		if err != nil {
			return nil, err
		}
	}
	if !seen["FREQ"] {
		return nil, invalid("RRULE has no FREQ (e.g. FREQ=DAILY)")
	}
	if seen["COUNT"] && seen["UNTIL"] {
		return nil, invalid("RRULE has both COUNT and UNTIL: RFC 5545 allows one of them")
	}
	if seen["BYWEEKNO"] && p.freq != yearly {
		return nil, invalid("BYWEEKNO is only allowed with FREQ=YEARLY")
	}
	if seen["BYYEARDAY"] && (p.freq == daily || p.freq == weekly || p.freq == monthly) {
		return nil, invalid("BYYEARDAY is not allowed with FREQ=DAILY, WEEKLY or MONTHLY")
	}
	if seen["BYMONTHDAY"] && p.freq == weekly {
		return nil, invalid("BYMONTHDAY is not allowed with FREQ=WEEKLY")
	}
	if p.nth != nil && p.freq != monthly && p.freq != yearly {
		return nil, invalid("BYDAY with a number (like 2MO) needs FREQ=MONTHLY or YEARLY")
	}
	if p.nth != nil && p.freq == yearly && seen["BYWEEKNO"] {
		return nil, invalid("BYDAY with a number (like 2MO) is not allowed with BYWEEKNO")
	}
	if seen["BYSETPOS"] && len(seen) == 2+boolInt(seen["INTERVAL"])+boolInt(seen["COUNT"])+boolInt(seen["UNTIL"])+boolInt(seen["WKST"]) {
		return nil, invalid("BYSETPOS needs another BYxxx rule part to select from")
	}

	// Day filters, with the values RFC 5545 takes from DTSTART when the
	// rule gives none.
	sday := floorDiv(start, secPerDay)
	sy, sm, sd := civilFromDays(sday)
	p.sday, p.sy, p.sm = sday, sy, sm
	for _, m := range bymonth {
		p.months |= 1 << m
	}
	for _, d := range plainDays {
		p.weekdays |= 1 << d
	}
	for _, d := range bymonthday {
		p.hasMday = true
		if d > 0 {
			p.mdays |= 1 << d
		} else {
			p.nmdays |= 1 << -d
		}
	}
	for _, d := range byyearday {
		p.hasYday = true
		if d > 0 {
			p.ydays[d>>6] |= 1 << (d & 63)
		} else {
			p.nydays[-d>>6] |= 1 << (-d & 63)
		}
	}
	if !seen["BYWEEKNO"] && !seen["BYYEARDAY"] && !seen["BYMONTHDAY"] && !seen["BYDAY"] {
		switch p.freq {
		case yearly:
			if !seen["BYMONTH"] {
				p.months = 1 << sm
			}
			p.hasMday, p.mdays = true, 1<<sd
		case monthly:
			p.hasMday, p.mdays = true, 1<<sd
		case weekly:
			p.weekdays = 1 << floorMod(sday, 7)
		}
	}

	// Times of day.
	sod := floorMod(start, secPerDay)
	orStart := func(list []int, v int64) []int {
		if list != nil {
			return list
		}
		return []int{int(v)}
	}
	sh, smin, ssec := sod/3600, sod%3600/60, sod%60
	switch p.freq {
	case hourly, minutely, secondly:
		p.unit = p.freq.unitSeconds()
		p.step = p.unit * p.interval
		p.grid0 = floorDiv(start, p.unit) * p.unit
		for _, h := range byhour {
			p.hourSet |= 1 << h
		}
		var inPeriod []int64
		switch p.freq {
		case hourly:
			for _, m := range orStart(byminute, smin) {
				for _, s := range orStart(bysecond, ssec) {
					inPeriod = append(inPeriod, int64(m*60+s))
				}
			}
		case minutely:
			for _, m := range byminute {
				p.minuteSet |= 1 << m
			}
			for _, s := range orStart(bysecond, ssec) {
				inPeriod = append(inPeriod, int64(s))
			}
		case secondly:
			for _, m := range byminute {
				p.minuteSet |= 1 << m
			}
			for _, s := range bysecond {
				p.secondSet |= 1 << s
			}
			inPeriod = []int64{0}
		}
		p.offsets = inPeriod
		if p.setpos != nil {
			p.offsets = nil
			for _, pos := range p.setpos {
				i := pos - 1
				if pos < 0 {
					i = len(inPeriod) + pos
				}
				if i >= 0 && i < len(inPeriod) {
					p.offsets = append(p.offsets, inPeriod[i])
				}
			}
			slices.Sort(p.offsets)
			p.offsets = slices.Compact(p.offsets)
			if len(p.offsets) == 0 {
				return nil, invalid("BYSETPOS=%s never matches: every %s period has %d instance(s)", joinInts(p.setpos), strings.TrimSuffix(strings.ToLower(freqNames[p.freq]), "ly"), len(inPeriod))
			}
		}
		if err := checkReachable(p, byhour, byminute, bysecond); err != nil {
			return nil, err
		}
		if p.hasDayFilter() && secPerDay%p.step != 0 && p.step%secPerDay != 0 {
			return nil, invalid("FREQ=%s;INTERVAL=%d with BYMONTH, BYMONTHDAY, BYYEARDAY or BYDAY: its steps fall at other times each day; with day filters the step must divide 24 hours or be a whole number of days (limit 4)", freqNames[p.freq], p.interval)
		}
	default:
		p.hours, p.minutes, p.seconds = orStart(byhour, sh), orStart(byminute, smin), orStart(bysecond, ssec)
		if p.setpos != nil {
			most := int64(map[freq]int{yearly: 366, monthly: 31, weekly: 7, daily: 1}[p.freq])
			if p.hasMday && p.freq != yearly {
				most = min(most, int64(bits.OnesCount32(p.mdays)+bits.OnesCount32(p.nmdays)))
			}
			if p.weekdays != 0 || p.nth != nil {
				perMonth := int64(5*bits.OnesCount8(p.weekdays) + len(p.nth))
				switch p.freq {
				case monthly:
					most = min(most, perMonth)
				case yearly:
					most = min(most, 12*perMonth)
				case weekly:
					most = min(most, int64(bits.OnesCount8(p.weekdays)))
				}
			}
			most *= p.ntimes()
			if !slices.ContainsFunc(p.setpos, func(pos int) bool { return int64(max(pos, -pos)) <= most }) {
				return nil, invalid("BYSETPOS=%s never matches: a %s period has at most %d instance(s)", joinInts(p.setpos), strings.ToLower(freqNames[p.freq]), most)
			}
		}
	}
	if p.count > 0 {
		last, res := p.findLast()
		if res == overLimit {
			return nil, invalid("COUNT=%d is too large to evaluate cheaply: its occurrences are not all found within %d steps (limit 3); use UNTIL instead", p.count, maxCountSteps)
		}
		p.last = last
	}
	return p, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
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

// intList parses a BY list, sorted. A value given twice is refused (limit 2),
// so no list is longer than the range of its values.
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
		if slices.Contains(out, n) {
			return nil, invalid("%s lists %d more than once: each value may appear once (limit 2)", key, n)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// dayList parses BYDAY into plain weekdays and weekdays with an ordinal.
func dayList(v string) ([]int, []nthDay, error) {
	var plain []int
	var nth []nthDay
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if len(s) < 2 {
			return nil, nil, invalid("BYDAY value %q: expected a day such as MO or 2MO or -1FR", s)
		}
		wd, ok := weekdays[s[len(s)-2:]]
		if !ok {
			return nil, nil, invalid("BYDAY value %q: expected a day such as MO or 2MO or -1FR", s)
		}
		if num := s[:len(s)-2]; num != "" {
			n, err := strconv.Atoi(num)
			if err != nil || n == 0 || n > 53 || n < -53 {
				return nil, nil, invalid("BYDAY value %q: the number must be 1 to 53 or -1 to -53", s)
			}
			if slices.Contains(nth, nthDay{wd, n}) {
				return nil, nil, invalid("BYDAY lists %s more than once: each value may appear once (limit 2)", s)
			}
			nth = append(nth, nthDay{wd, n})
			continue
		}
		if slices.Contains(plain, wd) {
			return nil, nil, invalid("BYDAY lists %s more than once: each value may appear once (limit 2)", s)
		}
		plain = append(plain, wd)
	}
	return plain, nth, nil
}

// parseUntil sets UNTIL: with a trailing Z an instant, otherwise a wall clock
// in DTSTART's zone (a date alone includes the whole day).
func parseUntil(p *plan, v string) error {
	if t, err := time.Parse("20060102T150405Z", v); err == nil && t.Year() >= 1 {
		p.untilAt = t
		return nil
	}
	if t, err := time.Parse("20060102T150405", v); err == nil && t.Year() >= 1 {
		p.untilWall = wallOf(t)
		return nil
	}
	if t, err := time.Parse("20060102", v); err == nil && t.Year() >= 1 {
		p.untilWall = wallOf(t) + secPerDay - 1
		return nil
	}
	return invalid("UNTIL=%s: expected YYYYMMDDTHHMMSSZ or YYYYMMDD (year 0001 to 9999)", v)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// checkReachable refuses HOURLY, MINUTELY and SECONDLY rules whose time-of-day
// filters can never match. Starting at time-of-day x0 (in units since
// midnight), the period starts visit exactly the times x with
// (x - x0) mod gcd(INTERVAL, units per day) == 0.
func checkReachable(p *plan, byhour, byminute, bysecond []int) error {
	unit := p.unit
	if byhour == nil && (unit > 60 || byminute == nil) && (unit > 1 || bysecond == nil) {
		return nil
	}
	perDay := secPerDay / unit
	g := gcd(p.interval, perDay)
	x0 := floorMod(p.start, secPerDay) / unit
	all := func(list []int, n int) []int {
		if list != nil {
			return list
		}
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	hours := all(byhour, 24)
	minutes, seconds := []int{0}, []int{0}
	if unit <= 60 {
		minutes = all(byminute, 60)
	}
	if unit == 1 {
		seconds = all(bysecond, 60)
	}
	for _, h := range hours {
		for _, m := range minutes {
			for _, s := range seconds {
				x := int64(h*3600+m*60+s) / unit
				if floorMod(x-x0, g) == 0 {
					return nil
				}
			}
		}
	}
	return invalid("the rule can never fire: with INTERVAL=%d from DTSTART %s, the BYHOUR/BYMINUTE/BYSECOND values are never reached",
		p.interval, wallTime(p.start).Format("15:04:05"))
}

// canonical renders the schedule with an explicit DTSTART.
func (s *Schedule) canonical(ruleValue string) string {
	var b strings.Builder
	dt := wallTime(s.p.start).Format("20060102T150405")
	if s.p.loc == time.UTC {
		b.WriteString("DTSTART:" + dt + "Z")
	} else {
		b.WriteString("DTSTART;TZID=" + s.p.loc.String() + ":" + dt)
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
