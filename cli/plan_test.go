package cli

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/refresh"
)

func plan(t *testing.T, args ...string) string {
	t.Helper()
	r := &runner{t: t, env: map[string]string{}}
	out, stderr, code := r.run(append([]string{"plan"}, args...)...)
	if code != 0 {
		t.Fatalf("plan %v: exit %d: %s", args, code, stderr)
	}
	return out
}

// rows returns the table's rows as "start outcome refresh_at | why" strings.
func rows(out string) []string {
	var got []string
	for _, line := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 {
			break
		}
		// #, start date, start, deadline date, deadline, outcome, at date, at, refresh_at ("-" or date time), why...
		refreshAt, why := "-", f[9:]
		if f[8] != "-" {
			refreshAt, why = f[9], f[10:]
		}
		got = append(got, f[2]+" "+f[5]+" "+refreshAt+" | "+strings.Join(why, " "))
	}
	return got
}

// Timelines worked out by hand from the original design's examples (docs/design.md, "Transitions").
func TestPlanSeedTimelines(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
		end  string
	}{
		{"twice a day, every attempt fails (default policy)",
			[]string{"--schedule", "DTSTART:20240304T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16", "--start", "2024-03-04T06:00:00Z", "--fail-all"},
			[]string{"06:00:00 failure 06:01:00 | retry after 0s", "06:01:00 failure 06:03:00 | retry after 1m",
				"06:03:00 failure 06:09:00 | retry after 5m", "06:09:00 failure 06:25:00 | retry after 15m",
				"06:25:00 failure 06:56:00 | retry after 30m", "06:56:00 failure 07:57:00 | retry after 1h",
				"07:57:00 failure - | retries exhausted: disabled"},
			`final state: disabled ("Cannot refresh BigTable after 7 attempts"), attempt_no 7`},
		{"timeout 10h: the 16:00 run is attempt 2 (docs/design.md worked example)",
			[]string{"--schedule", "DTSTART:20240304T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16", "--start", "2024-03-04T06:00:00Z",
				"--timeout", "10h", "--outcomes", "failure:10m,success"},
			[]string{"06:00:00 failure 16:00:00 | aligned: the retry (after 0s) would still run at the planned refresh at 2024-03-04 16:00:00",
				"16:00:00 success 06:00:00 | success: next planned refresh"},
			"final state: waiting, refresh_at 2024-03-05T06:00:00Z, attempt_no 0"},
		{"2 PM with a 2h timeout: the 1:30 PM retry moves to 2 PM (aligned)",
			[]string{"--schedule", "DTSTART:20240304T140000Z\nRRULE:FREQ=DAILY", "--start", "2024-03-04T12:30:00Z",
				"--timeout", "2h", "--retries", "30m", "--outcomes", "failure:30m"},
			[]string{"12:30:00 failure 14:00:00 | aligned: the retry (after 30m) would still run at the planned refresh at 2024-03-04 14:00:00"},
			"attempt_no 1"},
		{"2 PM without alignment: retry at 1:30 PM",
			[]string{"--schedule", "DTSTART:20240304T140000Z\nRRULE:FREQ=DAILY", "--start", "2024-03-04T12:30:00Z",
				"--timeout", "2h", "--retries", "30m", "--align=false", "--outcomes", "failure:30m"},
			[]string{"12:30:00 failure 13:30:00 | retry after 30m"}, "attempt_no 1"},
		{"every 30 min, 1h timeout, a 10 min refresh: next at 08:30",
			[]string{"--schedule", "DTSTART:20240304T000000Z\nRRULE:FREQ=MINUTELY;INTERVAL=30", "--start", "2024-03-04T08:00:00Z",
				"--outcomes", "success:10m,timeout"},
			[]string{"08:00:00 success 08:30:00 | success: next planned refresh",
				"08:30:00 timeout 10:00:00 | aligned: the retry (after 0s) would still run at the planned refresh at 2024-03-04 10:00:00"},
			"attempt_no 1"},
		{"thumbnail, as the original design writes it: one-off, 1 minute, three retries, then its message",
			[]string{"--expr", "../refresh/testdata/scenarios/thumbnail.txt", "--start", "2024-03-04T10:00:00Z", "--fail-all", "--run", "10s"},
			[]string{"10:00:00 failure 10:00:10 | retry after 0s (no planned refresh)", "10:00:10 failure 10:01:20 | retry after 1m (no planned refresh)",
				"10:01:20 failure 10:06:30 | retry after 5m (no planned refresh)", "10:06:30 failure - | retries exhausted: disabled"},
			`final state: disabled ("thumbnail creation failed"), attempt_no 4`},
		{"twice a day, as the original design writes it",
			[]string{"--expr", "../refresh/testdata/scenarios/twice-a-day.txt", "--start", "2024-03-04T06:00:00Z", "--outcomes", "failure,timeout"},
			[]string{"06:00:00 failure 06:01:00 | retry after 0s", "06:01:00 timeout 07:02:00 | retry after 1m"}, "attempt_no 2"},
		{"failures by kind: retry_after, a kind's own strategy, the default one, a final kind",
			[]string{"--schedule", "DTSTART:20240304T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16", "--start", "2024-03-04T06:00:00Z",
				"--policy", `{"on_kind":{"bad_input":"final","rate_limited":{"strategy":{"kind":"fix","ms":120000,"max_retry":5}}}}`,
				"--outcomes", "failure:rate_limited:30s,failure:rate_limited,failure:upstream_5xx,failure:bad_input"},
			[]string{"06:00:00 failure:rate_limited:30s 06:01:30 | retry after 30s [kind rate_limited; the worker's retry_after]",
				"06:01:30 failure:rate_limited 06:04:30 | retry after 2m [kind rate_limited]",
				"06:04:30 failure:upstream_5xx 06:10:30 | retry after 5m",
				"06:10:30 failure:bad_input - | not retryable: disabled [kind bad_input]"},
			`final state: disabled ("Cannot refresh BigTable after 4 attempts"), attempt_no 4`},
		{"exponential 5s x2 cap 300s",
			[]string{"--strategy", "exponential initial=5s max=300s max_attempts=4", "--start", "2024-03-04T10:00:00Z", "--fail-all", "--run", "1s", "--timeout", "10s"},
			[]string{"10:00:00 failure 10:00:06 | retry after 5s (no planned refresh)", "10:00:06 failure 10:00:17 | retry after 10s (no planned refresh)",
				"10:00:17 failure 10:00:38 | retry after 20s (no planned refresh)", "10:00:38 failure - | retries exhausted: disabled"},
			"attempt_no 4"},
	}
	for _, tt := range tests {
		out := plan(t, tt.args...)
		got := rows(out)
		if strings.Join(got, "\n") != strings.Join(tt.want, "\n") || !strings.Contains(out, tt.end) {
			t.Errorf("%s:\n%s\nwant rows:\n%s\nand %q", tt.name, out, strings.Join(tt.want, "\n"), tt.end)
		}
	}
}

