package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/worker"
	"github.com/redis/go-redis/v9"
)

func job(url string, timeout time.Duration) protocol.Job {
	return protocol.Job{BigTableUID: "bt", AttemptUID: "c1", InputURL: url, AttemptNo: 1, DeadlineAt: time.Now().Add(timeout)}
}

func TestHTTPGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.Write([]byte("data"))
		case "/gone":
			w.WriteHeader(http.StatusGone)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		case "/broken":
			w.WriteHeader(http.StatusInternalServerError)
		case "/limited":
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/limited-until":
			w.Header().Set("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/limited-bare":
			w.WriteHeader(http.StatusTooManyRequests)
		case "/unavailable":
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/teapot":
			w.WriteHeader(http.StatusTeapot)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	h := worker.HTTPGet(srv.Client())
	at := time.Date(2015, 10, 21, 7, 28, 0, 0, time.UTC)
	tests := []struct {
		path       string
		timeout    time.Duration
		wantErr    string // "" for success
		permanent  bool
		kind       string
		retryAfter *protocol.RetryAfter
	}{
		{"/ok", time.Minute, "", false, "", nil},
		{"/missing", time.Minute, "404 Not Found", true, "gone", nil},
		{"/gone", time.Minute, "410 Gone", true, "gone", nil},
		{"/broken", time.Minute, "500 Internal Server Error", false, "upstream_5xx", nil},
		{"/unavailable", time.Minute, "503 Service Unavailable", false, "upstream_5xx", protocol.RetryAfterSeconds(120)},
		{"/limited", time.Minute, "429 Too Many Requests", false, "rate_limited", protocol.RetryAfterSeconds(30)},
		{"/limited-until", time.Minute, "429 Too Many Requests", false, "rate_limited", protocol.RetryAfterAt(at)},
		{"/limited-bare", time.Minute, "429 Too Many Requests", false, "rate_limited", nil},
		{"/teapot", time.Minute, "418", false, "", nil},
		{"/slow", 200 * time.Millisecond, "context deadline exceeded", false, "", nil},
	}
	for _, tt := range tests {
		j := job(srv.URL+tt.path, tt.timeout)
		ctx, cancel := context.WithDeadline(context.Background(), j.DeadlineAt)
		err := h(ctx, j)
		cancel()
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v; want success", tt.path, err)
			}
			continue
		}
		var perm *worker.PermanentError
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || errors.As(err, &perm) != tt.permanent {
			t.Errorf("%s: err = %v; want %q, permanent %v", tt.path, err, tt.wantErr, tt.permanent)
		}
		if tt.permanent && perm.Reason != "Provided URL is invalid: "+j.InputURL {
			t.Errorf("%s: reason %q", tt.path, perm.Reason)
		}
		var kinded *worker.KindError
		gotKind, gotRA := "", (*protocol.RetryAfter)(nil)
		if errors.As(err, &kinded) {
			gotKind, gotRA = kinded.Kind, kinded.RetryAfter
		}
		if gotKind != tt.kind || (gotRA == nil) != (tt.retryAfter == nil) || gotRA != nil && *gotRA != *tt.retryAfter {
			t.Errorf("%s: kind %q retry_after %+v; want %q %+v", tt.path, gotKind, gotRA, tt.kind, tt.retryAfter)
		}
	}
	// No answer at all is a network failure; a URL that cannot be requested is bad input.
	j := job("http://127.0.0.1:1/", time.Minute)
	var kinded *worker.KindError
	if err := h(context.Background(), j); !errors.As(err, &kinded) || kinded.Kind != "network" {
		t.Errorf("refused connection: %v; want kind network", err)
	}
	j = job("http://exa mple.com/\x00", time.Minute)
	var perm *worker.PermanentError
	if err := h(context.Background(), j); !errors.As(err, &kinded) || kinded.Kind != "bad_input" || !errors.As(err, &perm) {
		t.Errorf("unrequestable URL: %v; want kind bad_input, not retryable", err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	for in, want := range map[string]*protocol.RetryAfter{
		"":                              nil,
		"0":                             protocol.RetryAfterSeconds(0),
		" 45 ":                          protocol.RetryAfterSeconds(45),
		"-3":                            nil,
		"soon":                          nil,
		"Sun, 06 Nov 1994 08:49:37 GMT": protocol.RetryAfterAt(time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC)),
	} {
		got := worker.ParseRetryAfter(in)
		if (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Errorf("ParseRetryAfter(%q) = %+v; want %+v", in, got, want)
		}
	}
}

