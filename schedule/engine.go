package schedule

import (
	"slices"
	"sort"
	"time"
)

// The evaluator. Rules are expanded on wall-clock ("floating") time counted in
// seconds since 0001-01-01T00:00:00 of the proleptic Gregorian calendar (day 0
// is a Monday), one period (year, month, week, day, hour, minute or second)
// at a time, the way RFC 5545 §3.3.10 describes: the period's days are the
// days that pass every BY day filter, its instances are those days times the
// sorted BYHOUR x BYMINUTE x BYSECOND product, and BYSETPOS picks positions
// in that list. Nothing is materialised beyond one period's list of days:
// the k-th instance of a period and the number of instances below a wall
// clock are computed by index arithmetic, so a rule listing every month, day,
// hour, minute and second costs what a daily rule costs. Each occurrence is
// then placed in the zone (skipped when its local time does not exist, the
// first instant when it exists twice).

const (
	secPerDay = 86400
	// maxSteps bounds every search (limit 5 in README's "Schedules"): a step
	// is one day examined, or one HOURLY/MINUTELY/SECONDLY period examined.
	// The calendar repeats every 400 years (146,097 days), so a rule that
	// has an occurrence has one within that many steps of any instant.
	maxSteps = 500_000
	// maxCountSteps bounds the walk that finds the last occurrence of a
	// COUNT rule (limit 3).
	maxCountSteps = 100_000
)

type freq int

const (
	yearly freq = iota
	monthly
	weekly
	daily
	hourly
	minutely
	secondly
)

var freqNames = [...]string{"YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY", "SECONDLY"}