func TestPlanFormatsAndSeed(t *testing.T) {
	args := []string{"--strategy", "random base_ms=60000 pct=0.5 max_retry=3", "--start", "2024-03-04T10:00:00Z", "--fail-all"}
	a := plan(t, append(args, "--format", "json", "--seed", "7")...)
	b := plan(t, append(args, "--format", "json", "--seed", "7")...)
	c := plan(t, append(args, "--format", "json", "--seed", "8")...)
	if a != b || a == c {
		t.Errorf("--seed does not reproduce a plan, or ignores the seed")
	}
	var p struct {
		Attempts []struct {
			Outcome, Decision, Delay string
			Disabled                 bool
		}
		Final struct {
			DisabledReason string `json:"disabled_reason"`
		}
	}
	if err := json.Unmarshal([]byte(a), &p); err != nil || len(p.Attempts) != 4 || !p.Attempts[3].Disabled {
		t.Fatalf("json plan %s: %v", a, err)
	}
	m := plan(t, append(args, "--format", "mermaid")...)
	for _, want := range []string{"gantt", "dateFormat", "🚀 Start 1 : milestone, 2024-03-04T10:00:00, 0s", "💥 Final failure 4"} {
		if !strings.Contains(m, want) {
			t.Errorf("mermaid lacks %q:\n%s", want, m)
		}
	}
	r := &runner{t: t, env: map[string]string{}}
	for _, bad := range [][]string{{"plan", "--start", "2024-03-04T10:00:00Z"}, {"plan", "--fail-all", "--outcomes", "success"},
		{"plan", "--fail-all", "--format", "png"}, {"plan", "--outcomes", "maybe"}, {"plan", "--fail-all", "--retries", "1m", "--strategy", "fix ms=1 max_retry=1"}} {
		if _, stderr, code := r.run(bad...); code != 2 {
			t.Errorf("%v: exit %d %s; want 2", bad, code, stderr)
		}
	}
}