func TestExec(t *testing.T) {
	tests := []struct {
		cmd     string
		timeout time.Duration
		wantErr string
	}{
		{`read line; case "$line" in *'"refresh_attempt_uid":"c1"'*) exit 0;; esac; exit 9`, time.Minute, ""},
		{`test "$BIGTABLES_UID" = bt`, time.Minute, ""},
		{`echo working >&2; echo "upstream said no" >&2; exit 3`, time.Minute, "upstream said no"},
		{`exit 1`, time.Minute, "exit status 1"},
		{`sleep 5`, 300 * time.Millisecond, "stopped at the deadline"},
	}
	for _, tt := range tests {
		j := job("http://example.com/", tt.timeout)
		ctx, cancel := context.WithDeadline(context.Background(), j.DeadlineAt)
		start := time.Now()
		err := worker.Exec(tt.cmd)(ctx, j)
		cancel()
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("Exec(%q) = %v; want %q", tt.cmd, err, tt.wantErr)
		}
		if time.Since(start) > 4*time.Second {
			t.Errorf("Exec(%q) outlived its deadline", tt.cmd)
		}
	}
}

func TestRunHandlesJobsAndStopsGracefully(t *testing.T) {
	_, rdb, names := testsvc.Redis(t)
	q := queue.New(rdb, names)
	ctx := context.Background()
	for _, uid := range []string{"ok", "fail", "perm", "panic", "limited"} {
		j := job("http://example.com/"+uid, time.Minute)
		j.BigTableUID, j.AttemptUID = uid, "c1-"+uid
		if err := q.PushJobs(ctx, [][]byte{j.Encode()}); err != nil {
			t.Fatal(err)
		}
	}
	expired := job("http://example.com/late", -time.Second)
	q.PushJobs(ctx, [][]byte{expired.Encode(), []byte("garbage")})

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		done <- worker.Run(runCtx, worker.Options{Queue: q, Concurrency: 2, Logger: slog.New(slog.DiscardHandler)},
			func(ctx context.Context, j protocol.Job) error {
				if _, ok := ctx.Deadline(); !ok {
					return errors.New("no deadline on the handler's context")
				}
				worker.Status(ctx, "working on "+j.BigTableUID)
				switch j.BigTableUID {
				case "fail":
					return errors.New("upstream 500")
				case "perm":
					return worker.Permanent("Provided URL is invalid", nil)
				case "panic":
					panic("oops")
				case "limited":
					return worker.Kinded("rate limited\t"+strings.Repeat("x", 80), protocol.RetryAfterSeconds(30), errors.New("GET: 429"))
				}
				return nil
			})
	}()
	// 5 jobs: 5 statuses and 5 results.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := rdb.LLen(ctx, names.Output).Result()
		if n >= 10 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop")
	}
	raw, _ := rdb.LRange(ctx, names.Output, 0, -1).Result()
	got := map[string]protocol.Result{}
	statuses := 0
	for _, r := range raw {
		res, err := protocol.DecodeResult([]byte(r), 0)
		if err != nil {
			t.Fatalf("worker pushed a malformed result: %v", err)
		}
		if res.Type == protocol.Status {
			statuses++
			continue
		}
		got[res.BigTableUID] = res
	}
	if statuses != 5 || len(got) != 5 {
		t.Fatalf("%d statuses and %d results: %v", statuses, len(got), raw)
	}
	if got["ok"].Type != protocol.Success || got["fail"].Type != protocol.Failure || got["fail"].Message != "upstream 500" ||
		!got["perm"].NotRetryable() || got["perm"].UserFriendlyReason != "Provided URL is invalid" ||
		got["panic"].Type != protocol.Failure || !strings.Contains(got["panic"].Message, "panicked") {
		t.Errorf("results %+v", got)
	}
	// A kind the protocol would refuse is made acceptable, not dead-lettered.
	if l := got["limited"]; l.Kind != "rate_limited_"+strings.Repeat("x", 51) || l.RetryAfter == nil || l.RetryAfter.Seconds != 30 || l.Message != "GET: 429" {
		t.Errorf("kinded failure %+v", l)
	}
	if got["ok"].AttemptUID != "c1-ok" {
		t.Errorf("attempt uid not echoed: %+v", got["ok"])
	}
}

