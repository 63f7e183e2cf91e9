package schedule

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/teambition/rrule-go"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// parseErrorTests are schedules Parse refuses, with a substring of each error.
var parseErrorTests = []struct {
	text string
	want string // substring of the error
}{
	{"RRULE:FREQ=DAILY", "missing DTSTART"},
	{"DTSTART:20240101T000000Z", "missing RRULE"},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY\nRRULE:FREQ=HOURLY", "more than one RRULE"},
	{"DTSTART:20240101T000000Z\nEXRULE:FREQ=DAILY\nRRULE:FREQ=DAILY", `unsupported line "EXRULE`},
	{"DTSTART:20240101T000000Z\nRRULE:INTERVAL=2", "no FREQ"},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=FORTNIGHTLY", "FREQ=FORTNIGHTLY: expected one of"},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;BYHOUR=25", `BYHOUR value "25": expected 0 to 23`},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;BYMINUTE=x", `BYMINUTE value "X"`},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;COUNT=3;UNTIL=20250101T000000Z", "both COUNT and UNTIL"},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;INTERVAL=0", "INTERVAL=0: expected a whole number from 1"},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;FREQ=HOURLY", "given twice"},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;COLOR=RED", "unknown RRULE key COLOR"},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;BYDAY=XX", `BYDAY value "XX"`},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=WEEKLY;BYDAY=2MO", "needs FREQ=MONTHLY or YEARLY"},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;BYWEEKNO=3", "BYWEEKNO is only allowed"},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;BYSETPOS=1", "BYSETPOS needs another"},
	{"DTSTART;TZID=Mars/Olympus:20240101T000000\nRRULE:FREQ=DAILY", `unknown TZID "Mars/Olympus"`},
	{"DTSTART:2024-01-01\nRRULE:FREQ=DAILY", "DTSTART value"},
	{"DTSTART:00010101T000000Z\nRRULE:FREQ=MONTHLY", "DTSTART must be after 0001-01-01T00:00:00Z"},
	{"DTSTART;TZID=Asia/Tokyo:00010101T080000\nRRULE:FREQ=MONTHLY", "DTSTART must be after"},
	{"DTSTART:00000101T000000Z\nRRULE:FREQ=MONTHLY", "the year must be 0001 to 9999"},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;UNTIL=tomorrow", "UNTIL=TOMORROW"},
	// The library would loop forever on these (docs/design.md, "Library traps we guard").
	{"DTSTART:20240101T170000Z\nRRULE:FREQ=HOURLY;INTERVAL=2;BYHOUR=2", "can never fire"},
	{"DTSTART:20240101T170100Z\nRRULE:FREQ=MINUTELY;INTERVAL=2;BYMINUTE=0,30", "can never fire"},
	{"DTSTART:20240101T170001Z\nRRULE:FREQ=SECONDLY;INTERVAL=10;BYSECOND=0,30", "can never fire"},
	{"DTSTART:20240101T170000Z\nRRULE:FREQ=HOURLY;INTERVAL=24;BYHOUR=16", "can never fire"},
	{"DTSTART:20240101T0600\nRRULE:FREQ=DAILY", "expected YYYYMMDDTHHMMSS, with a trailing Z for UTC (e.g. 20240101T060000 or 20240101T060000Z)"},
	{"DTSTART:20241301T060000Z\nRRULE:FREQ=DAILY", "expected YYYYMMDDTHHMMSS"},
	{"DTSTART;TZID=Europe/Paris:20240101T250000\nRRULE:FREQ=DAILY", "expected YYYYMMDDTHHMMSS"},
	{"DTSTART;VALUE=DATE:20240101T060000\nRRULE:FREQ=DAILY", "expected YYYYMMDD with VALUE=DATE (e.g. 20240101)"},
	{"DTSTART;VALUE=TIME:20240101T060000\nRRULE:FREQ=DAILY", "expected DATE or DATE-TIME"},
	{"DTSTART;TZID=Europe/Paris:20240101T060000Z\nRRULE:FREQ=DAILY", "both TZID and a trailing Z"},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;UNTIL=2025-01-01", "expected YYYYMMDDTHHMMSSZ or YYYYMMDD"},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;UNTIL=20250101T0000", "expected YYYYMMDDTHHMMSSZ or YYYYMMDD"},
}

func TestParseErrors(t *testing.T) {
	for _, tt := range parseErrorTests {
		_, err := Parse(tt.text, time.Time{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) error = %v; want it to contain %q", tt.text, err, tt.want)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) error %v does not wrap ErrInvalid", tt.text, err)
		}
	}
}

