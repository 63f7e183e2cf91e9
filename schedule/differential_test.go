package schedule

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The differential test compares Next with python-dateutil's rrule, run by
// testdata/dateutil_oracle.py under /usr/bin/python3 (Debian's
// python3-dateutil; scripts/example-deps.sh installs it). One Python process
// answers every rule of a run. The oracle applies the package's deliberate
// differences from dateutil (its doc lists them: local times that do not
// exist are skipped and not counted; WEEKLY BYSETPOS selects within the
// week from WKST); the generator leaves out what dateutil reads otherwise
// on purpose:
//
//   - BYDAY mixing plain and numbered days (MO,1TU): RFC 5545 means either
//     (all Mondays and the first Tuesday), dateutil keeps days that are
//     both; TestBydayMixIsUnion pins ours.
//   - Rules refused by the package's limits or by Validate: dateutil would
//     iterate them to the year 9999 (or for ever); they are counted, not
//     compared.
//
// SCHEDULE_DIFF=long runs the long form (make schedule-diff);
// SCHEDULE_DIFF_SEED=n changes the rules.

const pythonPath = "/usr/bin/python3"

type oracleRequest struct {
	ID           int     `json:"id"`
	TZ           string  `json:"tz"`
	DTStart      string  `json:"dtstart"`
	Rule         string  `json:"rule"`
	Count        int     `json:"count"`
	Until        string  `json:"until"`
	WeeklySetpos bool    `json:"weekly_setpos"`
	Queries      []int64 `json:"queries"`
	Budget       int     `json:"budget"`
}

type oracleAnswer struct {
	ID      int               `json:"id"`
	Answers []json.RawMessage `json:"answers"`
	Error   string            `json:"error"`
}

// requireDateutil fails under CI and skips elsewhere when the oracle's
// Python or dateutil is missing.
func requireDateutil(t *testing.T) {
	t.Helper()
	err := exec.Command(pythonPath, "-c", "import dateutil.rrule, zoneinfo").Run()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("%s with python-dateutil is needed (%v): install it with `sudo apt-get install python3-dateutil` or run scripts/example-deps.sh", pythonPath, err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// runOracle sends every request to one Python process and returns the
// answers by id.
func runOracle(t *testing.T, reqs []oracleRequest) map[int]oracleAnswer {
	t.Helper()
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, r := range reqs {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(pythonPath, "testdata/dateutil_oracle.py")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, stderr.String())
	}
	answers := map[int]oracleAnswer{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var a oracleAnswer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("oracle answer %q: %v", sc.Text(), err)
		}
		answers[a.ID] = a
	}
	return answers
}

var diffZones = []string{"UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Sao_Paulo", "Asia/Kolkata"}

// transitionWalls are local times next to clock changes, for DTSTARTs.
var transitionWalls = map[string][]string{
	"Europe/Paris":        {"20240331T023000", "20241027T023000", "20300331T020000", "20241027T000000"},
	"America/New_York":    {"20240310T023000", "20241103T013000", "20240308T023000", "20241102T230000"},
	"Australia/Lord_Howe": {"20241006T021500", "20240407T014500", "20241005T230000", "20240406T234500"},
	"America/Sao_Paulo":   {"20181104T003000", "20190216T233000", "20181103T230000"},
}

