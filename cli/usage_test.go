package cli

import (
	"go/parser"
	"go/token"
	"regexp"
	"strings"
	"testing"
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
		if !strings.Contains(stdout, "postgres://bt:xxxxx@db:5432/x") {
			t.Errorf("%s -h does not show the database URL, redacted:\n%s", c.name, stdout)
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
