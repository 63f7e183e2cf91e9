package cli

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// Flag help and the answer to a typo never show the passwords of the URLs
// the environment gives; a typo gets the error and one line pointing at -h,
// not the whole usage.
func TestHelpAndTyposHidePasswords(t *testing.T) {
	r := &runner{t: t, env: map[string]string{
		"DATABASE_URL": "postgres://bt:hunter2secret@db:5432/x?sslmode=disable",
		"REDIS_URL":    "redis://:hunter2secret@redis:6379/0",
	}}
	for _, c := range commands {
		stdout, stderr, code := r.run(c.name, "-h")
		if code != 0 || !strings.Contains(stdout, "Usage: bigtables "+c.name) || stderr != "" {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q; want the usage on stdout, exit 0", c.name, code, stdout, stderr)
		}
		if strings.Contains(stdout, "hunter2") {
			t.Errorf("%s -h shows a password:\n%s", c.name, stdout)
		}
		if strings.Contains(stdout, "--database-url") && !strings.Contains(stdout, "postgres://bt:xxxxx@db:5432/x") {
			t.Errorf("%s -h does not show the database URL, redacted:\n%s", c.name, stdout)
		}
		if strings.Contains(stdout, "--redis-url") && !strings.Contains(stdout, "redis://:xxxxx@redis:6379/0") {
			t.Errorf("%s -h does not show the Redis URL, redacted:\n%s", c.name, stdout)
		}
	}
	_, stderr, code := r.run("list", "--limt", "5")
	want := "bigtables list: flag provided but not defined: -limt\nRun 'bigtables list -h' for usage.\n"
	if code != 2 || stderr != want {
		t.Errorf("typo: exit %d, stderr\n%s\nwant exit 2 and\n%s", code, stderr, want)
	}
}

// A log level or format nobody can use is refused by every command, from a
// flag or from the environment.
func TestBadLogSettingsAreRefused(t *testing.T) {
	r := &runner{t: t, env: map[string]string{}}
	plan := []string{"plan", "--fail-all", "--start", "2024-03-04T10:00:00Z"}
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{append(plan, "--log-format", "yaml"), nil, `--log-format "yaml": expected text or json`},
		{append(plan, "--log-level", "verbose"), nil, `--log-level "verbose": expected debug, info, warn or error`},
		{plan, map[string]string{"BIGTABLES_LOG_FORMAT": "yaml"}, `--log-format "yaml"`},
		{[]string{"explain", "--log-level", "loud"}, nil, `--log-level "loud"`},
		{[]string{"list", "--log-format", "xml"}, nil, `--log-format "xml"`},
	} {
		r.env = tt.env
		_, stderr, code := r.run(tt.args...)
		if code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v %v: exit %d, %q; want exit 2 and %q", tt.args, tt.env, code, stderr, tt.want)
		}
	}
	r.env = nil
	if _, stderr, code := r.run(append(plan, "--log-format", "json", "--log-level", "WARN")...); code != 0 {
		t.Errorf("good log settings refused: %s", stderr)
	}
	if r.processWide != 0 {
		t.Errorf("one-shot commands changed process-wide settings %d times", r.processWide)
	}
}

// The package doc and help list every command of the table, in its order.
func TestCommandTableIsDocumented(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "cli.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^\t([a-z-]+) {2,}\S`).FindAllStringSubmatch(f.Doc.Text(), -1) {
		documented = append(documented, m[1])
	}
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	if strings.Join(documented, " ") != strings.Join(names, " ") {
		t.Errorf("the package doc lists %v; the table has %v", documented, names)
	}
	r := &runner{t: t, env: map[string]string{}}
	help, _, _ := r.run("help")
	for _, n := range names {
		if !strings.Contains(help, "\n  "+n+" ") {
			t.Errorf("help does not list %s:\n%s", n, help)
		}
	}
}

// Each command's help lists the flags it uses and no other, in README's
// --flag style, and ends with examples.
func TestHelpListsOnlyTheFlagsACommandUses(t *testing.T) {
	r := &runner{t: t, env: map[string]string{}}
	shared := []string{"--database-url", "--redis-url", "--input-queue", "--output-queue", "--dead-queue"}
	uses := map[string][]string{ // of the shared flags
		"plan":         {},
		"explain":      {"--database-url"},
		"migrate":      {"--database-url"},
		"show":         {"--database-url"},
		"worker":       {"--redis-url", "--input-queue", "--output-queue", "--dead-queue"},
		"worker-check": {"--redis-url"},
		"update":       shared,
		"scheduler":    shared,
		"chaos":        {"--database-url"},
	}
	for _, c := range commands {
		help, _, _ := r.run(c.name, "-h")
		if want, ok := uses[c.name]; ok {
			for _, f := range shared {
				if listed := strings.Contains(help, "\n  "+f+" "); listed != slices.Contains(want, f) {
					t.Errorf("%s -h lists %s: %v; want %v", c.name, f, listed, !listed)
				}
			}
		}
		for _, f := range []string{"--log-level", "--log-format"} {
			if !strings.Contains(help, "\n  "+f+" ") {
				t.Errorf("%s -h does not list %s", c.name, f)
			}
		}
		if m := regexp.MustCompile(`(?m)^  -[a-z]{2,}`).FindString(help); m != "" {
			t.Errorf("%s -h writes %q with one dash; README writes --flag", c.name, m)
		}
		if !regexp.MustCompile(`\nExamples:\n  bigtables ` + c.name + `\b`).MatchString(help) {
			t.Errorf("%s -h has no examples:\n%s", c.name, help)
		}
	}
	if help, _, _ := r.run("worker-check", "-h"); !strings.Contains(help, "\n  -v\n") {
		t.Errorf("worker-check -h does not list -v:\n%s", help)
	}
}