// genRule returns a random rule within what dateutil reads like RFC 5545.
func genRule(rng *rand.Rand, id int) (text string, req oracleRequest) {
	f := freq(rng.IntN(7))
	zone := diffZones[rng.IntN(len(diffZones))]
	var dt time.Time
	if walls, ok := transitionWalls[zone]; ok && rng.IntN(3) == 0 {
		dt, _ = time.Parse("20060102T150405", walls[rng.IntN(len(walls))])
	} else {
		year := 2015 + rng.IntN(20)
		switch rng.IntN(10) {
		case 0:
			year = 1890 + rng.IntN(130)
		case 1:
			year = 1600 + rng.IntN(300)
		}
		dt = time.Date(year, time.Month(1+rng.IntN(12)), 1+rng.IntN(28), rng.IntN(24), rng.IntN(4)*15, rng.IntN(3)*20, 0, time.UTC)
		if rng.IntN(3) == 0 {
			dt = dt.Truncate(time.Hour)
		}
	}
	var parts []string
	add := func(k, v string) { parts = append(parts, k+"="+v) }
	add("FREQ", freqNames[f])
	pick := func(n, lo, hi int, neg bool) string {
		seen := map[int]bool{}
		var out []string
		for len(out) < n {
			v := lo + rng.IntN(hi-lo+1)
			if neg && rng.IntN(3) == 0 {
				v = -v
			}
			if !seen[v] {
				seen[v] = true
				out = append(out, strconv.Itoa(v))
			}
		}
		return strings.Join(out, ",")
	}
	interval := 1
	if rng.IntN(3) == 0 {
		interval = []int{2, 3, 4, 5, 6, 7, 12, 15}[rng.IntN(8)]
	}
	dayFilter := false
	if rng.IntN(4) == 0 {
		add("BYMONTH", pick(1+rng.IntN(3), 1, 12, false))
		dayFilter = true
	}
	if f == yearly && rng.IntN(5) == 0 {
		add("BYWEEKNO", pick(1+rng.IntN(2), 1, 53, true))
	}
	if (f == yearly || f >= hourly) && rng.IntN(6) == 0 {
		add("BYYEARDAY", pick(1+rng.IntN(3), 1, 366, true))
		dayFilter = true
	}
	if f != weekly && rng.IntN(4) == 0 {
		add("BYMONTHDAY", pick(1+rng.IntN(3), 1, 31, true))
		dayFilter = true
	}
	if rng.IntN(3) == 0 {
		days := []string{"MO", "TU", "WE", "TH", "FR", "SA", "SU"}
		rng.Shuffle(len(days), func(i, j int) { days[i], days[j] = days[j], days[i] })
		n := 1 + rng.IntN(3)
		numbered := (f == monthly || f == yearly && !strings.Contains(strings.Join(parts, ";"), "BYWEEKNO")) && rng.IntN(2) == 0
		if numbered {
			most := 5
			if f == yearly && !strings.Contains(strings.Join(parts, ";"), "BYMONTH") {
				most = 53
			}
			for i := range days[:n] {
				k := 1 + rng.IntN(most)
				if most == 53 && rng.IntN(2) == 0 {
					k = 1 + rng.IntN(5)
				}
				if rng.IntN(3) == 0 {
					k = -k
				}
				days[i] = strconv.Itoa(k) + days[i]
			}
		}
		add("BYDAY", strings.Join(days[:n], ","))
		dayFilter = true
	}
	if rng.IntN(3) == 0 {
		add("BYHOUR", pick(1+rng.IntN(3), 0, 23, false))
	}
	if rng.IntN(3) == 0 {
		add("BYMINUTE", pick(1+rng.IntN(3), 0, 59, false))
	}
	if rng.IntN(4) == 0 {
		add("BYSECOND", pick(1+rng.IntN(2), 0, 59, false))
	}
	if f >= hourly && dayFilter {
		// Limit 4: steps must fall at the same times every day.
		unit := int(f.unitSeconds())
		for secPerDay%(interval*unit) != 0 {
			interval--
		}
	}
	if interval > 1 {
		add("INTERVAL", strconv.Itoa(interval))
	}
	if len(parts) > 1 && rng.IntN(4) == 0 {
		add("BYSETPOS", pick(1+rng.IntN(2), 1, 5, true))
	}
	if rng.IntN(4) == 0 {
		add("WKST", []string{"MO", "TU", "WE", "TH", "FR", "SA", "SU"}[rng.IntN(7)])
	}
	rule := strings.Join(parts, ";")
	req = oracleRequest{ID: id, TZ: zone, DTStart: dt.Format("20060102T150405"), Rule: rule}
	full := rule
	switch rng.IntN(4) {
	case 0:
		req.Count = 1 + rng.IntN(40)
		full += ";COUNT=" + strconv.Itoa(req.Count)
	case 1:
		span := horizon(f)
		u := dt.Add(time.Duration(rng.Int64N(int64(span))))
		if rng.IntN(2) == 0 {
			req.Until = u.Format("20060102T150405") + "Z"
		} else {
			req.Until = u.Format("20060102T150405")
		}
		full += ";UNTIL=" + req.Until
	}
	req.WeeklySetpos = f == weekly && strings.Contains(rule, "BYSETPOS")
	start := "DTSTART:" + req.DTStart + "Z"
	if zone != "UTC" {
		start = "DTSTART;TZID=" + zone + ":" + req.DTStart
	}
	return start + "\nRRULE:" + full, req
}

