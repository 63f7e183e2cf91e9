package e2e_test

import (
	"strings"
	"testing"
)

// worker-check, run as a user runs it, fails every check of a worker that
// crashes at start (an interpreter lacking a module) and of one that runs
// but never takes a job (reading the wrong queue), and exits 1.
func TestWorkerCheckFailsAWorkerThatNeverWorks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cmd    []string
		detail string
	}{
		{"exits at start", []string{"sh", "-c", "echo 'No module named redis' >&2; exit 1"}, "exited before taking a job (exit status 1)"},
		{"never pops", []string{"sleep", "60"}, "took no job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSystem(t)
			out, code := s.run(append([]string{"worker-check", "--grace", "1s", "--"}, tc.cmd...)...)
			if code != 1 || !strings.Contains(out, "0 passed, 8 failed") || strings.Contains(out, " pass ") ||
				!strings.Contains(out, tc.detail) {
				t.Errorf("worker-check %v: exit %d; want exit 1, 0 passed, 8 failed, %q:\n%s", tc.cmd, code, tc.detail, out)
			}
		})
	}
}