// A running job whose attempt is superseded has its context cancelled with
// ErrSuperseded, and pushes no result.
func TestSupersededJobIsCancelled(t *testing.T) {
	_, rdb, names := testsvc.Redis(t)
	q := queue.New(rdb, names)
	ctx := context.Background()
	j := job("http://example.com/", time.Minute)
	q.PushJobs(ctx, [][]byte{j.Encode()})
	cause := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		done <- worker.Run(runCtx, worker.Options{Queue: q, CancelPoll: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)},
			func(ctx context.Context, j protocol.Job) error {
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return ctx.Err()
			})
	}()
	time.Sleep(300 * time.Millisecond)
	if err := q.Cancel(ctx, map[string]time.Time{j.AttemptUID: j.DeadlineAt}); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-cause:
		if !errors.Is(c, worker.ErrSuperseded) {
			t.Errorf("cause = %v; want ErrSuperseded", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler was not cancelled")
	}
	stop()
	<-done
	if n, _ := rdb.LLen(ctx, names.Output).Result(); n != 0 {
		t.Errorf("a superseded job pushed %d results", n)
	}
	if ttl, _ := rdb.TTL(ctx, names.CancelKey(j.AttemptUID)).Result(); ttl < time.Minute || ttl > 2*time.Minute {
		t.Errorf("cancel marker TTL %v; want about the deadline + 1 minute", ttl)
	}
}

// procState returns the state letter of a process ('R', 'S', 'Z', ...) and
// its process group, or 0 if it does not exist.
func procState(pid int) (state byte, pgrp int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 3 {
		return 0, 0
	}
	pgrp, _ = strconv.Atoi(f[2])
	return f[0][0], pgrp
}

// liveInGroup lists the processes of group pgid that are alive (zombies,
// dead but not yet reaped, do not count).
func liveInGroup(t *testing.T, pgid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("skipping: no /proc to inspect processes: %v", err)
	}
	var live []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, g := procState(pid); g == pgid && st != 'Z' && st != 'X' && st != 0 {
			live = append(live, pid)
		}
	}
	return live
}

// waitGroupGone waits (a SIGKILL takes effect asynchronously) until no
// process of the group lives, and fails the test if some still do after 5s.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		live := liveInGroup(t, pgid)
		if len(live) == 0 {
			return
		}
		if time.Since(start) > 5*time.Second {
			for _, pid := range live {
				syscall.Kill(pid, syscall.SIGKILL) // do not leave them behind
			}
			t.Fatalf("processes %v of the job's group %d are still alive", live, pgid)
		}
	}
}

// waitGone waits until the process is dead, and fails the test if it still
// lives after 5s.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if st, _ := procState(pid); st == 0 || st == 'Z' || st == 'X' {
			return
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("process %d, started by the job, is still alive after the job", pid)
			return
		}
	}
}

func waitFile(t *testing.T, path string) string {
	t.Helper()
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatalf("%s was never written", path)
	return ""
}