func TestExplainCommand(t *testing.T) {
	r := &runner{t: t, env: map[string]string{}}
	out, stderr, code := r.run("explain", "--expr", "Refresh the model every 2 hours\nAllow 1 hour for a response\nOn the first failure, retry immediately\nPanic")
	if code != 0 {
		t.Fatal(stderr)
	}
	want := "- Refresh the model every 2 hours\n- Allow 1 hour for a response\n- On the first failure, retry immediately\n- After the last retry, stop refreshing until a person updates the record\n"
	if !strings.HasSuffix(out, want) || !strings.HasPrefix(out, "# schedule from DTSTART:") {
		t.Errorf("explain =\n%s\nwant it to end with\n%s", out, want)
	}
	_, stderr, code = r.run("explain", "--expr", "Refresh the model every 2 hours\nDo the hokey cokey")
	if code != 2 || !strings.Contains(stderr, `"Do the hokey cokey": not understood`) {
		t.Errorf("bad expr: %d %s", code, stderr)
	}
}

// breakerRows returns plan's table rows with a BREAKER column as
// "# start outcome at refresh_at breaker | why", times without their date.
func breakerRows(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], "BREAKER") {
		t.Fatalf("no BREAKER column:\n%s", out)
	}
	var got []string
	for _, line := range lines[1:] {
		if line == "" {
			break
		}
		f := regexp.MustCompile(`\s{2,}`).Split(line, -1)
		if len(f) != 8 {
			t.Fatalf("row %q: %d columns", line, len(f))
		}
		for i := range f {
			f[i] = strings.TrimPrefix(f[i], "2024-03-04 ")
		}
		got = append(got, strings.Join([]string{f[0], f[1], f[3], f[4], f[5], f[6]}, " ")+" | "+f[7])
	}
	return got
}

