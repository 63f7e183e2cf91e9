package cli

import (
	"encoding/json"
	"strings"
	"testing"
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
