package schedule

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// occurrence is one expected answer: Next(after) == want ("" = none).
type occurrence struct{ after, want string }

// TestIssueCases pins the wrong answers of issue 11, each with exact instants.
func TestIssueCases(t *testing.T) {
	tests := []struct {
		name     string
		schedule string
		checks   []occurrence
	}{
		// 1. DTSTART inside a DST gap: later occurrences keep its wall clock.
		{"1 gap DTSTART Paris", "DTSTART;TZID=Europe/Paris:20240331T023000\nRRULE:FREQ=DAILY", []occurrence{
			{"2024-03-30T00:00:00Z", "2024-04-01T00:30:00Z"}, // 03-31 02:30 does not exist
			{"2024-04-01T00:30:00Z", "2024-04-02T00:30:00Z"},
		}},
		{"1 gap DTSTART New York", "DTSTART;TZID=America/New_York:20240310T023000\nRRULE:FREQ=DAILY", []occurrence{
			{"2024-03-10T00:00:00Z", "2024-03-11T06:30:00Z"},
		}},
		{"1 gap DTSTART Lord Howe (30-minute shift)", "DTSTART;TZID=Australia/Lord_Howe:20241006T021500\nRRULE:FREQ=DAILY", []occurrence{
			{"2024-10-05T00:00:00Z", "2024-10-06T15:15:00Z"}, // 10-07 02:15 +11:00
		}},
		// 2. COUNT does not count local times that do not exist.
		{"2 COUNT skips the gap", "DTSTART;TZID=America/New_York:20240308T023000\nRRULE:FREQ=DAILY;COUNT=5", []occurrence{
			{"2024-03-08T00:00:00Z", "2024-03-08T07:30:00Z"},
			{"2024-03-09T07:30:00Z", "2024-03-11T06:30:00Z"},
			{"2024-03-12T06:30:00Z", "2024-03-13T06:30:00Z"},
			{"2024-03-13T06:30:00Z", ""},
		}},
		{"2 SECONDLY COUNT in a gap", "DTSTART;TZID=Europe/Paris:20300331T020000\nRRULE:FREQ=SECONDLY;COUNT=2", []occurrence{
			{"2030-03-30T00:00:00Z", "2030-03-31T01:00:00Z"},
			{"2030-03-31T01:00:00Z", "2030-03-31T01:00:01Z"},
			{"2030-03-31T01:00:01Z", ""},
		}},
		// 3. Nothing stops 292 years after DTSTART.
		{"3 YEARLY COUNT from 1776", "DTSTART:17760704T120000Z\nRRULE:FREQ=YEARLY;COUNT=1000", []occurrence{
			{"2100-01-01T00:00:00Z", "2100-07-04T12:00:00Z"},
			{"2775-07-04T12:00:00Z", ""},
			{"2775-07-04T11:59:59Z", "2775-07-04T12:00:00Z"},
		}},
		{"3 DAILY from 1400", "DTSTART:14000101T090000Z\nRRULE:FREQ=DAILY", []occurrence{
			{"2024-05-05T10:00:00Z", "2024-05-06T09:00:00Z"},
		}},
		{"3 every 100 years from a Feb 29", "DTSTART:20000229T120000Z\nRRULE:FREQ=YEARLY;INTERVAL=100", []occurrence{
			{"2000-03-01T00:00:00Z", "2400-02-29T12:00:00Z"},
			{"2300-01-01T00:00:00Z", "2400-02-29T12:00:00Z"},
			{"9600-02-29T12:00:00Z", ""}, // 9600 is the last one before 10000
			{"9599-01-01T00:00:00Z", "9600-02-29T12:00:00Z"},
		}},
		// 4. DTSTART in a repeated hour east of UTC.
		{"4 repeated hour Paris", "DTSTART;TZID=Europe/Paris:20241027T023000\nRRULE:FREQ=DAILY;COUNT=1", []occurrence{
			{"2024-10-26T00:00:00Z", "2024-10-27T00:30:00Z"},
			{"2024-10-27T00:30:00Z", ""},
		}},
		// 5. UNTIL with Z is an instant.
		{"5 UNTIL instant", "DTSTART;TZID=Europe/Paris:20241027T000000\nRRULE:FREQ=MINUTELY;INTERVAL=20;UNTIL=20241027T013000Z", []occurrence{
			{"2024-10-27T00:30:00Z", "2024-10-27T00:40:00Z"},
			{"2024-10-27T00:40:00Z", ""},
		}},
		// Found by the long differential run: COUNT walks that counted a
		// whole day and then gave up one day later, and clock changes after
		// 2037 (Go's ZoneBounds stops at the end of leap year 2040).
		{"COUNT after a day counted whole", "DTSTART;TZID=Asia/Kolkata:20210927T170000\nRRULE:FREQ=MINUTELY;BYHOUR=13;INTERVAL=5;COUNT=16", []occurrence{
			{"2021-09-28T10:25:01Z", "2021-09-29T07:30:00Z"},
			{"2021-09-29T07:45:00Z", ""},
		}},
		{"COUNT skipping gaps after 2040", "DTSTART;TZID=America/New_York:20240310T023000\nRRULE:FREQ=YEARLY;INTERVAL=5;COUNT=37", []occurrence{
			{"2214-03-10T06:30:00Z", "2214-03-10T07:30:00Z"},
		}},
		{"COUNT skipping gaps after 2040, monthly", "DTSTART;TZID=Europe/Paris:20241027T023000\nRRULE:FREQ=MONTHLY;BYMONTH=3;COUNT=36", []occurrence{
			{"2063-02-05T15:00:00Z", "2063-03-27T00:30:00Z"},
		}},
		// 6. Go's zero time as DTSTART is refused (TestParseErrors); the
		// second after it is the year 1, not now.
		{"6 DTSTART year 1", "DTSTART:00010101T000001Z\nRRULE:FREQ=MONTHLY", []occurrence{
			{"2024-05-15T00:00:00Z", "2024-06-01T00:00:01Z"},
			{"0000-12-31T00:00:00Z", "0001-01-01T00:00:01Z"},
		}},
	}
	for _, tt := range tests {
		s, err := Parse(tt.schedule, time.Time{})
		if err != nil {
			t.Errorf("%s: Parse: %v", tt.name, err)
			continue
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%s: Validate: %v", tt.name, err)
		}
		for _, c := range tt.checks {
			var want time.Time
			if c.want != "" {
				want = utc(c.want)
			}
			if got := s.Next(utc(c.after)); !got.Equal(want) {
				t.Errorf("%s: Next(%s) = %v; want %v", tt.name, c.after, got.UTC(), want)
			}
		}
	}
}

