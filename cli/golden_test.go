package cli

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/jmoiron/sqlx"
)

var update = flag.Bool("update", false, "rewrite cli/testdata/*.golden with the commands' output")

// golden compares got with testdata/name.golden (or writes it with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cli -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (if the change is meant, run go test ./cli -update and review the diff):\n--- got\n%s--- want\n%s", name, path, got, want)
	}
}

// What people read: plan in its three formats and explain need no services.
func TestGoldenPlanAndExplain(t *testing.T) {
	twiceADay := []string{"--schedule", "DTSTART:20240304T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16", "--start", "2024-03-04T06:00:00Z"}
	tests := []struct {
		name string
		args []string
	}{
		{"plan-table", append([]string{"plan", "--fail-all"}, twiceADay...)},
		{"plan-json", append([]string{"plan", "--format", "json", "--timeout", "10h", "--outcomes", "failure:10m,success"}, twiceADay...)},
		{"plan-mermaid", append([]string{"plan", "--format", "mermaid", "--strategy", "random base_ms=60000 pct=0.5 max_retry=3", "--seed", "7", "--fail-all"}, twiceADay...)},
		{"explain", []string{"explain", "--schedule", "DTSTART:20240304T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16",
			"--strategy", "exponential initial=5s max=5m max_attempts=7 jitter=full", "--on-exhausted", "wait_next", "--give-up-after", "1 week"}},
		// The original design's scenarios, as it writes them, read back.
		{"explain-thumbnail", []string{"explain", "--expr", "../refresh/testdata/scenarios/thumbnail.txt"}},
		{"explain-give-up-after-a-week", []string{"explain", "--schedule", "DTSTART:20240304T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16",
			"--expr", "../refresh/testdata/scenarios/give-up-after-a-week.txt"}},
		{"explain-kinds", []string{"explain", "--schedule", "DTSTART:20240304T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16", "--policy",
			`{"on_kind":{"bad_input":"final","rate_limited":{"strategy":{"kind":"exponential"}}},"max_retry_after":"1h","final_reason":"Upstream refused","notify":"https://hooks.example.com/bt"}`}},
		{"plan-kinds", append([]string{"plan", "--policy", `{"on_kind":{"bad_input":"final"}}`, "--outcomes",
			"failure:upstream_5xx:10m,failure:rate_limited:45s,failure:bad_input"}, twiceADay...)},
		{"plan-kinds-json", append([]string{"plan", "--format", "json", "--outcomes", "failure:rate_limited:45s,timeout"}, twiceADay...)},
	}
	r := &runner{t: t, env: map[string]string{}}
	for _, tt := range tests {
		out, stderr, code := r.run(tt.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tt.args, code, stderr)
		}
		golden(t, tt.name, out)
	}
}

// list and show, on records in every phase, with their times fixed.
func TestGoldenListAndShow(t *testing.T) {
	r := newRunner(t)
	for _, uid := range []string{"a-waiting", "b-running", "c-retrying", "d-disabled", "e-idle", "f-parked"} {
		_, stderr, code := r.run("add", "--uid", uid, "--input-url", "https://example.com/"+uid+".csv",
			"--schedule", "DTSTART:20240304T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16", "--refresh-at", "2024-03-04T16:00:00Z")
		if code != 0 {
			t.Fatal(stderr)
		}
	}
	db, err := sqlx.Open("postgres", r.env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`UPDATE bigtables SET created_at = '2024-03-01T09:00:00Z', updated_at = '2024-03-04T06:10:00Z'`,
		`UPDATE bigtables SET attempt_uid = 'ckattempt000000000000000', attempt_no = 1, started_at = '2024-03-04T06:00:00Z',
			deadline_at = '2024-03-04T07:00:00Z', status_message = 'downloading: 40%' WHERE uid = 'b-running'`,
		`UPDATE bigtables SET attempt_no = 2, failing_since = '2024-03-04T06:00:00Z', refresh_at = '2024-03-04T06:11:00Z' WHERE uid = 'c-retrying'`,
		`UPDATE bigtables SET attempt_no = 7, failing_since = '2024-03-04T06:00:00Z', refresh_at = NULL,
			disabled_until_update = true, disabled_reason = 'Cannot refresh BigTable after 7 attempts: GET: 503 Service Unavailable' WHERE uid = 'd-disabled'`,
		`UPDATE bigtables SET refresh_at = NULL, schedule = '' WHERE uid = 'e-idle'`,
		// Due at 06:00, parked by its upstream's open breaker at 06:00:05
		// (what a tick does: store/upstreams.go Park).
		`UPDATE bigtables SET refresh_at = '2024-03-04T06:00:00Z', parked_at = '2024-03-04T06:00:05Z' WHERE uid = 'f-parked'`,
		`INSERT INTO bigtable_attempts (attempt_uid, uid, attempt_no, started_at, finished_at, outcome, message, decision)
			VALUES ('ckprevious00000000000000', 'c-retrying', 2, '2024-03-04T06:01:00Z', '2024-03-04T06:10:00Z', 'failure', 'HTTP 503', 'retry')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"list", []string{"list"}},
		{"list-disabled", []string{"list", "--disabled"}},
		{"show", []string{"show", "b-running"}},
		{"show-history", []string{"show", "c-retrying", "--history", "5"}},
		{"show-parked", []string{"show", "f-parked"}},
	} {
		out, stderr, code := r.run(tt.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tt.args, code, stderr)
		}
		golden(t, tt.name, out)
	}
}