// Logs print values as a reader wants them: no year-one times for NULLs,
// no empty decisions, durations as text in JSON too.
func TestLogValues(t *testing.T) {
	type decision string // as refresh.Decision
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		log, err := Config{LogLevel: "info", LogFormat: format}.logger(env{stderr: &buf})
		if err != nil {
			t.Fatal(err)
		}
		log.Info("result applied", "refresh_at", time.Time{}, "decision", decision(""), "reason", "",
			"retry_in", 1500*time.Millisecond, "next", time.Date(2024, 3, 4, 6, 0, 0, 0, time.UTC), slog.Group("g", "at", time.Time{}))
		got := buf.String()
		want := map[string][]string{
			"text": {"refresh_at=none", "retry_in=1.5s", "next=2024-03-04T06:00:00.000Z", "g.at=none"},
			"json": {`"refresh_at":null`, `"retry_in":"1.5s"`, `"next":"2024-03-04T06:00:00Z"`, `"g":{"at":null}`},
		}[format]
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s log %q lacks %s", format, got, w)
			}
		}
		for _, bad := range []string{"0001-01-01", "decision", "reason", "1500000000"} {
			if strings.Contains(got, bad) {
				t.Errorf("%s log %q has %s", format, got, bad)
			}
		}
	}
}

// With --log-format json (or BIGTABLES_LOG_FORMAT=json) a command's error
// is one JSON log line, as a log collector reads it; in text it stays a
// sentence.
func TestErrorsFollowTheLogFormat(t *testing.T) {
	closed := "postgres://postgres@" + closedPort(t) + "/x?sslmode=disable&connect_timeout=2"
	r := &runner{t: t, env: map[string]string{"DATABASE_URL": closed}}
	for _, tt := range []struct {
		args []string
		env  string
		code int
		want map[string]string
	}{
		{[]string{"list", "--log-format", "json"}, "", 1, map[string]string{"command": "list", "level": "ERROR"}},
		{[]string{"list", "--log-format", "json", "--limt", "5"}, "", 2, map[string]string{"err": "flag provided but not defined: -limt", "hint": "Run 'bigtables list -h' for usage."}},
		{[]string{"plan", "--fail-all", "--start", "soon"}, "json", 2, map[string]string{"command": "plan"}},
		{[]string{"frobnicate"}, "json", 2, map[string]string{"err": `unknown command "frobnicate"`}},
	} {
		r.env["BIGTABLES_LOG_FORMAT"] = tt.env
		_, stderr, code := r.run(tt.args...)
		var m map[string]any
		if code != tt.code || strings.Count(stderr, "\n") != 1 || json.Unmarshal([]byte(stderr), &m) != nil {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and one JSON line", tt.args, code, stderr, tt.code)
			continue
		}
		for k, v := range tt.want {
			if m[k] != v {
				t.Errorf("%v: %s = %v; want %q", tt.args, k, m[k], v)
			}
		}
	}
	r.env["BIGTABLES_LOG_FORMAT"] = ""
	if _, stderr, _ := r.run("list"); !strings.HasPrefix(stderr, "bigtables list: connect to database") {
		t.Errorf("text error: %q", stderr)
	}
}

// The Redis client's own lines (a dial failure) go through the command's
// logger, in its format, in one-shot commands too: not go-redis' own
// "redis: ... pool.go:" lines.
func TestRedisClientLogsThroughOurLogger(t *testing.T) {
	r := &runner{t: t, env: map[string]string{"REDIS_URL": "redis://" + closedPort(t) + "/0"}}
	_, stderr, code := r.run("worker-check", "--log-level", "debug", "--log-format", "json", "--", "true")
	if code != 1 || !strings.Contains(stderr, `"msg":"redis client"`) || !strings.Contains(stderr, "failed to dial") {
		t.Errorf("exit %d, stderr:\n%s\nwant the client's dial failure as a JSON log line", code, stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("not a JSON log line: %q", line)
		}
	}
}
