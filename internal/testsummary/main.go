// Command testsummary reads `go test -json` on standard input and prints
// what a person needs from a long run: the output of failed tests and
// broken builds, one line per package, a loud list of skipped tests grouped
// by their reason (a test skipped because PostgreSQL or Redis was missing
// did not run, whatever `ok` says), and last a line
// "N passed, N failed, N skipped". It exits 1 when a test or build failed.
//
//	set -o pipefail; go test -race -count=1 -json ./... | go run ./internal/testsummary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

func main() {
	s := newSummary(os.Stdout)
	if err := s.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if s.finish() {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output and build-fail events
}

type line struct{ test, text string }

// pkgState is what is kept of a package until it ends.
type pkgState struct {
	lines   []line
	failed  map[string]bool
	skipped int
}

type skip struct{ pkg, test string }

type summary struct {
	w                       io.Writer
	pkgs                    map[string]*pkgState
	passed, failed, skipped int
	pkgOK, pkgFailed, pkgNo int
	buildFailed             bool
	skips                   map[string][]skip // by reason
}

func newSummary(w io.Writer) *summary {
	return &summary{w: w, pkgs: map[string]*pkgState{}, skips: map[string][]skip{}}
}

func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(s.w, sc.Text()) // not an event: pass it on
			continue
		}
		s.handle(e)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read go test -json: %w", err)
	}
	return nil
}

func (s *summary) pkg(name string) *pkgState {
	p := s.pkgs[name]
	if p == nil {
		p = &pkgState{failed: map[string]bool{}}
		s.pkgs[name] = p
	}
	return p
}

func (s *summary) handle(e event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(s.w, e.Output)
		return
	case "build-fail":
		s.buildFailed = true
		return
	}
	if e.Package == "" {
		return
	}
	p := s.pkg(e.Package)
	switch e.Action {
	case "output":
		p.lines = append(p.lines, line{e.Test, e.Output})
	case "pass", "fail", "skip":
		if e.Test != "" {
			s.testDone(e, p)
		} else {
			s.packageDone(e, p)
		}
	}
}

func (s *summary) testDone(e event, p *pkgState) {
	switch e.Action {
	case "pass":
		s.passed++
	case "fail":
		s.failed++
		p.failed[e.Test] = true
	case "skip":
		s.skipped++
		p.skipped++
		reason := skipReason(p.lines, e.Test)
		s.skips[reason] = append(s.skips[reason], skip{e.Package, e.Test})
	}
}

func (s *summary) packageDone(e event, p *pkgState) {
	delete(s.pkgs, e.Package)
	switch e.Action {
	case "skip": // no test files
		s.pkgNo++
		return
	case "pass":
		s.pkgOK++
		for _, l := range p.lines {
			if l.test == "" && strings.HasPrefix(l.text, "ok ") {
				text := strings.TrimRight(l.text, "\n")
				if p.skipped > 0 {
					text += fmt.Sprintf("  (%d skipped: see below)", p.skipped)
				}
				fmt.Fprintln(s.w, text)
			}
		}
		return
	}
	// A failed package: the output of each failed test and of the package
	// itself (a panic, a timeout, a build failure), in order.
	s.pkgFailed++
	for _, l := range p.lines {
		if l.test == "" || p.failed[l.test] {
			fmt.Fprint(s.w, l.text)
		}
	}
}

var (
	frameworkLine = regexp.MustCompile(`^\s*(=== (RUN|PAUSE|CONT|NAME)|--- (SKIP|PASS|FAIL))\b`)
	fileLinePfx   = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)
)

// skipReason is what the test said when it skipped: its last line of
// output that the test framework did not write, without the file:line.
func skipReason(lines []line, test string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if l.test != test || frameworkLine.MatchString(l.text) || strings.TrimSpace(l.text) == "" {
			continue
		}
		return strings.TrimSpace(fileLinePfx.ReplaceAllString(l.text, ""))
	}
	return "(no reason given)"
}

// finish prints the summary and reports whether anything failed.
func (s *summary) finish() (failed bool) {
	// Packages that never ended (the run was cut short) count as failed.
	for name, p := range s.pkgs {
		for _, l := range p.lines {
			p.failed[l.test] = true // show all it printed
		}
		s.packageDone(event{Action: "fail", Package: name}, p)
	}
	fmt.Fprintf(s.w, "\n%d packages: %d ok, %d failed, %d without tests\n", s.pkgOK+s.pkgFailed+s.pkgNo, s.pkgOK, s.pkgFailed, s.pkgNo)
	if s.skipped > 0 {
		fmt.Fprintf(s.w, "\n!!! %d TESTS SKIPPED: they did not run (with CI set, a missing service fails the test instead)\n", s.skipped)
		reasons := make([]string, 0, len(s.skips))
		for r := range s.skips {
			reasons = append(reasons, r)
		}
		sort.Slice(reasons, func(i, j int) bool {
			if len(s.skips[reasons[i]]) != len(s.skips[reasons[j]]) {
				return len(s.skips[reasons[i]]) > len(s.skips[reasons[j]])
			}
			return reasons[i] < reasons[j]
		})
		for _, r := range reasons {
			list := s.skips[r]
			fmt.Fprintf(s.w, "  %d: %s\n", len(list), r)
			fmt.Fprintf(s.w, "     %s\n", names(list, 6))
		}
		fmt.Fprintln(s.w)
	}
	if s.buildFailed {
		fmt.Fprintln(s.w, "a build failed: see its output above")
	}
	fmt.Fprintf(s.w, "%d passed, %d failed, %d skipped\n", s.passed, s.failed, s.skipped)
	return s.failed > 0 || s.pkgFailed > 0 || s.buildFailed
}

// names lists up to max tests as pkg.Test, then how many more.
func names(list []skip, max int) string {
	var out []string
	for i, sk := range list {
		if i == max {
			out = append(out, fmt.Sprintf("and %d more", len(list)-max))
			break
		}
		out = append(out, shortPkg(sk.pkg)+"."+sk.test)
	}
	return strings.Join(out, ", ")
}

func shortPkg(p string) string {
	return strings.TrimPrefix(p, "github.com/bigtables/bigtables/")
}
