package cli

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/internal/wait"
	"github.com/redis/go-redis/v9"
)

type runner struct {
	t   *testing.T
	env map[string]string
	// processWide counts the calls of env.process: what a long-running
	// command sets for the whole process (never touched in tests).
	processWide int
}

func newRunner(t *testing.T) *runner {
	r := &runner{t: t, env: map[string]string{"DATABASE_URL": testsvc.Database(t)}}
	if _, _, code := r.run("migrate"); code != 0 {
		t.Fatal("migrate failed")
	}
	return r
}

func (r *runner) run(args ...string) (stdout, stderr string, code int) {
	// The Redis client may log from its own goroutines: the buffers are
	// locked.
	var out, errOut testsvc.SyncBuffer
	e := env{getenv: func(k string) string { return r.env[k] }, stdout: &out, stderr: &errOut, stdin: strings.NewReader(""),
		backoff: wait.Backoff{Sleep: func(context.Context, time.Duration) error { return errors.New("no waiting in this test") }},
		process: func(env, *slog.Logger) { r.processWide++ }, redisLog: setRedisLogger}
	code = run(context.Background(), e, args)
	return out.String(), errOut.String(), code
}

func TestBadInputIsRefusedAndNothingWritten(t *testing.T) {
	r := newRunner(t)
	ok := []string{"add", "--uid", "u1", "--input-url", "https://example.com/a"}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"add", "--input-url", "https://example.com/a"}, "--uid: uid is empty"},
		{[]string{"add", "--uid", "u1"}, "--input-url is required"},
		{[]string{"add", "--uid", "a b", "--input-url", "https://example.com/a"}, "contains spaces"},
		{[]string{"add", "--uid", "u1", "--input-url", "example.com"}, "has no scheme"},
		{append(ok, "--timeout", "5 fortnights"), "--timeout: duration \"5 fortnights\""},
		{append(ok, "--timeout", "0s"), `--timeout: duration "0s" is too short: expected from 1s to 7 days`},
		{append(ok, "--timeout", "-5m"), `--timeout: duration "-5m" is negative: expected from 1s to 7 days`},
		{append(ok, "--timeout", "100000h"), `--timeout: duration "100000h" is too long: expected from 1s to 7 days`},
		{append(ok, "--policy", `{"timeout":"-5m"}`), `timeout: duration "-5m" is negative: expected from 1s to 7 days`},
		{append(ok, "--retries", "1m,-1m"), `--retries: retry 2: duration "-1m" is negative: expected from 0s to 365 days`},
		{append(ok, "--on-exhausted", "panic"), `on_exhausted "panic": expected "disable" or "wait_next"`},
		{append(ok, "--give-up-after", "600 weeks"), `--give-up-after: duration "600 weeks" is too long: expected from 0s (never) to 10 years`},
		{append(ok, "--policy", `{"colour":"red"}`), `unknown field "colour"`},
		{append(ok, "--policy", "/no/such/file"), "expected a JSON object or a file"},
		{append(ok, "--refresh-at", "tomorrow"), "--refresh-at \"tomorrow\": expected an RFC 3339 time"},
		{append(ok, "--schedule", "RRULE:FREQ=DAILY;BYHOUR=24"), `BYHOUR value "24": expected 0 to 23`},
		{append(ok, "--schedule", "DTSTART:20240101T000000Z\nRRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"), "no occurrence"},
		{[]string{"add", "--uid", "u1", "--input-url", "ftp://example.com/a"}, `--input-url "ftp://example.com/a": the reference worker (bigtables worker) fetches only http:// and https:// URLs; add --any-scheme`},
		{append(ok, "--bogus"), "flag provided but not defined: -bogus"},
		{append(ok, "extra"), "expected 0 argument(s)"},
		{[]string{"show"}, "expected 1 argument(s), got 0"},
		{[]string{"scheduler", "--batch", "0"}, "--batch 0: expected 1 to 100000"},
		{[]string{"scheduler", "--interval", "-1s"}, "--interval -1s: expected more than 0s"},
		{[]string{"scheduler", "--max-result-wait", "0s"}, "--max-result-wait 0s: expected 1s or more"},
		{[]string{"scheduler", "--push-attempts", "0"}, "--push-attempts 0: expected 1 to 100"},
		{[]string{"scheduler", "--keep-attempts", "-1"}, "--keep-attempts -1: expected 0 (keep all) or more"},
		{[]string{"scheduler", "--keep-days", "-3"}, "--keep-days -3: expected 0 (keep them) to 36500"},
		{[]string{"poller", "--lease", "10ms"}, "--lease 10ms: expected at least 1s"},
		{[]string{"list", "--limit", "0"}, "--limit 0: expected 1 to 100000"},
		{[]string{"show", "u1", "--history", "-1"}, "--history -1: expected 0 to 10000"},
		{[]string{"poller", "--batch", "100000"}, "--batch 100000: expected 1 to 5000"},
		{[]string{"worker", "--log-level", "loud"}, `--log-level "loud": expected debug, info, warn or error`},
	}
	for _, tt := range tests {
		_, stderr, code := r.run(tt.args...)
		if code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
	out, _, _ := r.run("list", "--json")
	if strings.TrimSpace(out) != "[]" {
		t.Errorf("refused commands wrote records: %s", out)
	}
	if _, stderr, code := r.run("frobnicate"); code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %d %q", code, stderr)
	}
}