// plan --outage and --breaker: the record's timeline with the real breaker
// (upstream.Upstream) on the simulated clock (docs/design.md, U3-U9).
// Hourly, timeout 10m, retries 0,1m,5m, attempts of 1 minute.
func TestPlanBreakerOutage(t *testing.T) {
	hourly := []string{"--schedule", "DTSTART:20240304T000000Z\nRRULE:FREQ=HOURLY", "--start", "2024-03-04T00:00:00Z", "--timeout", "10m", "--retries", "0,1m,5m"}
	const brk = "consecutive=2 cool-down=10m max-cool-down=1h"
	tests := []struct {
		name string
		args []string
		want []string
		end  string
	}{
		{"a 30m outage: opens after 2 failures, a failing probe reopens it for 20m, the next probe closes it, the schedule resumes",
			[]string{"--outage", "2024-03-04T00:00:00Z/30m", "--breaker", brk},
			[]string{
				"1 00:00:00 failure 00:01:00 00:01:00 closed | outage: retry after 0s",
				"2 00:01:00 failure 00:02:00 00:03:00 open | outage: retry after 1m; breaker open: 2 failures in a row, cool-down 10m",
				"2 00:03:00 PARKED 00:12:00 00:03:00 open | breaker open: parked until its cool-down ends; no attempt burned",
				"3 00:12:00 failure 00:13:00 00:18:00 open | outage: probe: retry after 5m; breaker half_open: cool-down over: probing; breaker open: a probe failed, cool-down 20m",
				"3 00:18:00 PARKED 00:33:00 00:18:00 open | breaker open: parked until its cool-down ends; no attempt burned",
				"4 00:33:00 success 00:34:00 01:00:00 closed | probe: success: next planned refresh; breaker half_open: cool-down over: probing; breaker closed: a probe succeeded",
				"1 01:00:00 success 01:01:00 02:00:00 closed | success: next planned refresh",
			},
			"5 attempt(s), parked 2 time(s); final state: waiting, refresh_at 2024-03-04T02:00:00Z, attempt_no 0\nstopped: the record is back on its schedule after the outage"},
		{"give_up_after 15m counts the record's failing time, not its time parked (refresh.Unpark)",
			[]string{"--retries", "0,1m,5m,10m,10m", "--give-up-after", "15m", "--outage", "2024-03-04T00:00:00Z/1h", "--breaker", brk},
			[]string{
				"1 00:00:00 failure 00:01:00 00:01:00 closed | outage: retry after 0s",
				"2 00:01:00 failure 00:02:00 00:03:00 open | outage: retry after 1m; breaker open: 2 failures in a row, cool-down 10m",
				"2 00:03:00 PARKED 00:12:00 00:03:00 open | breaker open: parked until its cool-down ends; no attempt burned",
				"3 00:12:00 failure 00:13:00 00:18:00 open | outage: probe: retry after 5m; breaker half_open: cool-down over: probing; breaker open: a probe failed, cool-down 20m",
				"3 00:18:00 PARKED 00:33:00 00:18:00 open | breaker open: parked until its cool-down ends; no attempt burned",
				"4 00:33:00 failure 00:34:00 00:44:00 open | outage: probe: retry after 10m; breaker half_open: cool-down over: probing; breaker open: a probe failed, cool-down 40m",
				"4 00:44:00 PARKED 01:14:00 00:44:00 open | breaker open: parked until its cool-down ends; no attempt burned",
				"5 01:14:00 success 01:15:00 02:00:00 closed | probe: success: next planned refresh; breaker half_open: cool-down over: probing; breaker closed: a probe succeeded",
				"1 02:00:00 success 02:01:00 03:00:00 closed | success: next planned refresh",
			},
			"final state: waiting, refresh_at 2024-03-04T03:00:00Z, attempt_no 0"},
		{"timeouts count against the breaker; no outage, the outcomes given",
			[]string{"--breaker", brk, "--outcomes", "timeout,timeout,success"},
			[]string{
				"1 00:00:00 timeout 00:10:00 00:10:00 closed | retry after 0s",
				"2 00:10:00 timeout 00:20:00 00:21:00 open | retry after 1m; breaker open: 2 failures in a row, cool-down 10m",
				"2 00:21:00 PARKED 00:30:00 00:21:00 open | breaker open: parked until its cool-down ends; no attempt burned",
				"3 00:30:00 success 00:31:00 01:00:00 closed | probe: success: next planned refresh; breaker half_open: cool-down over: probing; breaker closed: a probe succeeded",
			},
			"stopped: no more outcomes given"},
		{"a not-retryable failure is the record's own: the breaker does not count it",
			[]string{"--breaker", brk, "--outcomes", "failure,not_retryable"},
			[]string{
				"1 00:00:00 failure 00:01:00 00:01:00 closed | retry after 0s",
				"2 00:01:00 not_retryable 00:02:00 - closed | not retryable: disabled",
			},
			"2 attempt(s), parked 0 time(s)"},
		{"the default breaker (consecutive 5) never opens before the retries run out",
			[]string{"--outage", "2024-03-04T00:00:00Z/30m"},
			[]string{
				"1 00:00:00 failure 00:01:00 00:01:00 closed | outage: retry after 0s",
				"2 00:01:00 failure 00:02:00 00:03:00 closed | outage: retry after 1m",
				"3 00:03:00 failure 00:04:00 00:09:00 closed | outage: retry after 5m",
				"4 00:09:00 failure 00:10:00 - closed | outage: retries exhausted: disabled",
			},
			`final state: disabled ("Cannot refresh BigTable after 4 attempts")`},
	}
	for _, tt := range tests {
		out := plan(t, append(append([]string{}, hourly...), tt.args...)...)
		got := breakerRows(t, out)
		if strings.Join(got, "\n") != strings.Join(tt.want, "\n") || !strings.Contains(out, tt.end) {
			t.Errorf("%s:\n%s\ngot rows:\n%s\nwant rows:\n%s\nand %q", tt.name, out, strings.Join(got, "\n"), strings.Join(tt.want, "\n"), tt.end)
		}
	}
}