// goLayout matches pieces of Go's reference time (Mon Jan 2 15:04:05 MST
// 2006) as time layouts write them: an error that shows one shows the user
// Go's layout instead of the format expected.
var goLayout = []string{"150405", "15:04", "2006", "01/02", "0102T", "Jan 2"}

// Every refusal, of Parse and of Validate, names the expected format in
// the user's terms (YYYYMMDDTHHMMSS), never in Go's layout digits.
func TestErrorsShowNoGoLayout(t *testing.T) {
	var msgs []string
	for _, tt := range parseErrorTests {
		if _, err := Parse(tt.text, time.Time{}); err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	for _, text := range []string{
		"DTSTART:20240101T000000Z\nRRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30",
		"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;BYMONTH=4;BYMONTHDAY=31",
	} {
		if err := MustParse(text).Validate(); err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) < len(parseErrorTests) {
		t.Fatalf("%d errors from %d refused schedules", len(msgs), len(parseErrorTests)+2)
	}
	for _, m := range msgs {
		for _, g := range goLayout {
			if strings.Contains(m, g) {
				t.Errorf("error %q shows Go's layout (%q)", m, g)
			}
		}
	}
}

func TestParseAccepts(t *testing.T) {
	save := utc("2024-05-06T07:08:09.5Z")
	tests := []struct {
		text, canonical string
	}{
		{"RRULE:FREQ=DAILY", "DTSTART:20240506T070809Z\nRRULE:FREQ=DAILY"},
		{`DTSTART:20240101T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16`, "DTSTART:20240101T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16"},
		{"dtstart:20240101T060000z\r\nrrule:freq=daily;byhour=6,16\r\n", "DTSTART:20240101T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16"},
		{"DTSTART;TZID=Europe/Paris:20240101T060000\nRRULE:FREQ=WEEKLY;BYDAY=MO,FR", "DTSTART;TZID=Europe/Paris:20240101T060000\nRRULE:FREQ=WEEKLY;BYDAY=MO,FR"},
		{"DTSTART;VALUE=DATE:20240101\nRRULE:FREQ=MONTHLY", "DTSTART:20240101T000000Z\nRRULE:FREQ=MONTHLY"},
		{"DTSTART:20240101T170000Z\nRRULE:FREQ=HOURLY;INTERVAL=2;BYHOUR=3", "DTSTART:20240101T170000Z\nRRULE:FREQ=HOURLY;INTERVAL=2;BYHOUR=3"},
	}
	for _, tt := range tests {
		s, err := Parse(tt.text, save)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.text, err)
			continue
		}
		if got := s.String(); got != tt.canonical {
			t.Errorf("Parse(%q).String() = %q; want %q", tt.text, got, tt.canonical)
		}
		again, err := Parse(s.String(), time.Time{})
		if err != nil || again.String() != s.String() {
			t.Errorf("reparse of %q = %v, %v", s.String(), again, err)
		}
	}
	if s, err := Parse("  ", save); s != nil || err != nil {
		t.Errorf("Parse(blank) = %v, %v; want nil, nil", s, err)
	}
}

