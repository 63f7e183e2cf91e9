// Package e2e_test runs the bigtables binary as users do: migrate and add
// through the CLI, the scheduler and poller as subprocesses, a worker
// speaking the protocol, and checks the records' timelines in PostgreSQL.
package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/worker"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bigtables-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "bigtables")
	build := exec.Command("go", "build", "-race", "-o", binary, "../cmd/bigtables")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build bigtables:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type system struct {
	t     *testing.T
	env   []string
	st    *store.Store
	q     *queue.Queue
	procs []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testsvc.SyncBuffer
	done chan error
}

func newSystem(t *testing.T) *system {
	dbURL := testsvc.Database(t)
	redisURL, rdb, names := testsvc.Redis(t)
	s := &system{t: t, q: queue.New(rdb, names)}
	s.env = append(os.Environ(),
		"DATABASE_URL="+dbURL, "REDIS_URL="+redisURL,
		"BIGTABLES_INPUT_QUEUE="+names.Input, "BIGTABLES_OUTPUT_QUEUE="+names.Output, "BIGTABLES_DEAD_QUEUE="+names.Dead,
		"BIGTABLES_LOG_LEVEL=debug")
	if out, code := s.run("migrate"); code != 0 || !strings.Contains(out, "applied migration 001_init.sql") {
		t.Fatalf("migrate: exit %d: %s", code, out)
	}
	st, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	s.st = st
	t.Cleanup(func() {
		for _, p := range s.procs {
			p.cmd.Process.Kill()
			<-p.done
		}
		st.Close()
		if t.Failed() {
			for _, p := range s.procs {
				t.Logf("--- %s output:\n%s", p.name, p.out)
			}
		}
	})
	return s
}

// run runs a CLI command to completion and returns its combined output and
// exit status.
func (s *system) run(args ...string) (string, int) {
	s.t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	if err != nil {
		s.t.Fatalf("run %v: %v", args, err)
	}
	return string(out), 0
}

func (s *system) start(args ...string) *proc {
	cmd := exec.Command(binary, args...)
	cmd.Env = s.env
	p := &proc{name: strings.Join(args, " "), cmd: cmd, out: &testsvc.SyncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	s.procs = append(s.procs, p)
	return p
}

// stop sends SIGTERM and wants a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err // for Cleanup
		if err != nil {
			t.Errorf("%s exited with %v after SIGTERM; want 0", p.name, err)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("%s did not exit within 15s of SIGTERM", p.name)
	}
}