// The JSON and mermaid outputs show the parkings, the probes and the
// breaker's transitions too; bad --outage and --breaker are usage errors.
func TestPlanBreakerFormats(t *testing.T) {
	args := []string{"--schedule", "DTSTART:20240304T000000Z\nRRULE:FREQ=HOURLY", "--start", "2024-03-04T00:00:00Z", "--timeout", "10m",
		"--retries", "0,1m,5m", "--outage", "2024-03-04T00:00:00Z/2024-03-04T00:30:00Z", "--breaker", "consecutive=2,cool-down=10m,max-cool-down=1h"}
	var p struct {
		Attempts []struct {
			AttemptNo  int     `json:"attempt_no"`
			Start      string  `json:"start"`
			Deadline   *string `json:"deadline"`
			End        string  `json:"end"`
			RefreshAt  string  `json:"refresh_at"`
			Outcome    string  `json:"outcome"`
			Parked     bool    `json:"parked"`
			Probe      bool    `json:"probe"`
			InOutage   bool    `json:"in_outage"`
			Breaker    string  `json:"breaker"`
			BreakerWhy string  `json:"breaker_why"`
		}
		Outage  struct{ From, To string }
		Breaker struct {
			Consecutive int    `json:"consecutive"`
			CoolDown    string `json:"cool_down"`
		}
	}
	out := plan(t, append(args, "--format", "json")...)
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got []string
	for _, a := range p.Attempts {
		got = append(got, fmt.Sprintf("%d %s %s parked=%v probe=%v outage=%v %s %q", a.AttemptNo, a.Start[11:16], a.Outcome, a.Parked, a.Probe, a.InOutage, a.Breaker, a.BreakerWhy))
	}
	want := []string{
		`1 00:00 failure parked=false probe=false outage=true closed ""`,
		`2 00:01 failure parked=false probe=false outage=true open "breaker open: 2 failures in a row, cool-down 10m"`,
		`2 00:03 parked parked=true probe=false outage=false open ""`,
		`3 00:12 failure parked=false probe=true outage=true open "breaker half_open: cool-down over: probing; breaker open: a probe failed, cool-down 20m"`,
		`3 00:18 parked parked=true probe=false outage=false open ""`,
		`4 00:33 success parked=false probe=true outage=false closed "breaker half_open: cool-down over: probing; breaker closed: a probe succeeded"`,
		`1 01:00 success parked=false probe=false outage=false closed ""`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("json rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if pk := p.Attempts[2]; pk.Deadline != nil || pk.End != "2024-03-04T00:12:00Z" || pk.RefreshAt != "2024-03-04T00:03:00Z" {
		t.Errorf("parked row: deadline %v, end %s, refresh_at %s; want null, its release 00:12, its kept refresh_at 00:03", pk.Deadline, pk.End, pk.RefreshAt)
	}
	if p.Outage.From != "2024-03-04T00:00:00Z" || p.Outage.To != "2024-03-04T00:30:00Z" || p.Breaker.Consecutive != 2 || p.Breaker.CoolDown != "10m" {
		t.Errorf("outage %+v, breaker %+v", p.Outage, p.Breaker)
	}
	m := plan(t, append(args, "--format", "mermaid")...)
	for _, want := range []string{"title 5 attempt(s)", "🔥 Upstream outage : crit, 2024-03-04T00:00:00, 1800s",
		"⏸️ Parked (attempt_no 2 kept) : done, 2024-03-04T00:03:00, 540s", "⏸️ Parked (attempt_no 3 kept) : done, 2024-03-04T00:18:00, 900s",
		"⚙️ Probe, Retry 2 (attempt 3) : 2024-03-04T00:12:00, 60s", "⚡ Breaker open 2 : milestone, 2024-03-04T00:02:00, 0s",
		"⚡ Breaker closed 4 : milestone, 2024-03-04T00:34:00, 0s"} {
		if !strings.Contains(m, want) {
			t.Errorf("mermaid lacks %q:\n%s", want, m)
		}
	}
	r := &runner{t: t, env: map[string]string{}}
	for _, bad := range [][]string{
		{"plan", "--outage", "2024-03-04T00:00:00Z/30m", "--fail-all"},
		{"plan", "--outage", "2024-03-04T00:00:00Z"},
		{"plan", "--outage", "yesterday/30m"},
		{"plan", "--outage", "2024-03-04T00:00:00Z/forever"},
		{"plan", "--outage", "2024-03-04T00:00:00Z/2024-03-03T00:00:00Z"},
		{"plan", "--outage", "2024-03-04T00:00:00Z/30m", "--breaker", "consecutive=two"},
		{"plan", "--fail-all", "--breaker", "probes=0"},
	} {
		if _, stderr, code := r.run(bad...); code != 2 {
			t.Errorf("%v: exit %d %s; want 2", bad, code, stderr)
		}
	}
}

// explain prints a policy's spread, and for a record its own offset
// (docs/design.md, U12).
func TestExplainSpread(t *testing.T) {
	const line = "- Spread the planned refreshes over 15 minutes: each record keeps its own random offset\n"
	r := &runner{t: t, env: map[string]string{}}
	out, stderr, code := r.run("explain", "--schedule", "RRULE:FREQ=DAILY", "--policy", `{"spread":"15m"}`)
	if code != 0 || !strings.Contains(out, line) {
		t.Errorf("explain --policy spread: exit %d %s\n%s\nwant the line %q", code, stderr, out, line)
	}
	if out, _, _ := r.run("explain", "--schedule", "RRULE:FREQ=DAILY"); strings.Contains(out, "Spread") {
		t.Errorf("explain without spread mentions it:\n%s", out)
	}
	db := newRunner(t)
	if _, stderr, code := db.run("add", "--uid", "spread-1", "--input-url", "https://example.com/s.csv", "--schedule", "RRULE:FREQ=DAILY",
		"--policy", `{"spread":"15m"}`); code != 0 {
		t.Fatal(stderr)
	}
	out, stderr, code = db.run("explain", "spread-1")
	off := refresh.FormatDuration(refresh.SpreadOffset("spread-1", 15*time.Minute))
	if want := "# spread offset of spread-1: " + off + " (added to each planned refresh)\n"; code != 0 || !strings.Contains(out, line) || !strings.Contains(out, want) {
		t.Errorf("explain spread-1: exit %d %s\n%s\nwant %q and %q", code, stderr, out, line, want)
	}
}