func TestAddShowUpdate(t *testing.T) {
	r := newRunner(t)
	_, stderr, code := r.run("add", "--uid", "r1", "--input-url", "https://example.com/a",
		"--schedule", `DTSTART;TZID=Europe/Paris:20240101T060000\nRRULE:FREQ=DAILY;BYHOUR=6,16`,
		"--timeout", "PT10M", "--retries", "0, 1 minute, 5 minute", "--align=false", "--on-exhausted", "wait_next",
		"--give-up-after", "1 week")
	if code != 0 {
		t.Fatalf("add: %d %s", code, stderr)
	}
	out, _, code := r.run("show", "r1")
	if code != 0 {
		t.Fatalf("show: %d", code)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"attempt_uid", "started_at", "deadline_at", "disabled_reason", "status_message"} {
		if v, ok := m[key]; !ok || v != nil {
			t.Errorf("show[%q] = %v, present %v; want null", key, v, ok)
		}
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`).MatchString(m["refresh_at"].(string)) {
		t.Errorf("refresh_at %q is not RFC 3339 with fractions", m["refresh_at"])
	}
	if m["schedule"] != "DTSTART;TZID=Europe/Paris:20240101T060000\nRRULE:FREQ=DAILY;BYHOUR=6,16" || m["attempt_no"] != 0.0 ||
		m["disabled_until_update"] != false {
		t.Errorf("show = %s", out)
	}
	pol := m["policy"].(map[string]any)
	if pol["timeout"] != "10m" || pol["align"] != false || pol["on_exhausted"] != "wait_next" || pol["give_up_after"] != "168h" ||
		len(pol["retries"].([]any)) != 3 {
		t.Errorf("policy %v", pol)
	}

	// update changes only what it is given; a bad value writes nothing.
	if _, stderr, code := r.run("update", "r1", "--timeout", "1h", "--schedule", "RRULE:FREQ=HOURLY;INTERVAL=0"); code != 2 || !strings.Contains(stderr, "INTERVAL=0") {
		t.Errorf("bad update: %d %q", code, stderr)
	}
	out, _, _ = r.run("update", "r1", "--timeout", "20m")
	json.Unmarshal([]byte(out), &m)
	pol = m["policy"].(map[string]any)
	if pol["timeout"] != "20m" || pol["on_exhausted"] != "wait_next" || !strings.Contains(m["schedule"].(string), "BYHOUR=6,16") {
		t.Errorf("after update %s", out)
	}
	if _, stderr, code := r.run("update", "nope", "--timeout", "20m"); code != 1 || !strings.Contains(stderr, `update record "nope": no such record`) {
		t.Errorf("update unknown: %d %q", code, stderr)
	}
	if _, stderr, code := r.run("add", "--uid", "r1", "--input-url", "https://example.com/a"); code != 1 || !strings.Contains(stderr, "already exists") {
		t.Errorf("duplicate add: %d %q", code, stderr)
	}
	out, _, _ = r.run("list")
	if !strings.Contains(out, "r1") || !strings.Contains(out, "waiting") {
		t.Errorf("list:\n%s", out)
	}
}

// A URL the reference worker cannot fetch is taken only when the user says
// the workers handle it; a Redis URL that can never work is refused by
// every command that takes one, before it writes anything, even when it
// would not connect.
func TestSchemesAreChecked(t *testing.T) {
	r := newRunner(t)
	if _, stderr, code := r.run("add", "--uid", "f1", "--input-url", "ftp://example.com/a", "--any-scheme"); code != 0 {
		t.Fatalf("--any-scheme: exit %d: %s", code, stderr)
	}
	if _, stderr, code := r.run("update", "f1", "--input-url", "s3://bucket/key"); code != 2 || !strings.Contains(stderr, "add --any-scheme if your workers handle s3://") {
		t.Errorf("update to s3:// without --any-scheme: exit %d: %s", code, stderr)
	}
	if _, stderr, code := r.run("update", "f1", "--timeout", "5m"); code != 0 {
		t.Errorf("an update that leaves the ftp:// URL alone: exit %d: %s", code, stderr)
	}
	for _, bad := range []string{"http://x", "x:6379", "redis://x/zero"} {
		r.env["REDIS_URL"] = bad
		_, stderr, code := r.run("update", "f1", "--timeout", "20m")
		if code != 1 || !strings.HasPrefix(stderr, "bigtables update: Redis URL "+bad+":") {
			t.Errorf("update with REDIS_URL=%s: exit %d, %q; want exit 1 and the URL's fault", bad, code, stderr)
		}
		for _, args := range [][]string{{"worker-check", "--", "true"}, {"worker"}, {"bench", "--records", "100"}} {
			if _, stderr, code := r.run(args...); code != 1 || !strings.Contains(stderr, "Redis URL "+bad+":") {
				t.Errorf("%v with REDIS_URL=%s: exit %d, %q", args, bad, code, stderr)
			}
		}
	}
	delete(r.env, "REDIS_URL")
	out, _, _ := r.run("show", "f1")
	if !strings.Contains(out, `"timeout": "5m"`) {
		t.Errorf("a refused update changed the record:\n%s", out)
	}
}

func TestPasswordsNeverPrinted(t *testing.T) {
	r := &runner{t: t, env: map[string]string{
		"DATABASE_URL": "postgres://bt:hunter2secret@127.0.0.1:1/x?sslmode=disable",
		"REDIS_URL":    "redis://:hunter2secret@127.0.0.1:1/0",
	}}
	for _, args := range [][]string{{"migrate"}, {"worker"}, {"list"}} {
		_, stderr, code := r.run(args...)
		if code != 1 || strings.Contains(stderr, "hunter2") {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 without the password", args, code, stderr)
		}
	}
}

func TestCommandsRefuseAnOutdatedSchema(t *testing.T) {
	r := &runner{t: t, env: map[string]string{"DATABASE_URL": testsvc.Database(t)}}
	_, stderr, code := r.run("list")
	if code != 1 || !strings.Contains(stderr, "database schema is out of date: run 'bigtables migrate' (the database has no bigtables schema yet)") {
		t.Errorf("list before migrate: %d %q", code, stderr)
	}
	if _, _, code := r.run("migrate"); code != 0 {
		t.Fatal("migrate failed")
	}
	if _, stderr, code := r.run("list"); code != 0 {
		t.Errorf("list after migrate: %d %q", code, stderr)
	}
}

func TestDefaultPolicyFromConfiguration(t *testing.T) {
	r := newRunner(t)
	r.env["BIGTABLES_DEFAULT_POLICY"] = `{"timeout":"5m","strategy":{"kind":"fibonacci","unit":"1m","max_attempts":4}}`
	out, stderr, code := r.run("add", "--uid", "d1", "--input-url", "https://example.com/a")
	if code != 0 {
		t.Fatal(stderr)
	}
	var m map[string]any
	json.Unmarshal([]byte(out), &m)
	pol := m["policy"].(map[string]any)
	if pol["timeout"] != "5m" || pol["strategy"] == nil || pol["on_exhausted"] != "disable" {
		t.Errorf("policy from BIGTABLES_DEFAULT_POLICY: %v", pol)
	}
	r.env["BIGTABLES_DEFAULT_POLICY"] = `{"timeout":"forever"}`
	if _, stderr, code := r.run("add", "--uid", "d2", "--input-url", "https://example.com/a"); code != 2 || !strings.Contains(stderr, "BIGTABLES_DEFAULT_POLICY") {
		t.Errorf("bad default policy: %d %q", code, stderr)
	}
}

func TestMain(m *testing.M) {
	// Commands that talk to Redis route go-redis' own log lines through
	// their logger, process-wide; tests that run none (or run them with an
	// env that does not route) drop the library's lines (dial failures
	// against closed ports) here.
	redis.SetLogger(redisLogger{slog.New(slog.DiscardHandler)})
	os.Exit(m.Run())
}

// A database that does not exist (on a fresh PostgreSQL nothing creates the
// default bigtables) is named with the command that creates it, by migrate
// and by the commands that read records.
func TestMissingDatabaseSaysHowToCreateIt(t *testing.T) {
	dbURL := testsvc.Database(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	missing := strings.Trim(u.Path, "/") + "_missing"
	u.Path = "/" + missing
	r := &runner{t: t, env: map[string]string{"DATABASE_URL": u.String()}}
	for _, cmd := range []string{"migrate", "list"} {
		_, stderr, code := r.run(cmd)
		want := "-d postgres -c 'CREATE DATABASE \"" + missing + "\"', then run bigtables migrate"
		if code != 1 || !strings.Contains(stderr, "does not exist") || !strings.Contains(stderr, want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 and %q", cmd, code, stderr, want)
		}
	}
}