func (s *system) get(uid string) store.Row {
	s.t.Helper()
	r, err := s.st.Get(context.Background(), uid)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

func (s *system) history(uid string) []store.Attempt {
	s.t.Helper()
	h, err := s.st.History(context.Background(), uid, 100)
	if err != nil {
		s.t.Fatal(err)
	}
	// Oldest first.
	for i, j := 0, len(h)-1; i < j; i, j = i+1, j-1 {
		h[i], h[j] = h[j], h[i]
	}
	return h
}

func (s *system) waitFor(what string, timeout time.Duration, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestSystem(t *testing.T) {
	s := newSystem(t)
	// These records share one host and fail on purpose, each for its own
	// reason: the upstream's breaker (TestBreakerDeadAndHealthyUpstreams)
	// would park them instead of letting their policies disable them.
	if out, code := s.run("upstream", "set", "example.com", "--breaker", "off"); code != 0 {
		t.Fatalf("upstream set: exit %d: %s", code, out)
	}
	add := func(args ...string) {
		t.Helper()
		if out, code := s.run(append([]string{"add"}, args...)...); code != 0 {
			t.Fatalf("add %v: exit %d: %s", args, code, out)
		}
	}
	add("--uid", "healthy", "--input-url", "http://example.com/healthy", "--schedule", "RRULE:FREQ=SECONDLY;INTERVAL=3", "--timeout", "2s")
	add("--uid", "flaky", "--input-url", "http://example.com/flaky", "--timeout", "PT3S", "--retries", "1 second, 2 seconds")
	add("--uid", "broken", "--input-url", "http://example.com/broken", "--timeout", "3s", "--retries", "0,1s")
	add("--uid", "hangs", "--input-url", "http://example.com/hangs", "--timeout", "1s", "--retries", "1s")
	add("--uid", "invalid", "--input-url", "http://example.com/invalid", "--timeout", "3s")

	// Bad input from an operator: refused with a message, nothing written.
	out, code := s.run("add", "--uid", "x", "--input-url", "http://example.com/x", "--schedule", "DTSTART:20240101T170000Z\nRRULE:FREQ=HOURLY;INTERVAL=2;BYHOUR=2")
	if code != 2 || !strings.Contains(out, "can never fire") {
		t.Errorf("add with an unreachable rule: exit %d: %s", code, out)
	}
	if _, err := s.st.Get(context.Background(), "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused add wrote a record: %v", err)
	}

	var mu sync.Mutex
	fixed := map[string]bool{}
	flakyCalls := 0
	handler := func(ctx context.Context, j protocol.Job) error {
		mu.Lock()
		defer mu.Unlock()
		switch j.BigTableUID {
		case "flaky":
			flakyCalls++
			if flakyCalls <= 2 {
				return fmt.Errorf("flaky failure %d", flakyCalls)
			}
		case "broken":
			if !fixed["broken"] {
				return errors.New("upstream answered 500")
			}
		case "hangs":
			mu.Unlock()
			<-ctx.Done() // never answers in time: the worker pushes nothing
			// for a job its deadline cut short, and the attempt times out
			mu.Lock()
			return ctx.Err()
		case "invalid":
			return worker.Permanent("Provided URL is invalid: "+j.InputURL, errors.New("404"))
		}
		return nil
	}
	workCtx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error)
	go func() {
		workerDone <- worker.Run(workCtx, worker.Options{Queue: s.q, Concurrency: 4, Logger: slog.New(slog.DiscardHandler)}, handler)
	}()
	sched := s.start("scheduler", "--interval", "200ms")
	poll := s.start("poller")

	s.waitFor("broken, hangs and invalid to be disabled and flaky to succeed", 30*time.Second, func() bool {
		return s.get("broken").Disabled && s.get("hangs").Disabled && s.get("invalid").Disabled &&
			len(s.history("flaky")) >= 3 && len(s.history("healthy")) >= 2
	})

	t.Run("healthy refreshes on its schedule", func(t *testing.T) {
		r := s.get("healthy")
		h := s.history("healthy")
		for _, a := range h {
			if a.Outcome != store.OutcomeSuccess {
				t.Errorf("healthy attempt %+v", a)
			}
		}
		dtstart := scheduleStart(t, r.Schedule)
		for _, a := range h[1:] {
			if off := a.StartedAt.Sub(dtstart) % (3 * time.Second); off > time.Second {
				t.Errorf("attempt started at %v, %v after a schedule occurrence", a.StartedAt, off)
			}
		}
		if !r.RefreshAt.IsZero() && r.RefreshAt.Sub(dtstart)%(3*time.Second) != 0 {
			t.Errorf("refresh_at %v is off the schedule", r.RefreshAt)
		}
	})
	t.Run("flaky fails, retries with the right spacing, succeeds", func(t *testing.T) {
		h := s.history("flaky")[:3]
		if h[0].Outcome != store.OutcomeFailure || h[1].Outcome != store.OutcomeFailure || h[2].Outcome != store.OutcomeSuccess {
			t.Fatalf("flaky history %+v", h)
		}
		if gap := h[1].StartedAt.Sub(h[0].FinishedAt); gap < time.Second || gap > 3*time.Second {
			t.Errorf("retry 1 started %v after failure 1; want about 1s", gap)
		}
		if gap := h[2].StartedAt.Sub(h[1].FinishedAt); gap < 2*time.Second || gap > 4*time.Second {
			t.Errorf("retry 2 started %v after failure 2; want about 2s", gap)
		}
		if r := s.get("flaky"); r.AttemptNo != 0 || r.Disabled || !r.FailingSince.IsZero() {
			t.Errorf("flaky after success %+v", r.State)
		}
	})
	t.Run("broken is disabled after its retries", func(t *testing.T) {
		r := s.get("broken")
		if r.DisabledReason != "Cannot refresh BigTable after 3 attempts: upstream answered 500" || !r.RefreshAt.IsZero() || r.Running() {
			t.Errorf("broken %+v", r.State)
		}
		if h := s.history("broken"); len(h) != 3 || h[2].Decision != "exhausted" {
			t.Errorf("broken history %+v", h)
		}
	})
	t.Run("hangs times out twice", func(t *testing.T) {
		r := s.get("hangs")
		h := s.history("hangs")
		if len(h) != 2 || h[0].Outcome != store.OutcomeTimeout || h[1].Outcome != store.OutcomeTimeout {
			t.Errorf("hangs history %+v", h)
		}
		if r.DisabledReason != "Cannot refresh BigTable after 2 attempts: timeout" {
			t.Errorf("hangs reason %q", r.DisabledReason)
		}
	})
	t.Run("not retryable is final at once", func(t *testing.T) {
		r := s.get("invalid")
		if r.AttemptNo != 1 || r.DisabledReason != "Provided URL is invalid: http://example.com/invalid" {
			t.Errorf("invalid %+v", r.State)
		}
	})
	t.Run("stale and malformed results change nothing and lose nothing", func(t *testing.T) {
		ctx := context.Background()
		before := s.get("broken")
		old := s.history("broken")[0].AttemptUID
		stale := protocol.Result{BigTableUID: "broken", AttemptUID: old, Type: protocol.Success}
		s.q.PushResult(ctx, stale.Encode())
		s.q.PushResult(ctx, []byte(`{"big_table_uid":"broken","type":"success"}`))
		s.waitFor("the malformed result to be dead-lettered", 10*time.Second, func() bool {
			_, output, dead, _ := s.q.Lengths(ctx)
			return dead == 1 && output == 0
		})
		time.Sleep(300 * time.Millisecond) // the batch commits before its acknowledgement
		after := s.get("broken")
		if after.State != before.State || !after.UpdatedAt.Equal(before.UpdatedAt) {
			t.Errorf("a stale result changed the record: %+v -> %+v", before.State, after.State)
		}
		out, _ := s.run("show", "broken")
		var shown map[string]any
		if err := json.Unmarshal([]byte(out), &shown); err != nil || shown["disabled_reason"] != "Cannot refresh BigTable after 3 attempts: upstream answered 500" {
			t.Errorf("show broken = %s (%v)", out, err)
		}
		for _, key := range []string{"uid", "input_url", "schedule", "refresh_at", "attempt_uid", "attempt_no", "started_at", "deadline_at", "disabled_until_update", "disabled_reason", "status_message"} {
			if _, ok := shown[key]; !ok {
				t.Errorf("show lacks key %q", key)
			}
		}
	})
	t.Run("update re-enables", func(t *testing.T) {
		mu.Lock()
		fixed["broken"] = true
		mu.Unlock()
		out, code := s.run("update", "broken", "--input-url", "http://example.com/fixed")
		if code != 0 {
			t.Fatalf("update: exit %d: %s", code, out)
		}
		s.waitFor("broken to succeed after the update", 10*time.Second, func() bool {
			h := s.history("broken")
			return h[len(h)-1].Outcome == store.OutcomeSuccess
		})
		r := s.get("broken")
		if r.Disabled || r.DisabledReason != "" || r.AttemptNo != 0 || r.InputURL != "http://example.com/fixed" {
			t.Errorf("broken after update %+v", r)
		}
		out, _ = s.run("list", "--disabled")
		if strings.Contains(out, "broken") || !strings.Contains(out, "hangs") {
			t.Errorf("list --disabled:\n%s", out)
		}
	})

	sched.stop(t)
	poll.stop(t)
	stopWorker()
	<-workerDone
	for _, p := range []*proc{sched, poll} {
		if !strings.Contains(p.out.String(), "stopped") {
			t.Errorf("%s did not log a clean stop", p.name)
		}
	}
}

func scheduleStart(t *testing.T, text string) time.Time {
	t.Helper()
	line, _, _ := strings.Cut(text, "\n")
	ts, err := time.Parse("20060102T150405Z", strings.TrimPrefix(line, "DTSTART:"))
	if err != nil {
		t.Fatalf("schedule %q: %v", text, err)
	}
	return ts
}