// An Exec job runs in a process group of its own; when its context ends,
// the whole group is killed (the shell's children too), and when the shell
// exits, whatever it left running is killed.
func TestExecKillsTheJobsProcessGroup(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("skipping: reads /proc to find the job's processes")
	}
	tests := []struct {
		name, cmd string
		cancel    bool // end the context once the job runs; else the command exits itself
		wantErr   string
	}{
		{"context ends", `echo $$ >"$DIR/pgid"; sleep 30 & echo $! >"$DIR/child"; wait`, true, "command stopped"},
		{"command exits, its child runs on", `echo $$ >"$DIR/pgid"; sleep 30 & echo $! >"$DIR/child"; exit 0`, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("DIR", dir)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- worker.Exec(tt.cmd)(ctx, job("http://example.com/", time.Minute)) }()
			pgid, _ := strconv.Atoi(waitFile(t, filepath.Join(dir, "pgid")))
			child, _ := strconv.Atoi(waitFile(t, filepath.Join(dir, "child")))
			t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) }) // if the test fails
			if pgid == syscall.Getpgrp() {
				t.Errorf("the job runs in the worker's process group %d", pgid)
			}
			if _, g := procState(child); g != pgid {
				t.Errorf("the shell's child %d is in group %d; want the job's group %d", child, g, pgid)
			}
			if tt.cancel {
				cancel()
			}
			var err error
			select {
			case err = <-errc:
			case <-time.After(10 * time.Second):
				t.Fatal("Exec did not return")
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err = %v; want %q", err, tt.wantErr)
			}
			waitGone(t, child)
			waitGroupGone(t, pgid)
		})
	}
}

// Jobs that can no longer count are dropped without work: one past its
// deadline (by the worker's clock) and one whose attempt was cancelled.
func TestSkipsJobsThatCannotRun(t *testing.T) {
	_, rdb, names := testsvc.Redis(t)
	q := queue.New(rdb, names)
	ctx := context.Background()
	now := time.Now()
	expired, cancelled, good := job("u", time.Minute), job("u", 3*time.Minute), job("u", 3*time.Minute)
	expired.BigTableUID, expired.AttemptUID = "expired", "a-expired"
	cancelled.BigTableUID, cancelled.AttemptUID = "cancelled", "a-cancelled"
	good.BigTableUID, good.AttemptUID = "good", "a-good"
	if err := q.Cancel(ctx, map[string]time.Time{cancelled.AttemptUID: cancelled.DeadlineAt}); err != nil {
		t.Fatal(err)
	}
	if err := q.PushJobs(ctx, [][]byte{expired.Encode(), cancelled.Encode(), good.Encode()}); err != nil {
		t.Fatal(err)
	}
	var stats worker.Stats
	var ran []string
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		done <- worker.Run(runCtx, worker.Options{Queue: q, Stats: &stats, Logger: slog.New(slog.DiscardHandler),
			Now: func() time.Time { return now.Add(2 * time.Minute) }}, // expired's deadline has passed, not the others'
			func(ctx context.Context, j protocol.Job) error {
				ran = append(ran, j.BigTableUID)
				return nil
			})
	}()
	waitFor(t, "the three jobs", func() bool { return stats.Pushed.Load()+stats.Expired.Load()+stats.Cancelled.Load() == 3 })
	stop()
	<-done
	if len(ran) != 1 || ran[0] != "good" {
		t.Errorf("the handler ran for %v; want [good]", ran)
	}
	if stats.Expired.Load() != 1 || stats.Cancelled.Load() != 1 {
		t.Errorf("skipped %d expired and %d cancelled; want 1 and 1", stats.Expired.Load(), stats.Cancelled.Load())
	}
	raw, _ := rdb.LRange(ctx, names.Output, 0, -1).Result()
	if len(raw) != 1 || !strings.Contains(raw[0], `"good"`) {
		t.Errorf("results %v; want only good's", raw)
	}
	if n, _ := rdb.LLen(ctx, names.Input).Result(); n != 0 {
		t.Errorf("%d jobs left in the input list", n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// runOne runs Run on one job with opts; started is closed when the handler
// runs, and the returned function stops Run's context.
func runOne(t *testing.T, opts worker.Options, h worker.Handler) (q *queue.Queue, rdb redis.UniversalClient, names queue.Names, stop func(), done chan error) {
	t.Helper()
	_, rdb, names = testsvc.Redis(t)
	q = queue.New(rdb, names)
	if err := q.PushJobs(context.Background(), [][]byte{job("http://example.com/", time.Minute).Encode()}); err != nil {
		t.Fatal(err)
	}
	opts.Queue = q
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- worker.Run(ctx, opts, h) }()
	t.Cleanup(cancel)
	return q, rdb, names, cancel, done
}

func waitDone(t *testing.T, done chan error, within time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(within):
		t.Fatalf("Run did not return within %v", within)
	}
}