// horizon is how far after DTSTART queries go, so that dateutil, which
// iterates from DTSTART, stays within its budget.
func horizon(f freq) time.Duration {
	day := 24 * time.Hour
	return map[freq]time.Duration{
		secondly: 20 * time.Minute, minutely: day, hourly: 30 * day, daily: 2 * 365 * day,
		weekly: 10 * 365 * day, monthly: 60 * 365 * day, yearly: 280 * 365 * day, // a Duration holds 292 years
	}[f]
}

// queries returns instants to ask Next about: DTSTART's neighbourhood,
// random instants, clock changes of the zone, and centuries ahead for
// yearly and monthly rules.
func queries(rng *rand.Rand, s *Schedule, f freq, n int) []int64 {
	start := s.Start()
	span := horizon(f)
	out := []int64{start.Unix() - 1, start.Unix()}
	for len(out) < n {
		q := start.Add(time.Duration(rng.Int64N(int64(span))))
		switch rng.IntN(4) {
		case 0: // just before or after a clock change
			if _, end := q.In(s.Location()).ZoneBounds(); !end.IsZero() && end.Sub(start) < span {
				q = end.Add(time.Duration(rng.IntN(7201)-3600) * time.Second)
			}
		case 1:
			q = q.Truncate(time.Hour)
		}
		out = append(out, q.Unix())
	}
	if f <= monthly {
		out = append(out, start.AddDate(100+rng.IntN(300), 0, 0).Unix())
	}
	return out
}

func TestDifferentialDateutil(t *testing.T) {
	requireDateutil(t)
	nRules, budget, seed := 400, 4000, uint64(1)
	if os.Getenv("SCHEDULE_DIFF") == "long" {
		nRules, budget = 20000, 50000
	}
	if v := os.Getenv("SCHEDULE_DIFF_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SCHEDULE_DIFF_SEED=%q: %v", v, err)
		}
		seed = n
	}
	rng := rand.New(rand.NewPCG(seed, 11))
	type ruleCase struct {
		text string
		s    *Schedule
		req  oracleRequest
	}
	var cases []ruleCase
	var reqs []oracleRequest
	refused := 0
	for id := 0; id < nRules; id++ {
		text, req := genRule(rng, id)
		s, err := Parse(text, time.Time{})
		if err == nil {
			err = s.Validate()
		}
		if err != nil {
			refused++
			continue
		}
		req.Queries = queries(rng, s, s.p.freq, 8)
		req.Budget = budget
		cases = append(cases, ruleCase{text, s, req})
		reqs = append(reqs, req)
	}
	answers := runOracle(t, reqs)
	compared, skipped, failures := 0, 0, 0
	for _, c := range cases {
		a, ok := answers[c.req.ID]
		if !ok || a.Error != "" {
			t.Errorf("dateutil could not evaluate %q: %s", c.text, a.Error)
			continue
		}
		for i, q := range c.req.Queries {
			raw := string(a.Answers[i])
			if raw == `"skip"` {
				skipped++
				continue
			}
			compared++
			var want time.Time
			if raw != "null" {
				n, _ := strconv.ParseInt(raw, 10, 64)
				want = time.Unix(n, 0)
			}
			if got := c.s.Next(time.Unix(q, 0)); !got.Equal(want) {
				failures++
				if failures <= 20 {
					t.Errorf("%q\nNext(%s) = %s; dateutil says %s", c.text, time.Unix(q, 0).UTC().Format(time.RFC3339),
						fmtTime(got), fmtTime(want))
				}
			}
		}
	}
	t.Logf("%d rules (%d refused by the limits or Validate), %d queries compared, %d beyond dateutil's budget, %d disagreements",
		nRules, refused, compared, skipped, failures)
	if compared < 3*nRules {
		t.Errorf("only %d queries compared", compared)
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format(time.RFC3339)
}

// TestBydayMixIsUnion pins the RFC 5545 reading of BYDAY mixing plain and
// numbered days, where dateutil differs: MO,1TU is every Monday and the
// first Tuesday.
func TestBydayMixIsUnion(t *testing.T) {
	s := MustParse("DTSTART:20240101T090000Z\nRRULE:FREQ=MONTHLY;BYDAY=MO,1TU;COUNT=7")
	var got []string
	for at := s.Start().Add(-time.Second); ; {
		at = s.Next(at)
		if at.IsZero() {
			break
		}
		got = append(got, at.Format("0102"))
	}
	if want := "0101,0102,0108,0115,0122,0129,0205"; strings.Join(got, ",") != want {
		t.Errorf("MO,1TU = %v; want %s", got, want)
	}
}