func TestNext(t *testing.T) {
	twiceADay := "DTSTART:20240101T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16"
	tests := []struct {
		schedule string
		after    string
		want     string // "" means no occurrence
	}{
		{twiceADay, "2024-03-01T05:59:59Z", "2024-03-01T06:00:00Z"},
		{twiceADay, "2024-03-01T06:00:00Z", "2024-03-01T16:00:00Z"}, // strictly after
		{twiceADay, "2024-03-01T06:00:00.5Z", "2024-03-01T16:00:00Z"},
		{twiceADay, "2024-03-01T16:00:01Z", "2024-03-02T06:00:00Z"},
		{twiceADay, "2023-06-01T00:00:00Z", "2024-01-01T06:00:00Z"}, // before DTSTART
		{"DTSTART:20240101T000000Z\nRRULE:FREQ=MINUTELY;INTERVAL=30", "2024-07-04T10:15:00Z", "2024-07-04T10:30:00Z"},
		{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;COUNT=3", "2024-01-02T12:00:00Z", "2024-01-03T00:00:00Z"},
		{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;COUNT=3", "2024-01-03T00:00:00Z", ""},
		{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;UNTIL=20240105T000000Z", "2024-01-05T00:00:00Z", ""},
		{"DTSTART:20240131T090000Z\nRRULE:FREQ=MONTHLY", "2024-02-01T00:00:00Z", "2024-03-31T09:00:00Z"},
		{"DTSTART:20240101T170000Z\nRRULE:FREQ=HOURLY;INTERVAL=2;BYHOUR=3", "2024-06-01T04:00:00Z", "2024-06-02T03:00:00Z"},
		{"DTSTART:20240101T060000Z\nRRULE:FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,FR", "2024-01-06T00:00:00Z", "2024-01-15T06:00:00Z"},
		{"DTSTART:20240229T120000Z\nRRULE:FREQ=YEARLY", "2024-03-01T00:00:00Z", "2028-02-29T12:00:00Z"},
	}
	for _, tt := range tests {
		s := MustParse(tt.schedule)
		got := s.Next(utc(tt.after))
		var want time.Time
		if tt.want != "" {
			want = utc(tt.want)
		}
		if !got.Equal(want) {
			t.Errorf("%q: Next(%s) = %v; want %v", tt.schedule, tt.after, got, want)
		}
	}
	var empty *Schedule
	if got := empty.Next(utc("2024-01-01T00:00:00Z")); !got.IsZero() {
		t.Errorf("empty schedule Next = %v; want zero", got)
	}
}

func TestValidateRefusesRulesWithoutOccurrence(t *testing.T) {
	for _, text := range []string{
		"DTSTART:20240101T000000Z\nRRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30",
		"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;BYMONTH=4;BYMONTHDAY=31",
	} {
		s := MustParse(text)
		if err := s.Validate(); err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%q) = %v; want ErrInvalid", text, err)
		}
	}
	if err := MustParse("DTSTART:20240101T000000Z\nRRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29").Validate(); err != nil {
		t.Errorf("Feb 29 is possible in leap years: %v", err)
	}
}

// TestDST pins the RFC 5545 rule the package documents: non-existent local
// times are skipped, ambiguous ones take their first instant.
func TestDST(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	at := func(y int, m time.Month, d, h, min int) time.Time { return time.Date(y, m, d, h, min, 0, 0, ny) }

	daily0230 := MustParse("DTSTART;TZID=America/New_York:20240101T023000\nRRULE:FREQ=DAILY")
	// 2024-03-10 02:30 does not exist in New York: the occurrence is skipped.
	if got, want := daily0230.Next(at(2024, 3, 9, 3, 0)), utc("2024-03-11T06:30:00Z"); !got.Equal(want) {
		t.Errorf("spring forward: Next = %v; want %v (Mar 11 02:30 EDT)", got, want)
	}
	if got, want := daily0230.Next(at(2024, 3, 8, 3, 0)), utc("2024-03-09T07:30:00Z"); !got.Equal(want) {
		t.Errorf("day before: Next = %v; want %v", got, want)
	}

	daily0130 := MustParse("DTSTART;TZID=America/New_York:20240101T013000\nRRULE:FREQ=DAILY")
	// 2024-11-03 01:30 happens twice: the first (EDT, 05:30Z) is the occurrence.
	if got, want := daily0130.Next(at(2024, 11, 2, 12, 0)), utc("2024-11-03T05:30:00Z"); !got.Equal(want) {
		t.Errorf("fall back: Next = %v; want %v (first 01:30)", got, want)
	}
	if got, want := daily0130.Next(utc("2024-11-03T05:30:00Z")), utc("2024-11-04T06:30:00Z"); !got.Equal(want) {
		t.Errorf("fall back: after first 01:30 Next = %v; want %v (no second 01:30)", got, want)
	}

	// HOURLY fires once per wall-clock hour: no duplicate in the repeated hour,
	// nothing at the skipped 02:00.
	hourly := MustParse("DTSTART;TZID=America/New_York:20240101T000000\nRRULE:FREQ=HOURLY")
	var got []string
	for t0 := utc("2024-11-03T03:00:00Z"); len(got) < 4; {
		t0 = hourly.Next(t0)
		got = append(got, t0.In(ny).Format("15:04 MST"))
	}
	if want := "00:00 EDT,01:00 EDT,02:00 EST,03:00 EST"; strings.Join(got, ",") != want {
		t.Errorf("hourly over fall back = %v; want %v", got, want)
	}
	got = nil
	for t0 := utc("2024-03-10T04:00:00Z"); len(got) < 3; {
		t0 = hourly.Next(t0)
		got = append(got, t0.In(ny).Format("15:04 MST"))
	}
	if want := "00:00 EST,01:00 EST,03:00 EDT"; strings.Join(got, ",") != want {
		t.Errorf("hourly over spring forward = %v; want %v", got, want)
	}
	// After an instant in the second 01:xx, the next hourly is 02:00 EST.
	if got, want := hourly.Next(utc("2024-11-03T06:30:00Z")), utc("2024-11-03T07:00:00Z"); !got.Equal(want) {
		t.Errorf("from second 01:30: Next = %v; want %v", got, want)
	}
}

// TestRebaseMatchesLibrary checks that rebasing never changes an answer: for
// many rules and random instants, Next equals the library iterated from the
// original DTSTART.
func TestRebaseMatchesLibrary(t *testing.T) {
	// span bounds the random query instants: the reference iterates from
	// DTSTART, which is exactly the cost the package avoids.
	day, year := 24*time.Hour, 365*24*time.Hour
	rules := []struct {
		rule string
		span time.Duration
	}{
		{"FREQ=SECONDLY;INTERVAL=7", day},
		{"FREQ=SECONDLY;INTERVAL=90;BYMINUTE=0,1,2", 10 * day},
		{"FREQ=MINUTELY;INTERVAL=7", 30 * day},
		{"FREQ=MINUTELY;INTERVAL=45;BYHOUR=1,13", 60 * day},
		{"FREQ=HOURLY;INTERVAL=5", year},
		{"FREQ=HOURLY;INTERVAL=3;BYMINUTE=10,50;BYDAY=MO,WE", year},
		{"FREQ=DAILY;INTERVAL=3;BYHOUR=6,16", 6 * year},
		{"FREQ=DAILY;BYMONTH=2,3;BYSECOND=5", 6 * year},
		{"FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,FR", 6 * year},
		{"FREQ=WEEKLY;INTERVAL=3;WKST=SU;BYDAY=SU,SA;BYHOUR=9", 6 * year},
		{"FREQ=WEEKLY", 6 * year},
		{"FREQ=MONTHLY;INTERVAL=2;BYDAY=-1FR", 6 * year},
		{"FREQ=MONTHLY;BYMONTHDAY=31", 6 * year},
		{"FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1", 6 * year},
		{"FREQ=MONTHLY", 6 * year},
		{"FREQ=YEARLY;BYWEEKNO=1,52,53;BYDAY=MO", 6 * year},
		{"FREQ=YEARLY;INTERVAL=2;BYYEARDAY=1,-1", 6 * year},
		{"FREQ=YEARLY", 6 * year},
		{"FREQ=DAILY;UNTIL=20270101T000000Z", 8 * year},
	}
	starts := []string{"20200101T101112", "20211231T235959", "20230315T000000"}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, r := range rules {
		for _, start := range starts {
			text := "DTSTART:" + start + "Z\nRRULE:" + r.rule
			s := MustParse(text)
			opt, err := rrule.StrToROption(r.rule)
			if err != nil {
				t.Fatal(err)
			}
			opt.Dtstart = s.Start()
			ref, err := rrule.NewRRule(*opt)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 30; i++ {
				q := s.Start().Add(time.Duration(rng.Int64N(int64(r.span))))
				if i%3 == 0 {
					q = q.Truncate(time.Hour) // land on period boundaries too
				}
				want := ref.After(q, false)
				if got := s.Next(q); !got.Equal(want) {
					t.Fatalf("%q: Next(%v) = %v; library from DTSTART says %v", text, q, got, want)
				}
			}
		}
	}
}

func TestConcurrentNext(t *testing.T) {
	s := MustParse("DTSTART;TZID=Europe/Paris:20200101T000000\nRRULE:FREQ=MINUTELY;INTERVAL=5")
	var wg sync.WaitGroup
	base := utc("2024-03-31T00:00:00Z")
	want := s.Next(base)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if got := s.Next(base); !got.Equal(want) {
					t.Errorf("concurrent Next = %v; want %v", got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkNextOldMinutely is the rrule-go cost trap of docs/design.md ("Library traps we guard"): a MINUTELY rule whose
// DTSTART is ten years old (the library alone takes about a second per call).
func BenchmarkNextOldMinutely(b *testing.B) {
	now := utc("2026-11-21T10:00:30Z")
	s := MustParse(fmt.Sprintf("DTSTART:%s\nRRULE:FREQ=MINUTELY", now.AddDate(-10, 0, 0).Format("20060102T150405Z")))
	b.ReportAllocs()
	for b.Loop() {
		if s.Next(now).IsZero() {
			b.Fatal("no occurrence")
		}
	}
}

// BenchmarkNextTwiceADayZone is a typical record: a zoned daily rule.
func BenchmarkNextTwiceADayZone(b *testing.B) {
	now := utc("2026-11-21T10:00:30Z")
	s := MustParse("DTSTART;TZID=Europe/Berlin:20160101T060000\nRRULE:FREQ=DAILY;BYHOUR=6,16")
	b.ReportAllocs()
	for b.Loop() {
		if s.Next(now).IsZero() {
			b.Fatal("no occurrence")
		}
	}
}

func BenchmarkParse(b *testing.B) {
	for b.Loop() {
		if _, err := Parse("DTSTART;TZID=Europe/Berlin:20160101T060000\nRRULE:FREQ=DAILY;BYHOUR=6,16", time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}

// fuzzBudget is the fuzz oracle's limit on one Parse, Validate or Next call:
// every search is bounded by construction, so a slower call is a bug. The
// fuzzing build's coverage counters slow the code several times, so the
// budget grows to 4 times the designed worst case (a COUNT walk refused at
// limit 3) measured in the running build.
func fuzzBudget() time.Duration {
	worst := time.Duration(1<<63 - 1)
	for range 3 {
		start := time.Now()
		if _, err := Parse("DTSTART:20000101T000000Z\nRRULE:FREQ=DAILY;COUNT=1000000", time.Time{}); err == nil {
			panic("the designed worst case is no longer refused")
		}
		worst = min(worst, time.Since(start))
	}
	return max(50*time.Millisecond, 4*worst)
}

// FuzzParse checks that any text either is refused with ErrInvalid or parses
// into a schedule whose canonical text parses back to itself, and that no
// Parse, Validate or Next call panics or takes longer than fuzzBudget.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"DTSTART:20240101T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16",
		"DTSTART;TZID=America/New_York:20240101T023000\nRRULE:FREQ=HOURLY;INTERVAL=5;BYHOUR=1,3",
		"DTSTART:20240101T170000Z\nRRULE:FREQ=HOURLY;INTERVAL=2;BYHOUR=2",
		"DTSTART:20240101T170001Z\nRRULE:FREQ=SECONDLY;INTERVAL=10;BYSECOND=0,30;BYMINUTE=5",
		"RRULE:FREQ=MINUTELY;INTERVAL=7;BYMINUTE=0,13;COUNT=4",
		"DTSTART;VALUE=DATE:20240101\r\nRRULE:FREQ=MONTHLY;BYDAY=-1FR;UNTIL=20250101",
		"DTSTART;TZID=Australia/Lord_Howe:20241006T021500\nRRULE:FREQ=MINUTELY;COUNT=90;BYSETPOS=1,-1;BYSECOND=0,30",
		"DTSTART:17000101T000000Z\nRRULE:FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=29;BYHOUR=3",
		"DTSTART:20000101T000000Z\nRRULE:FREQ=YEARLY;BYWEEKNO=53,-1;BYDAY=SU;WKST=SA;BYSETPOS=-1",
		"DTSTART:20000101T000000Z\nRRULE:FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR,SA;BYMONTHDAY=1,2,3,4,5,6,7;BYSETPOS=7",
		"DTSTART:20000101T000000Z\nRRULE:FREQ=DAILY;COUNT=1000000",
	} {
		f.Add(s)
	}
	for _, p := range pathological {
		f.Add(p.schedule)
	}
	save := utc("2024-05-06T07:08:09Z")
	budget := fuzzBudget()
	// timed fails when call takes longer than fuzzBudget three times in a
	// row: on a loaded machine a single call can lose its CPU for a while.
	timed := func(t *testing.T, what string, call func()) {
		t.Helper()
		best := time.Duration(1<<63 - 1)
		for range 3 {
			start := time.Now()
			call()
			if best = min(best, time.Since(start)); best <= budget {
				return
			}
		}
		t.Fatalf("%s took %v (budget %v)", what, best, budget)
	}
	f.Fuzz(func(t *testing.T, text string) {
		var s *Schedule
		var err error
		timed(t, "Parse", func() { s, err = Parse(text, save) })
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if s == nil {
			return
		}
		again, err := Parse(s.String(), time.Time{})
		if err != nil || again.String() != s.String() {
			t.Fatalf("canonical %q does not parse back: %v", s.String(), err)
		}
		timed(t, "Validate", func() { err = s.Validate() })
		for _, at := range []time.Time{s.Start().Add(-time.Second), s.Start().Add(90 * 24 * time.Hour), save, save.AddDate(300, 0, 0)} {
			timed(t, "Next", func() { s.Next(at) })
		}
	})
}