// A shutdown lets the job in hand finish and pushes its result.
func TestShutdownFinishesTheJobInHand(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var stats worker.Stats
	_, rdb, names, stop, done := runOne(t, worker.Options{Stats: &stats}, func(ctx context.Context, j protocol.Job) error {
		close(started)
		<-release
		return ctx.Err()
	})
	<-started
	stop()
	close(release)
	waitDone(t, done, 10*time.Second)
	raw, _ := rdb.LRange(context.Background(), names.Output, 0, -1).Result()
	if len(raw) != 1 || !strings.Contains(raw[0], `"success"`) {
		t.Errorf("results %v; want one success", raw)
	}
}

// A job stopped by the worker's shutdown (Abort, or the grace period over)
// pushes nothing: a failure would cost the record an attempt for our stop.
func TestStoppedJobPushesNothing(t *testing.T) {
	for _, how := range []string{"abort", "grace"} {
		t.Run(how, func(t *testing.T) {
			abort, doAbort := context.WithCancel(context.Background())
			defer doAbort()
			opts := worker.Options{Stats: new(worker.Stats), Abort: abort}
			if how == "grace" {
				opts.ShutdownGrace = 50 * time.Millisecond
			}
			started, cause := make(chan struct{}), make(chan error, 1)
			_, rdb, names, stop, done := runOne(t, opts, func(ctx context.Context, j protocol.Job) error {
				close(started)
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return errors.New("interrupted")
			})
			<-started
			stop()
			if how == "abort" {
				doAbort()
			}
			waitDone(t, done, 10*time.Second)
			if c := <-cause; !errors.Is(c, worker.ErrStopped) {
				t.Errorf("cause %v; want ErrStopped", c)
			}
			if n, _ := rdb.LLen(context.Background(), names.Output).Result(); n != 0 {
				t.Errorf("a stopped job pushed %d results", n)
			}
			if opts.Stats.Stopped.Load() != 1 {
				t.Errorf("stopped = %d; want 1", opts.Stats.Stopped.Load())
			}
		})
	}
}

// A handler that still succeeds after the stop has its success pushed.
func TestStoppedJobThatSucceededIsPushed(t *testing.T) {
	abort, doAbort := context.WithCancel(context.Background())
	started := make(chan struct{})
	_, rdb, names, stop, done := runOne(t, worker.Options{Abort: abort}, func(ctx context.Context, j protocol.Job) error {
		close(started)
		<-ctx.Done()
		return nil
	})
	<-started
	stop()
	doAbort()
	waitDone(t, done, 10*time.Second)
	raw, _ := rdb.LRange(context.Background(), names.Output, 0, -1).Result()
	if len(raw) != 1 || !strings.Contains(raw[0], `"success"`) {
		t.Errorf("results %v; want one success", raw)
	}
}

// lossyProxy forwards TCP to Redis, but drops the reply to the first command
// containing match (Redis has run it) and closes that connection, as a
// network failure after the command would.
type lossyProxy struct {
	ln      net.Listener
	target  string
	match   []byte
	dropped atomic.Bool
}

func newLossyProxy(t *testing.T, target string, match string) *lossyProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{ln: ln, target: target, match: []byte(match)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.handle(c)
		}
	}()
	return p
}

func (p *lossyProxy) handle(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	var dropReply atomic.Bool
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if bytes.Contains(buf[:n], p.match) && p.dropped.CompareAndSwap(false, true) {
					dropReply.Store(true)
				}
				s.Write(buf[:n])
			}
			if err != nil {
				s.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 && dropReply.Load() {
			break
		}
		if n > 0 {
			c.Write(buf[:n])
		}
		if err != nil {
			break
		}
	}
	c.Close()
	s.Close()
}