// pathological lists the rules issue 11 measured as hanging or eating
// memory; each must be refused or answered within the step limit.
var pathological = []struct {
	name, schedule string
	refused        string // substring of the Parse or Validate error; "" = accepted
}{
	{"BYSETPOS never matches, MINUTELY", "DTSTART:20240101T000000Z\nRRULE:FREQ=MINUTELY;BYSECOND=0;BYSETPOS=2", "BYSETPOS=2 never matches: every minute period has 1"},
	{"BYSETPOS never matches, SECONDLY", "DTSTART:20240101T000000Z\nRRULE:FREQ=SECONDLY;BYSECOND=0;BYSETPOS=2;COUNT=3", "BYSETPOS=2 never matches"},
	{"BYSETPOS never matches, HOURLY", "DTSTART:20240101T000000Z\nRRULE:FREQ=HOURLY;BYMINUTE=0;BYSETPOS=2;UNTIL=20250101T000000Z", "BYSETPOS=2 never matches"},
	{"every second of the year", "DTSTART:20240101T000000Z\nRRULE:FREQ=YEARLY;BYMONTH=" + seq(1, 12) + ";BYMONTHDAY=" + seq(1, 31) +
		";BYHOUR=" + seq(0, 23) + ";BYMINUTE=" + seq(0, 59) + ";BYSECOND=" + seq(0, 59), ""},
	{"every second of the year, COUNT", "DTSTART:20240101T000000Z\nRRULE:FREQ=YEARLY;COUNT=1000000;BYMONTH=" + seq(1, 12) + ";BYMONTHDAY=" + seq(1, 31) +
		";BYHOUR=" + seq(0, 23) + ";BYMINUTE=" + seq(0, 59) + ";BYSECOND=" + seq(0, 59), ""},
	{"BYSECOND=0 5000 times", "DTSTART:20240101T000000Z\nRRULE:FREQ=MINUTELY;BYSECOND=0" + strings.Repeat(",0", 4999), "at most 4096 are accepted (limit 1)"},
	{"BYSECOND=0 100 times", "DTSTART:20240101T000000Z\nRRULE:FREQ=MINUTELY;BYSECOND=0" + strings.Repeat(",0", 99), "BYSECOND lists 0 more than once"},
	{"SECONDLY from 1700", "DTSTART:17000101T000000Z\nRRULE:FREQ=SECONDLY", ""},
	{"MINUTELY COUNT=1000000", "DTSTART:20000101T000000Z\nRRULE:FREQ=MINUTELY;COUNT=1000000", ""},
	{"DAILY COUNT=1000000", "DTSTART:20000101T000000Z\nRRULE:FREQ=DAILY;COUNT=1000000", "COUNT=1000000 is too large to evaluate cheaply"},
	{"MINUTELY COUNT=100000", "DTSTART:20000101T000000Z\nRRULE:FREQ=MINUTELY;COUNT=100000", ""},
	{"MONTHLY BYSETPOS never matches", "DTSTART:20240101T000000Z\nRRULE:FREQ=MONTHLY;BYMONTHDAY=31;BYDAY=MO;BYSETPOS=2", "BYSETPOS=2 never matches"},
	{"MONTHLY BYSETPOS beyond the weekdays", "DTSTART:20240101T000000Z\nRRULE:FREQ=MONTHLY;BYDAY=MO,TU;BYSETPOS=11", "BYSETPOS=11 never matches"},
	{"MONTHLY BYSETPOS matching no month", "DTSTART:20240101T000000Z\nRRULE:FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR,SA;BYMONTHDAY=1,2,3,4,5,6,7;BYSETPOS=7", "never fire"},
	{"drifting sub-daily steps with day filters", "DTSTART:20240101T000000Z\nRRULE:FREQ=SECONDLY;INTERVAL=999983;BYMONTH=2;BYMONTHDAY=29", "limit 4"},
	{"prime SECONDLY interval, one second a day", "DTSTART:20240101T000001Z\nRRULE:FREQ=SECONDLY;INTERVAL=999983;BYHOUR=3;BYMINUTE=0;BYSECOND=0", ""},
	{"Feb 29 every second", "DTSTART:20240301T000000Z\nRRULE:FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=29", ""},
	{"Feb 30", "DTSTART:20240301T000000Z\nRRULE:FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30", "never fire"},
}

