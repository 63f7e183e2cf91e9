package cli

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeCommands reads README's command reference (section "Command
// line"): the commands of its code block, each with the flags its entry
// names (an entry is a "bigtables NAME" line and the lines indented under
// it), the flags of the "Policy flags" paragraph, and the whole section.
func readmeCommands(t *testing.T) (entries map[string][]string, order []string, policyFlags []string, section string) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Command line\n")
	if !ok {
		t.Fatal(`README has no section "## Command line"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, _ := strings.Cut(section, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	flagRE := regexp.MustCompile(`--[a-z][a-z0-9-]*|\[-[a-z]\]`)
	flags := func(s string) []string {
		var out []string
		for _, f := range flagRE.FindAllString(s, -1) {
			out = append(out, strings.Trim(f, "[]"))
		}
		return out
	}
	entries = map[string][]string{}
	var cur string
	for _, line := range strings.Split(block, "\n") {
		if name, ok := strings.CutPrefix(line, "bigtables "); ok {
			cur, _, _ = strings.Cut(name, " ")
			order = append(order, cur)
		}
		if cur != "" {
			code, _, _ := strings.Cut(line, "#")
			entries[cur] = append(entries[cur], flags(code)...)
			if strings.Contains(code, "policy flags") {
				entries[cur] = append(entries[cur], "policy flags")
			}
		}
	}
	_, para, ok := strings.Cut(section, "\nPolicy flags")
	if !ok {
		t.Fatal(`README's command reference has no "Policy flags" paragraph`)
	}
	para, _, _ = strings.Cut(para, "\n\n")
	return entries, order, flags(para), section
}

// Every command is in README's command reference, and every command there
// exists; each entry names the command's own flags, the shared ones are
// in the section's text, and every environment variable the command line
// reads is in README or docs/.
func TestReadmeDocumentsEveryCommandAndFlag(t *testing.T) {
	entries, order, policyFlags, section := readmeCommands(t)
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	for _, n := range order {
		if !slices.Contains(names, n) {
			t.Errorf("README's command reference lists %q, which is no command", n)
		}
	}
	shared := map[string]bool{"--database-url": true, "--redis-url": true, "--input-queue": true, "--output-queue": true,
		"--dead-queue": true, "--log-level": true, "--log-format": true}
	for f := range shared {
		if !strings.Contains(section, "`"+f+"`") {
			t.Errorf("README's section \"Command line\" does not name %s", f)
		}
	}
	r := &runner{t: t, env: map[string]string{}}
	for _, c := range commands {
		documented, ok := entries[c.name]
		if !ok {
			t.Errorf("README's command reference has no entry for %q", c.name)
			continue
		}
		if slices.Contains(documented, "policy flags") {
			documented = append(documented, policyFlags...)
		}
		for _, f := range flagsOf(r, c.name) {
			if !shared[f] && !slices.Contains(documented, f) {
				t.Errorf("README's command reference does not give %s its flag %s", c.name, f)
			}
		}
	}
	docs := readDocs(t)
	src, _ := filepath.Glob("*.go")
	varRE := regexp.MustCompile(`e\.get(?:env)?\("([A-Z][A-Z0-9_]*)"`)
	for _, file := range src {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range varRE.FindAllStringSubmatch(string(b), -1) {
			if !strings.Contains(docs, "`"+m[1]) {
				t.Errorf("environment variable %s (read in %s) is in neither README nor docs/", m[1], file)
			}
		}
	}
}

// flagsOf returns the flags of a command as its help writes them.
func flagsOf(r *runner, name string) []string {
	e := envFor(r.env, &strings.Builder{}, &strings.Builder{})
	e.seen = &seenFlags{}
	run(context.Background(), e, []string{name, "-h"})
	var out []string
	if e.seen.fs != nil {
		e.seen.fs.VisitAll(func(f *flag.Flag) { out = append(out, flagName(f.Name)) })
	}
	if len(out) == 0 {
		r.t.Errorf("%s -h built no flag set", name)
	}
	return out
}

func readDocs(t *testing.T) string {
	var all strings.Builder
	files, _ := filepath.Glob("../docs/*.md")
	for _, f := range append(files, "../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	return all.String()
}

// README says what a thing is, not the project's internal names for its
// sources ("seed 000", "the seed's design").
func TestReadmeSpeaksToUsers(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?i)seed \d{3}|the seed\b[^-]|seed design`).FindAllString(string(b), -1) {
		t.Errorf("README uses the internal word %q: name the original BigTable refresh design, the article or the library instead", m)
	}
	if !strings.Contains(string(b), "(docs/design.md)") {
		t.Error("README does not link docs/design.md")
	}
}
