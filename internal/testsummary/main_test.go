package main

import (
	"bytes"
	"strings"
	"testing"
)

// A run shaped like `go test -json ./...` on a machine without PostgreSQL:
// one package all skipped, one with a failure, one without tests, one that
// does not build.
const run = `{"Action":"start","Package":"github.com/bigtables/bigtables/store"}
{"Action":"run","Package":"github.com/bigtables/bigtables/store","Test":"TestClaim"}
{"Action":"output","Package":"github.com/bigtables/bigtables/store","Test":"TestClaim","Output":"=== RUN   TestClaim\n"}
{"Action":"output","Package":"github.com/bigtables/bigtables/store","Test":"TestClaim","Output":"    store_test.go:20: skipping: PostgreSQL is not available: dial tcp: connection refused\n"}
{"Action":"output","Package":"github.com/bigtables/bigtables/store","Test":"TestClaim","Output":"--- SKIP: TestClaim (0.00s)\n"}
{"Action":"skip","Package":"github.com/bigtables/bigtables/store","Test":"TestClaim"}
{"Action":"run","Package":"github.com/bigtables/bigtables/store","Test":"TestLock"}
{"Action":"output","Package":"github.com/bigtables/bigtables/store","Test":"TestLock","Output":"    lock_test.go:9: skipping: PostgreSQL is not available: dial tcp: connection refused\n"}
{"Action":"skip","Package":"github.com/bigtables/bigtables/store","Test":"TestLock"}
{"Action":"output","Package":"github.com/bigtables/bigtables/store","Output":"PASS\n"}
{"Action":"output","Package":"github.com/bigtables/bigtables/store","Output":"ok  \tgithub.com/bigtables/bigtables/store\t0.02s\n"}
{"Action":"pass","Package":"github.com/bigtables/bigtables/store"}
{"Action":"run","Package":"github.com/bigtables/bigtables/refresh","Test":"TestNext"}
{"Action":"output","Package":"github.com/bigtables/bigtables/refresh","Test":"TestNext","Output":"=== RUN   TestNext\n"}
{"Action":"output","Package":"github.com/bigtables/bigtables/refresh","Test":"TestNext","Output":"--- PASS: TestNext (0.00s)\n"}
{"Action":"pass","Package":"github.com/bigtables/bigtables/refresh","Test":"TestNext"}
{"Action":"run","Package":"github.com/bigtables/bigtables/refresh","Test":"TestRetry"}
{"Action":"output","Package":"github.com/bigtables/bigtables/refresh","Test":"TestRetry","Output":"=== RUN   TestRetry\n"}
{"Action":"output","Package":"github.com/bigtables/bigtables/refresh","Test":"TestRetry","Output":"    retry_test.go:31: Next(0) = 5s; want 1s\n"}
{"Action":"output","Package":"github.com/bigtables/bigtables/refresh","Test":"TestRetry","Output":"--- FAIL: TestRetry (0.00s)\n"}
{"Action":"fail","Package":"github.com/bigtables/bigtables/refresh","Test":"TestRetry"}
{"Action":"output","Package":"github.com/bigtables/bigtables/refresh","Output":"FAIL\n"}
{"Action":"output","Package":"github.com/bigtables/bigtables/refresh","Output":"FAIL\tgithub.com/bigtables/bigtables/refresh\t0.01s\n"}
{"Action":"fail","Package":"github.com/bigtables/bigtables/refresh"}
{"Action":"output","Package":"github.com/bigtables/bigtables/workercheck","Output":"?   \tgithub.com/bigtables/bigtables/workercheck\t[no test files]\n"}
{"Action":"skip","Package":"github.com/bigtables/bigtables/workercheck"}
{"ImportPath":"github.com/bigtables/bigtables/poller","Action":"build-output","Output":"poller/poller.go:3:1: syntax error\n"}
{"ImportPath":"github.com/bigtables/bigtables/poller","Action":"build-fail"}
`

func summarize(t *testing.T, in string) (string, bool) {
	t.Helper()
	var out bytes.Buffer
	s := newSummary(&out)
	if err := s.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	failed := s.finish()
	return out.String(), failed
}

func TestSummary(t *testing.T) {
	out, failed := summarize(t, run)
	if !failed {
		t.Errorf("failed = false; want true")
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if last := lines[len(lines)-1]; last != "1 passed, 1 failed, 2 skipped" {
		t.Errorf("last line %q; want the counts", last)
	}
	for _, want := range []string{
		"ok  \tgithub.com/bigtables/bigtables/store\t0.02s  (2 skipped: see below)",
		"    retry_test.go:31: Next(0) = 5s; want 1s\n--- FAIL: TestRetry (0.00s)\n",
		"FAIL\tgithub.com/bigtables/bigtables/refresh\t0.01s",
		"poller/poller.go:3:1: syntax error",
		"!!! 2 TESTS SKIPPED",
		"  2: skipping: PostgreSQL is not available: dial tcp: connection refused\n     store.TestClaim, store.TestLock\n",
		"3 packages: 1 ok, 1 failed, 1 without tests",
		"a build failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, noise := range []string{"TestNext", "[no test files]", "=== RUN   TestClaim"} {
		if strings.Contains(out, noise) {
			t.Errorf("output has %q, the noise of passing or empty packages:\n%s", noise, out)
		}
	}
}

func TestSummaryAllPassed(t *testing.T) {
	in := `{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}
{"Action":"pass","Package":"p"}
`
	out, failed := summarize(t, in)
	if failed || strings.Contains(out, "SKIPPED") || !strings.HasSuffix(out, "\n1 passed, 0 failed, 0 skipped\n") {
		t.Errorf("failed %v, output:\n%s", failed, out)
	}
}

// A run cut short (a package with no end event) is a failure, and lines
// that are not events are passed on.
func TestSummaryCutShort(t *testing.T) {
	in := "go: downloading something\n" + `{"Action":"output","Package":"p","Test":"TestA","Output":"panic: boom\n"}
{"Action":"run","Package":"p","Test":"TestA"}
`
	out, failed := summarize(t, in)
	if !failed || !strings.Contains(out, "go: downloading something") || !strings.Contains(out, "panic: boom") || !strings.Contains(out, "1 failed, 0 without tests") {
		t.Errorf("failed %v, output:\n%s", failed, out)
	}
}