func seq(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		if i > from {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, i)
	}
	return b.String()
}

// TestPathologicalRules checks that every rule issue 11 measured as slow is
// refused with a message naming why, or evaluates within the step limit
// (the speed itself is measured by BenchmarkPathological).
func TestPathologicalRules(t *testing.T) {
	now := utc("2024-07-01T12:00:00Z")
	for _, tt := range pathological {
		s, err := Parse(tt.schedule, time.Time{})
		if err == nil {
			err = s.Validate()
		}
		if tt.refused != "" {
			if err == nil || !strings.Contains(err.Error(), tt.refused) || !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: error = %v; want ErrInvalid containing %q", tt.name, err, tt.refused)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if _, res := s.p.next(now); res == overLimit {
			t.Errorf("%s: Next over the step limit", tt.name)
		}
	}
}

// TestPathologicalAnswers pins the answers of some of the rules above.
func TestPathologicalAnswers(t *testing.T) {
	all := MustParse("DTSTART:20240101T000000Z\nRRULE:FREQ=YEARLY;BYMONTH=" + seq(1, 12) + ";BYMONTHDAY=" + seq(1, 31) +
		";BYHOUR=" + seq(0, 23) + ";BYMINUTE=" + seq(0, 59) + ";BYSECOND=" + seq(0, 59) + ";COUNT=1000000")
	for _, c := range []occurrence{
		{"2024-07-01T12:00:00Z", ""},                     // COUNT ended in January
		{"2024-01-12T13:46:38Z", "2024-01-12T13:46:39Z"}, // the millionth
		{"2024-01-12T13:46:39Z", ""},
	} {
		want := time.Time{}
		if c.want != "" {
			want = utc(c.want)
		}
		if got := all.Next(utc(c.after)); !got.Equal(want) {
			t.Errorf("every second, COUNT=1000000: Next(%s) = %v; want %v", c.after, got, want)
		}
	}
	for _, tt := range []struct {
		schedule string
		checks   []occurrence
	}{
		{"DTSTART:17000101T000000Z\nRRULE:FREQ=SECONDLY", []occurrence{{"2024-07-01T12:00:00.5Z", "2024-07-01T12:00:01Z"}}},
		{"DTSTART:20240301T000000Z\nRRULE:FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=29", []occurrence{{"2024-07-01T12:00:00Z", "2028-02-29T00:00:00Z"}, {"2096-03-01T00:00:00Z", "2104-02-29T00:00:00Z"}}},
		{"DTSTART:20000101T000000Z\nRRULE:FREQ=MINUTELY;COUNT=100000", []occurrence{{"2000-03-10T10:38:00Z", "2000-03-10T10:39:00Z"}, {"2000-03-10T10:39:00Z", ""}}},
		{"DTSTART:20000101T000000Z\nRRULE:FREQ=MINUTELY;COUNT=1000000", []occurrence{{"2001-11-25T10:38:00Z", "2001-11-25T10:39:00Z"}, {"2001-11-25T10:39:00Z", ""}}},
		{"DTSTART;TZID=Europe/Paris:20000101T000000\nRRULE:FREQ=MINUTELY;COUNT=1000000", []occurrence{{"2001-11-25T11:38:00Z", "2001-11-25T11:39:00Z"}, {"2001-11-25T11:39:00Z", ""}}},
		{"DTSTART:20240101T000001Z\nRRULE:FREQ=SECONDLY;INTERVAL=86399;BYHOUR=3;BYMINUTE=0;BYSECOND=0", []occurrence{{"2024-01-01T00:00:00Z", "2230-12-27T03:00:00Z"}}}, // 1 s earlier each day
		{"DTSTART:20240101T000001Z\nRRULE:FREQ=SECONDLY;INTERVAL=999983;BYHOUR=3;BYMINUTE=0;BYSECOND=0", []occurrence{{"2024-07-01T12:00:00Z", "2668-12-13T03:00:00Z"}}},
	} {
		s := MustParse(tt.schedule)
		for _, c := range tt.checks {
			want := time.Time{}
			if c.want != "" {
				want = utc(c.want)
			}
			if got := s.Next(utc(c.after)); !got.Equal(want) {
				t.Errorf("%q: Next(%s) = %v; want %v", tt.schedule, c.after, got, want)
			}
		}
	}
}

