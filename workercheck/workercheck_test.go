package workercheck

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/worker"
)

// testWorkerEnv makes the test binary act as a worker instead of running
// the tests: "good" keeps the protocol, "deaf" too but ignores SIGTERM,
// "crash-after-one" takes one job and exits 1.
const testWorkerEnv = "WORKERCHECK_TEST_WORKER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(testWorkerEnv); mode != "" {
		os.Exit(testWorker(mode))
	}
	os.Exit(m.Run())
}

func testWorker(mode string) int {
	ctx := context.Background()
	if mode == "deaf" {
		signal.Ignore(syscall.SIGTERM)
		mode = "good"
	} else {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGTERM)
		defer stop()
	}
	rdb, err := queue.Connect(ctx, os.Getenv("REDIS_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer rdb.Close()
	q := queue.New(rdb, queue.Names{Input: os.Getenv("BIGTABLES_INPUT_QUEUE"),
		Output: os.Getenv("BIGTABLES_OUTPUT_QUEUE"), Dead: os.Getenv("BIGTABLES_DEAD_QUEUE")})
	switch mode {
	case "good":
		if err := worker.Run(ctx, worker.Options{Queue: q, Concurrency: 5}, worker.HTTPGet(&http.Client{})); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "crash-after-one":
		if _, err := q.PopJob(ctx, 5*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		fmt.Fprintln(os.Stderr, "crashing after one job")
		return 1
	}
	fmt.Fprintln(os.Stderr, "unknown mode", mode)
	return 2
}

func run(t *testing.T, cfg Config) Report {
	t.Helper()
	url, rdb, _ := testsvc.Redis(t)
	cfg.RedisURL, cfg.Redis = url, rdb
	if cfg.Grace == 0 {
		cfg.Grace = time.Second
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

// selfAs is the test binary started as a worker in the given mode.
func selfAs(t *testing.T, mode string) []string {
	t.Helper()
	t.Setenv(testWorkerEnv, mode) // inherited by the worker through os.Environ
	return []string{os.Args[0]}
}

// failsEveryCheck asserts that the report holds every check, each failed,
// with a detail containing want.
func failsEveryCheck(t *testing.T, rep Report, want string) {
	t.Helper()
	all := allChecks()
	if len(rep.Checks) != len(all) {
		t.Errorf("%d checks; want all %d:\n%s", len(rep.Checks), len(all), dump(rep))
	}
	for _, c := range rep.Checks {
		if c.OK {
			t.Errorf("%s / %s: pass; want FAIL (%s)", c.Case, c.What, c.Detail)
		}
		if !strings.Contains(c.Detail, want) {
			t.Errorf("%s / %s: detail %q; want it to contain %q", c.Case, c.What, c.Detail, want)
		}
	}
	if rep.Passed() {
		t.Errorf("Passed() = true")
	}
}

func dump(rep Report) string {
	var b strings.Builder
	for _, c := range rep.Checks {
		fmt.Fprintf(&b, "  %s / %s: %v %s\n", c.Case, c.What, c.OK, c.Detail)
	}
	return b.String() + "output:\n" + rep.Output
}

// A worker that crashes at start (a missing module, a typo) fails every
// check, saying it exited before taking a job.
func TestWorkerExitingAtStartFailsEveryCheck(t *testing.T) {
	rep := run(t, Config{Command: []string{"sh", "-c", "echo 'ModuleNotFoundError: redis' >&2; exit 1"}})
	failsEveryCheck(t, rep, "exited before taking a job (exit status 1)")
	if !strings.Contains(rep.Output, "ModuleNotFoundError") {
		t.Errorf("output %q lacks what the worker printed", rep.Output)
	}
}

// A worker that runs but never pops a job (wrong queue, wrong Redis) fails
// every check once StartTimeout has passed.
func TestWorkerNeverPoppingFailsEveryCheck(t *testing.T) {
	rep := run(t, Config{Command: []string{"sleep", "60"}, StartTimeout: time.Second})
	failsEveryCheck(t, rep, "took no job")
}

// A worker that takes one job and crashes fails every check: no result is
// well-formed or echoed, no case is answered, the deadline case is not
// "stopped" by a dead worker, and it did not wait for SIGTERM.
func TestWorkerCrashingAfterOneJobFailsEveryCheck(t *testing.T) {
	rep := run(t, Config{Command: selfAs(t, "crash-after-one")})
	failsEveryCheck(t, rep, "")
	for _, c := range rep.Checks {
		if c.Case == cases[0].name && !strings.Contains(c.Detail, "no result") {
			t.Errorf("the job taken: detail %q; want no result", c.Detail)
		}
		if c.Case == cases[1].name && !strings.Contains(c.Detail, "never took this job") {
			t.Errorf("a job not taken: detail %q; want never took", c.Detail)
		}
	}
}

// The reference worker passes every check.
func TestGoodWorkerPassesEveryCheck(t *testing.T) {
	rep := run(t, Config{Command: selfAs(t, "good")})
	if !rep.Passed() || len(rep.Checks) != len(allChecks()) {
		t.Errorf("the reference worker does not pass:\n%s", dump(rep))
	}
}

// A worker that keeps the protocol but ignores SIGTERM fails the shutdown
// check only.
func TestWorkerIgnoringSIGTERMFailsShutdown(t *testing.T) {
	rep := run(t, Config{Command: selfAs(t, "deaf")})
	for _, c := range rep.Checks {
		if c.OK != (c.Case != "shutdown") {
			t.Errorf("%s / %s: ok %v (%s)", c.Case, c.What, c.OK, c.Detail)
		}
		if c.Case == "shutdown" && c.Detail != "still running after SIGTERM" {
			t.Errorf("shutdown detail %q", c.Detail)
		}
	}
}