// unitSeconds is the length of a HOURLY, MINUTELY or SECONDLY period.
func (f freq) unitSeconds() int64 {
	switch f {
	case hourly:
		return 3600
	case minutely:
		return 60
	case secondly:
		return 1
	}
	return 0
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// daysFromCivil returns the day number of a proleptic Gregorian date
// (0001-01-01 is day 0).
func daysFromCivil(y, m, d int) int64 {
	yy := int64(y)
	if m <= 2 {
		yy--
	}
	era := floorDiv(yy, 400)
	yoe := yy - era*400
	mp := int64((m + 9) % 12)
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 306
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y, m, d int) {
	z += 306
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	m = int(mp + 3)
	if m > 12 {
		m -= 12
	}
	y = int(yoe + era*400)
	if m <= 2 {
		y++
	}
	return y, m, d
}

var (
	unixEpochWall = daysFromCivil(1970, 1, 1) * secPerDay
	// maxWall is the last second a schedule can reach: 9999-12-31T23:59:59
	// (limit 6).
	maxWall = daysFromCivil(9999, 12, 31)*secPerDay + secPerDay - 1
)

// wallOf returns the wall clock of t in its own location, in seconds.
func wallOf(t time.Time) int64 {
	y, m, d := t.Date()
	h, mi, s := t.Clock()
	return daysFromCivil(y, int(m), d)*secPerDay + int64(h*3600+mi*60+s)
}

// wallTime returns wall clock w as a time.Time labelled UTC.
func wallTime(w int64) time.Time { return time.Unix(w-unixEpochWall, 0).UTC() }

func isLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

// Month tables for common (0) and leap (1) years.
var (
	monthStart [2][13]int
	monthOfDay [2][366]int8
	mdayOfDay  [2][366]int8
)

func init() {
	lens := [12]int{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for leap := 0; leap < 2; leap++ {
		doy := 0
		for m := 0; m < 12; m++ {
			n := lens[m]
			if m == 1 {
				n += leap
			}
			monthStart[leap][m] = doy
			for d := 1; d <= n; d++ {
				monthOfDay[leap][doy] = int8(m + 1)
				mdayOfDay[leap][doy] = int8(d)
				doy++
			}
		}
		monthStart[leap][12] = doy
	}
}

// nthDay is a BYDAY value with an ordinal, like -1FR.
type nthDay struct{ wd, n int }

// plan is a parsed rule ready for evaluation. It is immutable; every search
// uses its own cursor.
type plan struct {
	loc      *time.Location
	freq     freq
	interval int64
	start    int64 // DTSTART's wall clock
	sday     int64 // DTSTART's day, year and month
	sy, sm   int
	wkst     int64 // 0 = Monday
	count    int

	// Day filters (RFC 5545 expansions and limits alike: a day of the period
	// is kept when it passes every BY part given).
	months   uint16 // bit m for BYMONTH m; 0 when not given
	weekdays uint8  // bit wd for plain BYDAY values
	nth      []nthDay
	hasMday  bool
	mdays    uint32 // bit d for BYMONTHDAY d
	nmdays   uint32 // bit d for BYMONTHDAY -d
	hasYday  bool
	ydays    [6]uint64 // bit n for BYYEARDAY n
	nydays   [6]uint64 // bit n for BYYEARDAY -n
	weeknos  []int

	// Time of day. For DAILY and longer periods, hours x minutes x seconds
	// (with DTSTART's values for parts not given) is the sorted list of
	// times of each kept day. For shorter periods the sets filter the
	// period's start and the expansion is in offsets.
	hours, minutes, seconds []int
	hourSet                 uint32 // 0 when BYHOUR is not given
	minuteSet, secondSet    uint64
	setpos                  []int

	unit, step int64   // HOURLY/MINUTELY/SECONDLY: period length, INTERVAL periods
	grid0      int64   // start of DTSTART's period
	offsets    []int64 // instants of a kept period, after BYSETPOS, from its start

	untilAt   time.Time // UNTIL with Z: an instant; zero when not given
	untilWall int64     // UNTIL without Z: a wall clock; maxWall when not given
	last      int64     // COUNT: wall clock of the last occurrence (-1: none)
}

func (p *plan) hasDayFilter() bool {
	return p.months != 0 || p.weekdays != 0 || p.nth != nil || p.hasMday || p.hasYday || p.weeknos != nil
}

// stop is the last wall clock a search may return.
func (p *plan) stop() int64 {
	s := min(maxWall, p.untilWall)
	if p.count > 0 {
		s = min(s, p.last)
	}
	if !p.untilAt.IsZero() {
		// Offsets differ by less than a day; the instant is checked after
		// placing.
		s = min(s, wallOf(p.untilAt.UTC())+secPerDay)
	}
	return s
}

func (p *plan) ntimes() int64 { return int64(len(p.hours) * len(p.minutes) * len(p.seconds)) }

// tod returns the i-th time of day of the hours x minutes x seconds product.
func (p *plan) tod(i int64) int64 {
	ls, lm := int64(len(p.seconds)), int64(len(p.minutes))
	return int64(p.hours[i/(lm*ls)])*3600 + int64(p.minutes[(i/ls)%lm])*60 + int64(p.seconds[i%ls])
}

// todBelow returns how many times of day of the product are below x seconds.
func (p *plan) todBelow(x int64) int64 {
	if x >= secPerDay {
		return p.ntimes()
	}
	ls, lm := int64(len(p.seconds)), int64(len(p.minutes))
	hh := int(x / 3600)
	i := sort.SearchInts(p.hours, hh)
	n := int64(i) * lm * ls
	if i < len(p.hours) && p.hours[i] == hh {
		r := x % 3600
		mm := int(r / 60)
		j := sort.SearchInts(p.minutes, mm)
		n += int64(j) * ls
		if j < len(p.minutes) && p.minutes[j] == mm {
			n += int64(sort.SearchInts(p.seconds, int(r%60)))
		}
	}
	return n
}

// yearInfo is what the day filters need to know about one year.
type yearInfo struct {
	year   int
	jan1   int64
	length int
	leap   int
	wno    []bool // BYWEEKNO mask, length+7 days
}

// cursor holds the state of one search. Not safe for concurrent use.
type cursor struct {
	p     *plan
	yi    yearInfo
	nw    []bool // BYDAY-with-ordinal mask of the current period's year
	nwKey int    // year*13+month the mask was built for
	days  []int64
	sel   []int64
	steps int
	gaps  gapList
}

func (p *plan) cursor() *cursor {
	return &cursor{p: p, yi: yearInfo{year: -1 << 30}, nwKey: -1, gaps: gapList{loc: p.loc}}
}

func (c *cursor) year(y int) *yearInfo {
	if c.yi.year == y {
		return &c.yi
	}
	yi := &c.yi
	yi.year = y
	yi.jan1 = daysFromCivil(y, 1, 1)
	yi.leap = 0
	if isLeap(y) {
		yi.leap = 1
	}
	yi.length = 365 + yi.leap
	if c.p.weeknos != nil {
		c.weekMask()
	}
	return yi
}

func (c *cursor) wday(doy int) int64 { return floorMod(c.yi.jan1+int64(doy), 7) }

// weekMask marks the days of the year in the BYWEEKNO weeks (weeks start on
// WKST; week 1 is the first with at least four days in the year). It follows
// python-dateutil's rrule, the reference the package is tested against.
func (c *cursor) weekMask() {
	yi, p := &c.yi, c.p
	if cap(yi.wno) < yi.length+7 {
		yi.wno = make([]bool, 366+7)
	}
	yi.wno = yi.wno[:yi.length+7]
	clear(yi.wno)
	yearWday := floorMod(yi.jan1, 7)
	no1wkst := floorMod(7-yearWday+p.wkst, 7)
	firstwkst := no1wkst
	var wyearlen int64
	if no1wkst >= 4 {
		no1wkst = 0
		wyearlen = int64(yi.length) + floorMod(yearWday-p.wkst, 7)
	} else {
		wyearlen = int64(yi.length) - no1wkst
	}
	numweeks := wyearlen/7 + (wyearlen%7)/4
	mark := func(i int64) {
		for j := 0; j < 7; j++ {
			yi.wno[i] = true
			i++
			if floorMod(yi.jan1+i, 7) == p.wkst {
				break
			}
		}
	}
	for _, n0 := range p.weeknos {
		n := int64(n0)
		if n < 0 {
			n += numweeks + 1
		}
		if n <= 0 || n > numweeks {
			continue
		}
		i := no1wkst
		if n > 1 {
			i = no1wkst + (n-1)*7
			if no1wkst != firstwkst {
				i -= 7 - firstwkst
			}
		}
		mark(i)
	}
	if slices.Contains(p.weeknos, 1) {
		// Week 1 of next year may start in this year.
		i := no1wkst + numweeks*7
		if no1wkst != firstwkst {
			i -= 7 - firstwkst
		}
		if i < int64(yi.length) {
			mark(i)
		}
	}
	if no1wkst != 0 {
		// The days before week 1 belong to last year's last week.
		lnumweeks := int64(-1)
		if !slices.Contains(p.weeknos, -1) {
			lyearWday := floorMod(daysFromCivil(yi.year-1, 1, 1), 7)
			lno1wkst := floorMod(7-lyearWday+p.wkst, 7)
			lyearlen := int64(365)
			if isLeap(yi.year - 1) {
				lyearlen = 366
			}
			if lno1wkst >= 4 {
				lnumweeks = 52 + (lyearlen+floorMod(lyearWday-p.wkst, 7))%7/4
			} else {
				lnumweeks = 52 + (int64(yi.length)-no1wkst)%7/4
			}
		}
		if slices.Contains(p.weeknos, int(lnumweeks)) {
			for i := int64(0); i < no1wkst; i++ {
				yi.wno[i] = true
			}
		}
	}
}

// nthMask marks the days matching the BYDAY values with an ordinal: within
// the month for MONTHLY, within each BYMONTH month or else the year for
// YEARLY.
func (c *cursor) nthMask(month int) {
	key := c.yi.year*13 + month
	if c.nwKey == key {
		return
	}
	c.nwKey = key
	if cap(c.nw) < 366 {
		c.nw = make([]bool, 366)
	}
	c.nw = c.nw[:c.yi.length]
	clear(c.nw)
	ms := &monthStart[c.yi.leap]
	mark := func(first, last int) {
		for _, x := range c.p.nth {
			var i int
			if x.n < 0 {
				i = last + (x.n+1)*7
				i -= int(floorMod(c.wday(i)-int64(x.wd), 7))
			} else {
				i = first + (x.n-1)*7
				i += int(floorMod(7-c.wday(i)+int64(x.wd), 7))
			}
			if first <= i && i <= last {
				c.nw[i] = true
			}
		}
	}
	switch {
	case month > 0:
		mark(ms[month-1], ms[month]-1)
	case c.p.months != 0:
		for m := 1; m <= 12; m++ {
			if c.p.months&(1<<m) != 0 {
				mark(ms[m-1], ms[m]-1)
			}
		}
	default:
		mark(0, c.yi.length-1)
	}
}

func bit6(b *[6]uint64, n int) bool { return b[n>>6]&(1<<(n&63)) != 0 }

// dayOK reports whether day doy of the current year passes the day filters.
// The BYDAY-with-ordinal mask must be current.
func (c *cursor) dayOK(doy int) bool {
	p, yi := c.p, &c.yi
	mo := int(monthOfDay[yi.leap][doy])
	if p.months != 0 && p.months&(1<<mo) == 0 {
		return false
	}
	if p.weeknos != nil && !yi.wno[doy] {
		return false
	}
	if p.weekdays != 0 || p.nth != nil {
		// Plain and ordinal BYDAY values are alternatives (RFC 5545).
		if p.weekdays&(1<<c.wday(doy)) == 0 && (p.nth == nil || !c.nw[doy]) {
			return false
		}
	}
	if p.hasMday {
		md := int(mdayOfDay[yi.leap][doy])
		mlen := monthStart[yi.leap][mo] - monthStart[yi.leap][mo-1]
		if p.mdays&(1<<md) == 0 && p.nmdays&(1<<(mlen-md+1)) == 0 {
			return false
		}
	}
	if p.hasYday && !bit6(&p.ydays, doy+1) && !bit6(&p.nydays, yi.length-doy) {
		return false
	}
	return true
}

// dayNumberOK is dayOK for an absolute day number (no ordinal BYDAY).
func (c *cursor) dayNumberOK(day int64) bool {
	if doy := day - c.yi.jan1; doy >= 0 && doy < int64(c.yi.length) {
		return c.dayOK(int(doy))
	}
	y, _, _ := civilFromDays(day)
	yi := c.year(y)
	return c.dayOK(int(day - yi.jan1))
}

// periodSet is the sorted list of one period's instances (wall clocks).
type periodSet struct {
	p    *plan
	days []int64 // DAILY and longer, without BYSETPOS: kept days
	sel  []int64 // otherwise: the instances themselves
	n    int64
}

func (s *periodSet) elem(i int64) int64 {
	if s.days == nil {
		return s.sel[i]
	}
	nt := s.p.ntimes()
	if nt == 1 {
		return s.days[i]*secPerDay + s.p.tod(0)
	}
	return s.days[i/nt]*secPerDay + s.p.tod(i%nt)
}

// bounds returns wall clocks at or below instance i0 and at or above the
// last instance, cheaply.
func (s *periodSet) bounds(i0 int64) (lo, hi int64) {
	if s.days == nil {
		return s.sel[i0], s.sel[s.n-1]
	}
	return s.days[i0/s.p.ntimes()] * secPerDay, s.days[len(s.days)-1]*secPerDay + secPerDay - 1
}

// rank returns how many instances are below wall clock x.
func (s *periodSet) rank(x int64) int64 {
	if s.days == nil {
		return int64(sort.Search(len(s.sel), func(i int) bool { return s.sel[i] >= x }))
	}
	d := floorDiv(x, secPerDay)
	j := sort.Search(len(s.days), func(i int) bool { return s.days[i] >= d })
	n := int64(j) * s.p.ntimes()
	if j < len(s.days) && s.days[j] == d {
		n += s.p.todBelow(x - d*secPerDay)
	}
	return n
}

// periodOf returns the index of the DAILY-or-longer period holding wall w
// (0 for walls before DTSTART's period).
func (p *plan) periodOf(w int64) int64 {
	var k int64
	sy, sm, sd := civilFromDays(floorDiv(p.start, secPerDay))
	day := floorDiv(w, secPerDay)
	y, m, _ := civilFromDays(day)
	switch p.freq {
	case yearly:
		k = floorDiv(int64(y-sy), p.interval)
	case monthly:
		k = floorDiv(int64((y-sy)*12+m-sm), p.interval)
	case weekly:
		k = floorDiv(weekStart(day, p.wkst)-weekStart(daysFromCivil(sy, sm, sd), p.wkst), 7*p.interval)
	case daily:
		k = floorDiv(day-floorDiv(p.start, secPerDay), p.interval)
	}
	return max(k, 0)
}

func weekStart(day, wkst int64) int64 { return day - floorMod(day-wkst, 7) }

// period returns the instances of DAILY-or-longer period k, and the wall
// clock at which the period starts; ok is false past the year 9999.
func (c *cursor) period(k int64) (s periodSet, start int64, ok bool) {
	p := c.p
	s.p = p
	c.days = c.days[:0]
	sday, sy, sm := p.sday, p.sy, p.sm
	addYear := func(y int, m0, m1 int) { // months m0..m1 of year y
		yi := c.year(y)
		ms := &monthStart[yi.leap]
		for m := m0; m <= m1; m++ {
			if p.months != 0 && p.months&(1<<m) == 0 {
				c.steps++
				continue
			}
			for doy := ms[m-1]; doy < ms[m]; doy++ {
				c.steps++
				if c.dayOK(doy) {
					c.days = append(c.days, yi.jan1+int64(doy))
				}
			}
		}
	}
	switch p.freq {
	case yearly:
		y := int64(sy) + k*p.interval
		if y > 9999 {
			return s, 0, false
		}
		c.year(int(y))
		if p.nth != nil {
			c.nthMask(0)
		}
		addYear(int(y), 1, 12)
		start = c.yi.jan1 * secPerDay
	case monthly:
		mi := int64(sy)*12 + int64(sm-1) + k*p.interval
		y, m := int(mi/12), int(mi%12)+1
		if y > 9999 {
			return s, 0, false
		}
		c.year(y)
		if p.nth != nil {
			c.nthMask(m)
		}
		addYear(y, m, m)
		start = (c.yi.jan1 + int64(monthStart[c.yi.leap][m-1])) * secPerDay
	case weekly:
		w := weekStart(sday, p.wkst) + k*7*p.interval
		if w*secPerDay > maxWall {
			return s, 0, false
		}
		for d := w; d < w+7 && d*secPerDay <= maxWall; d++ {
			c.steps++
			if c.dayNumberOK(d) {
				c.days = append(c.days, d)
			}
		}
		start = w * secPerDay
	case daily:
		d := sday + k*p.interval
		if d*secPerDay > maxWall {
			return s, 0, false
		}
		c.steps++
		if c.dayNumberOK(d) {
			c.days = append(c.days, d)
		}
		start = d * secPerDay
	}
	s.days = c.days
	s.n = int64(len(c.days)) * p.ntimes()
	if len(p.setpos) > 0 {
		c.sel = c.sel[:0]
		for _, pos := range p.setpos {
			i := int64(pos) - 1
			if pos < 0 {
				i = s.n + int64(pos)
			}
			if i >= 0 && i < s.n {
				c.sel = append(c.sel, s.elem(i))
			}
		}
		slices.Sort(c.sel)
		c.sel = slices.Compact(c.sel)
		s.days, s.sel, s.n = nil, c.sel, int64(len(c.sel))
	}
	if s.days == nil && s.sel == nil {
		s.sel = []int64{}
	}
	return s, start, true
}

// subPeriod examines the HOURLY/MINUTELY/SECONDLY period starting at grid
// point g: ok when it passes the filters, else the wall clock at which the
// next period that could pass starts.
func (c *cursor) subPeriod(g int64) (ok bool, skipTo int64) {
	p := c.p
	day := floorDiv(g, secPerDay)
	if p.hasDayFilter() && !c.dayNumberOK(day) {
		return false, (day + 1) * secPerDay
	}
	sod := g - day*secPerDay
	h, m, s := int(sod/3600), int(sod%3600/60), int(sod%60)
	if p.hourSet != 0 && p.hourSet&(1<<h) == 0 {
		for nh := h + 1; nh < 24; nh++ {
			if p.hourSet&(1<<nh) != 0 {
				return false, day*secPerDay + int64(nh)*3600
			}
		}
		return false, (day + 1) * secPerDay
	}
	hourStart := g - int64(m*60+s)
	if p.minuteSet != 0 && p.minuteSet&(1<<m) == 0 {
		for nm := m + 1; nm < 60; nm++ {
			if p.minuteSet&(1<<nm) != 0 {
				return false, hourStart + int64(nm)*60
			}
		}
		return false, hourStart + 3600
	}
	if p.secondSet != 0 && p.secondSet&(1<<s) == 0 {
		for ns := s + 1; ns < 60; ns++ {
			if p.secondSet&(1<<ns) != 0 {
				return false, g - int64(s) + int64(ns)
			}
		}
		return false, g - int64(s) + 60
	}
	return true, 0
}

// gridAtOrAfter returns the first period start at or after wall x.
func (p *plan) gridAtOrAfter(x int64) int64 {
	return p.grid0 + ceilDiv(x-p.grid0, p.step)*p.step
}

// cycle returns how far the rule's pattern of wall clocks repeats itself:
// in periods for DAILY and longer rules, in seconds for shorter ones (0 when
// too long to matter). The Gregorian calendar repeats every 400 years
// (4,800 months, 20,871 weeks, 146,097 days), and a sub-daily rule's times of
// day every lcm(step, 1 day). A search that finds nothing over a whole cycle
// will never find anything.
func (p *plan) cycle() int64 {
	if p.unit == 0 {
		n := map[freq]int64{yearly: 400, monthly: 4800, weekly: 20871, daily: 146097}[p.freq]
		return n / gcd(p.interval, n)
	}
	n := int64(secPerDay)
	if p.hasDayFilter() {
		n *= 146097
	}
	q := p.step / gcd(p.step, n)
	if q > maxWall/n {
		return 0
	}
	return q * n
}

// searchResult says how a search ended.
type searchResult int

const (
	found     searchResult = iota
	exhausted              // no occurrence: past UNTIL, COUNT or the year 9999
	overLimit              // maxSteps reached
)

// after returns the first instance of the rule (existing or not as a local
// time) with a wall clock above l and at most stop.
func (c *cursor) after(l, stop int64) (int64, searchResult) {
	p := c.p
	cycle := p.cycle()
	if p.unit == 0 {
		k0 := p.periodOf(l + 1)
		for k := k0; ; k++ {
			s, start, ok := c.period(k)
			if !ok || start > stop || k-k0 > cycle {
				return 0, exhausted
			}
			if i := s.rank(l + 1); i < s.n {
				if w := s.elem(i); w <= stop {
					return w, found
				}
				return 0, exhausted
			}
			if c.steps > maxSteps {
				return 0, overLimit
			}
		}
	}
	g := p.grid0
	if l >= g {
		g += floorDiv(l-g, p.step) * p.step
	}
	g0 := g
	for {
		if g > stop || cycle > 0 && g-g0 > cycle+p.step {
			return 0, exhausted
		}
		c.steps++
		if c.steps > maxSteps {
			return 0, overLimit
		}
		ok, skip := c.subPeriod(g)
		if !ok {
			g = p.gridAtOrAfter(skip)
			continue
		}
		off := p.offsets
		if i := sort.Search(len(off), func(i int) bool { return g+off[i] > l }); i < len(off) {
			if w := g + off[i]; w <= stop {
				return w, found
			}
			return 0, exhausted
		}
		g += p.step
	}
}

// place maps wall clock w to an instant in the zone: false when that local
// time does not exist (clocks went forward over it), the earlier instant
// when it exists twice (clocks went back over it).
func (p *plan) place(w int64) (time.Time, bool) {
	y, m, d := civilFromDays(floorDiv(w, secPerDay))
	sod := floorMod(w, secPerDay)
	t := time.Date(y, time.Month(m), d, int(sod/3600), int(sod%3600/60), int(sod%60), 0, p.loc)
	if wallOf(t) != w {
		return time.Time{}, false
	}
	if start, _ := t.ZoneBounds(); !start.IsZero() {
		_, cur := t.Zone()
		if _, prev := start.Add(-time.Second).Zone(); prev > cur {
			u := time.Unix(w-unixEpochWall-int64(prev), 0).In(p.loc)
			if u.Before(start) && wallOf(u) == w {
				return u, true
			}
		}
	}
	return t, true
}

// gapEnd returns the first existing wall clock after w, a local time that
// does not exist.
func (p *plan) gapEnd(w int64) int64 {
	y, m, d := civilFromDays(floorDiv(w, secPerDay))
	sod := floorMod(w, secPerDay)
	t := time.Date(y, time.Month(m), d, int(sod/3600), int(sod%3600/60), int(sod%60), 0, p.loc)
	s, e := t.ZoneBounds()
	for _, tr := range []time.Time{s, e} {
		if tr.IsZero() {
			continue
		}
		before, after := wallOf(tr.Add(-time.Second)), wallOf(tr)
		if before < w && w < after {
			return after
		}
	}
	return w + 1
}

// lowerBound returns the wall clock l such that the occurrences after
// instant t are exactly those with a wall clock above l.
func (p *plan) lowerBound(t time.Time) int64 {
	t = t.In(p.loc)
	l := wallOf(t)
	if s, _ := t.ZoneBounds(); !s.IsZero() {
		// In the second pass of a repeated hour, the walls up to the end
		// of that hour were placed at their first instant, before t.
		_, cur := t.Zone()
		if _, prev := s.Add(-time.Second).Zone(); prev > cur && t.Unix()-s.Unix() < int64(prev-cur) {
			l = max(l, wallOf(s)+int64(prev-cur)-1)
		}
	}
	return l
}

// next returns the first occurrence after instant t.
func (p *plan) next(t time.Time) (time.Time, searchResult) {
	l := max(p.lowerBound(t), p.start-1)
	stop := p.stop()
	c := p.cursor()
	for {
		w, res := c.after(l, stop)
		if res != found {
			return time.Time{}, res
		}
		at, ok := p.place(w)
		if !ok {
			l = p.gapEnd(w) - 1
			continue
		}
		if !p.untilAt.IsZero() && at.After(p.untilAt) {
			return time.Time{}, exhausted
		}
		if !at.After(t) { // cannot happen by lowerBound; keeps the loop honest
			l = w
			continue
		}
		return at, found
	}
}

// gapList lists the local times that do not exist in a zone (spring-forward
// gaps) as wall-clock ranges [from, to), found lazily in increasing order.
type gapList struct {
	loc     *time.Location
	upto    int64     // walls below upto are covered by list
	next    time.Time // instant to continue the scan from
	started bool
	list    [][2]int64
	from    int // gaps before list[from] end at or below the last a asked
}

// in returns the gaps intersecting walls [a, b].
func (g *gapList) in(a, b int64) [][2]int64 {
	if g.loc == time.UTC {
		return nil
	}
	if !g.started {
		g.started = true
		g.next = wallTime(a - 2*secPerDay)
		g.upto = a - secPerDay
	}
	for g.upto <= b {
		e, ok := nextBound(g.next, g.loc)
		if !ok {
			g.upto = maxWall + 1
			break
		}
		before, after := wallOf(e.Add(-time.Second).In(g.loc)), wallOf(e.In(g.loc))
		if after > before+1 {
			g.list = append(g.list, [2]int64{before + 1, after})
		}
		g.upto = min(before+1, after)
		g.next = e
	}
	// Calls come with increasing a (a search only moves forward).
	if g.from > 0 && g.list[g.from-1][1] > a {
		g.from = 0
	}
	for g.from < len(g.list) && g.list[g.from][1] <= a {
		g.from++
	}
	j := g.from
	for j < len(g.list) && g.list[j][0] <= b {
		j++
	}
	return g.list[g.from:j]
}

// perDay returns how many instances a kept day has when the period starts
// fall at the same times every day (the step divides a day), else 0.
func (p *plan) perDay() int64 {
	if p.unit == 0 || secPerDay%p.step != 0 {
		return 0
	}
	phase := floorMod(p.grid0, p.step)
	on := func(t int64) bool { return floorMod(t-phase, p.step) == 0 }
	n := int64(0)
	for h := int64(0); h < 24; h++ {
		if p.hourSet != 0 && p.hourSet&(1<<h) == 0 {
			continue
		}
		if p.unit == 3600 {
			if on(h * 3600) {
				n++
			}
			continue
		}
		for m := int64(0); m < 60; m++ {
			if p.minuteSet != 0 && p.minuteSet&(1<<m) == 0 {
				continue
			}
			if p.unit == 60 {
				if on(h*3600 + m*60) {
					n++
				}
				continue
			}
			for s := int64(0); s < 60; s++ {
				if (p.secondSet == 0 || p.secondSet&(1<<s) != 0) && on(h*3600+m*60+s) {
					n++
				}
			}
		}
	}
	return n * int64(len(p.offsets))
}

// lastOfDay returns the last instance of a kept day of a sub-daily rule.
func (c *cursor) lastOfDay(day int64) int64 {
	p, last := c.p, int64(-1)
	for g := p.gridAtOrAfter(day * secPerDay); g < (day+1)*secPerDay; g += p.step {
		if ok, _ := c.subPeriod(g); ok {
			last = g + p.offsets[len(p.offsets)-1]
		}
	}
	return last
}

// nextBound returns the first instant after t where the zone's offset may
// change: a transition, or a bound Go's ZoneBounds reports at a year's end
// (where the offset stays). false when the offset never changes again.
func nextBound(t time.Time, loc *time.Location) (time.Time, bool) {
	x := t.Add(time.Second).In(loc)
	_, e := x.ZoneBounds()
	if e.IsZero() {
		return e, false
	}
	if e.After(x) {
		return e, true
	}
	// Go 1.26 can report the end of a leap year's last zone period one
	// day early and then keep reporting it: look one day ahead instead,
	// and find the change by bisection if the offset differs there.
	_, off := x.Zone()
	hi := x.Add(24 * time.Hour)
	if _, o := hi.Zone(); o == off {
		return hi, true
	}
	lo := x
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
		if _, o := mid.Zone(); o == off {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, true
}

// findLast walks the rule from DTSTART and returns the wall clock of its
// COUNT-th occurrence that exists as a local time (RFC 5545 §3.3.10: the
// others are not counted), or of its last one when it has fewer; -1 when it
// has none.
func (p *plan) findLast() (int64, searchResult) {
	c := p.cursor()
	left := int64(p.count)
	last := int64(-1)
	// take counts the existing instances of a period from index i0 on and,
	// when the COUNT-th is among them, returns its wall clock.
	take := func(s *periodSet, i0 int64) (int64, bool) {
		if i0 >= s.n {
			return 0, false
		}
		gaps := c.gaps.in(s.bounds(i0))
		missing := int64(0)
		for _, g := range gaps {
			missing += max(s.rank(g[1]), i0) - max(s.rank(g[0]), i0)
		}
		n := s.n - i0 - missing
		if n < left {
			left -= n
			if n > 0 && len(gaps) == 0 {
				last = s.elem(s.n - 1)
			} else if n > 0 {
				idx := s.n - 1
				for _, g := range slices.Backward(gaps) {
					if r0, r1 := max(s.rank(g[0]), i0), max(s.rank(g[1]), i0); idx >= r0 && idx < r1 {
						idx = r0 - 1
					}
				}
				last = s.elem(idx)
			}
			return 0, false
		}
		idx := i0 + left - 1
		for _, g := range gaps {
			r0, r1 := max(s.rank(g[0]), i0), max(s.rank(g[1]), i0)
			if idx >= r0 {
				idx += r1 - r0
			}
		}
		return s.elem(idx), true
	}
	cycle := p.cycle()
	if p.unit == 0 {
		kLast := int64(0) // the last period with an occurrence, or 0
		for k := int64(0); ; k++ {
			s, _, ok := c.period(k)
			if !ok || k-kLast > cycle+1 {
				return last, exhausted
			}
			i0 := int64(0)
			if k == 0 {
				i0 = s.rank(p.start)
			}
			if w, done := take(&s, i0); done {
				return w, found
			}
			if s.n > i0 {
				kLast = k
			}
			if c.steps > maxCountSteps {
				return 0, overLimit
			}
		}
	}
	s := periodSet{p: p}
	gLast := p.grid0
	perDay := p.perDay()
	skipped := int64(-1) // the last day counted whole
	final := func() int64 {
		if skipped >= 0 && last < skipped*secPerDay {
			return c.lastOfDay(skipped)
		}
		return last
	}
	for g := p.grid0; g <= maxWall; {
		if cycle > 0 && g-gLast > cycle+p.step {
			return final(), exhausted
		}
		if day := floorDiv(g, secPerDay); perDay > 0 && perDay < left && g-day*secPerDay < p.step &&
			day*secPerDay > p.start && (day+1)*secPerDay-1 <= maxWall && c.dayNumberOK(day) &&
			len(c.gaps.in(day*secPerDay, (day+1)*secPerDay-1)) == 0 {
			// A whole day with no gap: count it at once.
			c.steps++
			left -= perDay
			skipped, gLast = day, (day+1)*secPerDay-1
			g = p.gridAtOrAfter((day + 1) * secPerDay)
			continue
		}
		c.steps++
		if c.steps > maxCountSteps {
			return 0, overLimit
		}
		ok, skip := c.subPeriod(g)
		if !ok {
			g = p.gridAtOrAfter(skip)
			continue
		}
		s.sel = s.sel[:0]
		for _, off := range p.offsets {
			if w := g + off; w >= p.start && w <= maxWall {
				s.sel = append(s.sel, w)
			}
		}
		s.n = int64(len(s.sel))
		if w, done := take(&s, 0); done {
			return w, found
		}
		if s.n > 0 {
			gLast = g
		}
		g += p.step
	}
	return final(), exhausted
}