// BenchmarkPathological measures Parse+Validate and Next on every rule of
// issue 11 that is accepted.
func BenchmarkPathological(b *testing.B) {
	now := utc("2024-07-01T12:00:00Z")
	for _, tt := range pathological {
		b.Run(strings.ReplaceAll(tt.name, " ", "_"), func(b *testing.B) {
			for b.Loop() {
				s, err := Parse(tt.schedule, time.Time{})
				if err == nil {
					err = s.Validate()
				}
				if err == nil {
					s.Next(now)
				}
			}
		})
	}
}

// BenchmarkNextPathological measures Next alone on the accepted ones.
func BenchmarkNextPathological(b *testing.B) {
	now := utc("2024-07-01T12:00:00Z")
	for _, tt := range pathological {
		if tt.refused != "" {
			continue
		}
		s := MustParse(tt.schedule)
		b.Run(strings.ReplaceAll(tt.name, " ", "_"), func(b *testing.B) {
			for b.Loop() {
				s.Next(now)
			}
		})
	}
}

// TestRFC5545Examples walks the examples of RFC 5545 §3.8.5.3 listed in
// testdata/rfc5545_examples.txt and checks every listed occurrence, in order,
// and the end of the finite ones.
func TestRFC5545Examples(t *testing.T) {
	data, err := os.ReadFile("testdata/rfc5545_examples.txt")
	if err != nil {
		t.Fatal(err)
	}
	type example struct {
		title, text string
		walls       []string
		end         bool
	}
	var all []*example
	var cur *example
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "# ") && (cur == nil || cur.text != ""):
			cur = &example{title: line[2:]}
			all = append(all, cur)
		case cur == nil || strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "":
		case strings.HasPrefix(line, "= "):
			for _, tok := range strings.Fields(line[2:]) {
				if tok == "end" {
					cur.end = true
					continue
				}
				if a, b, ok := strings.Cut(tok, "-"); ok {
					from, _ := strconv.Atoi(a[6:])
					to, _ := strconv.Atoi(b)
					for d := from; d <= to; d++ {
						cur.walls = append(cur.walls, fmt.Sprintf("%s%02d", a[:6], d))
					}
					continue
				}
				cur.walls = append(cur.walls, tok)
			}
		default:
			cur.text += line + "\n"
		}
	}
	if len(all) < 40 {
		t.Fatalf("read %d examples", len(all))
	}
	for _, ex := range all {
		s, err := Parse(ex.text, time.Time{})
		if err == nil {
			err = s.Validate()
		}
		if err != nil {
			t.Errorf("%s: %v", ex.title, err)
			continue
		}
		tod := s.Start().In(s.Location()).Format("T150405")
		at := s.Start().Add(-time.Second)
		for i, w := range ex.walls {
			if len(w) == 8 {
				w += tod
			}
			want, err := time.ParseInLocation("20060102T150405", w, s.Location())
			if err != nil {
				t.Fatalf("%s: %v", ex.title, err)
			}
			if at = s.Next(at); !at.Equal(want) {
				t.Errorf("%s: occurrence %d = %v; RFC lists %v", ex.title, i+1, at, want)
				break
			}
		}
		if ex.end {
			if next := s.Next(at); !next.IsZero() {
				t.Errorf("%s: occurrence after the last listed: %v", ex.title, next)
			}
		}
	}
}