// A final result whose push reply is lost is delivered once, although
// go-redis re-sends the command.
func TestResultPushSurvivesALostReply(t *testing.T) {
	rawURL, rdb, names := testsvc.Redis(t)
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p := newLossyProxy(t, opt.Addr, names.Output)
	opt.Addr = p.ln.Addr().String()
	lossy := redis.NewClient(opt)
	defer lossy.Close()
	var stats worker.Stats
	j := job("http://example.com/", time.Minute)
	worker.Handle(context.Background(), worker.Options{Queue: queue.New(lossy, names), Stats: &stats, CancelPoll: -1,
		Logger: slog.New(slog.DiscardHandler)}, j, func(context.Context, protocol.Job) error { return nil })
	if !p.dropped.Load() {
		t.Fatal("the proxy dropped no reply")
	}
	raw, _ := rdb.LRange(context.Background(), names.Output, 0, -1).Result()
	if len(raw) != 1 {
		t.Errorf("%d results pushed for one job: %v", len(raw), raw)
	}
	if stats.Pushed.Load() != 1 {
		t.Errorf("pushed = %d; want 1", stats.Pushed.Load())
	}
}

// Two workers handed the same attempt deliver one final result between
// them, never a success and a failure.
func TestOneFinalResultPerAttempt(t *testing.T) {
	_, rdb, names := testsvc.Redis(t)
	var stats worker.Stats
	opts := worker.Options{Queue: queue.New(rdb, names), Stats: &stats, CancelPoll: -1, Logger: slog.New(slog.DiscardHandler)}
	j := job("http://example.com/", time.Minute)
	worker.Handle(context.Background(), opts, j, func(context.Context, protocol.Job) error { return nil })
	worker.Handle(context.Background(), opts, j, func(context.Context, protocol.Job) error { return errors.New("no") })
	raw, _ := rdb.LRange(context.Background(), names.Output, 0, -1).Result()
	if len(raw) != 1 || !strings.Contains(raw[0], `"success"`) {
		t.Errorf("results %v; want the first worker's success only", raw)
	}
	if stats.Pushed.Load() != 1 || stats.Duplicates.Load() != 1 {
		t.Errorf("pushed %d, duplicates %d; want 1 and 1", stats.Pushed.Load(), stats.Duplicates.Load())
	}
	if ttl, _ := rdb.PTTL(context.Background(), names.PushedKey(j.AttemptUID)).Result(); ttl < time.Minute || ttl > 2*time.Minute {
		t.Errorf("marker TTL %v; want about the deadline + 1 minute", ttl)
	}
}

// A handler cut off by the job's deadline gets no result pushed: it would
// reach the output list after deadline_at, where it changes nothing, and the
// attempt must end as a timeout (docs/protocol.md, "Deadlines"), not as a
// failure whose message is the worker's own "stopped at the deadline". A
// handler that fails before its deadline still has its failure pushed.
func TestNoResultWhenTheDeadlineCutsTheJob(t *testing.T) {
	_, rdb, names := testsvc.Redis(t)
	q := queue.New(rdb, names)
	ctx := context.Background()
	var stats worker.Stats
	opts := worker.Options{Queue: q, Stats: &stats, Logger: slog.New(slog.DiscardHandler)}

	cut := job("u", 200*time.Millisecond)
	cut.BigTableUID, cut.AttemptUID = "cut", "a-cut"
	worker.Handle(ctx, opts, cut, func(ctx context.Context, _ protocol.Job) error {
		<-ctx.Done()
		return fmt.Errorf("command stopped at the deadline: %w", ctx.Err())
	})
	failed := job("u", time.Minute)
	failed.BigTableUID, failed.AttemptUID = "failed", "a-failed"
	worker.Handle(ctx, opts, failed, func(context.Context, protocol.Job) error { return errors.New("upstream 500") })

	raw, _ := rdb.LRange(ctx, names.Output, 0, -1).Result()
	if len(raw) != 1 || !strings.Contains(raw[0], `"failed"`) {
		t.Errorf("results %v; want only failed's", raw)
	}
	if stats.TimedOut.Load() != 1 || stats.Pushed.Load() != 1 {
		t.Errorf("timed out %d, pushed %d; want 1 and 1", stats.TimedOut.Load(), stats.Pushed.Load())
	}
}
