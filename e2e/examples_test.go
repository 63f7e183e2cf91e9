package e2e_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/redis/go-redis/v9"
)

// exampleWorkers are the workers in other languages, each as a command run
// from the repository root.
var exampleWorkers = []struct {
	name string
	cmd  []string
	need string // a file that must exist
}{
	{"python", []string{"/usr/bin/python3", "examples/python/worker.py"}, "/usr/bin/python3"},
	{"node", []string{"node", "examples/node/worker.js"}, "../examples/node/node_modules/redis"},
	{"shell", []string{"sh", "examples/shell/worker.sh"}, "/usr/bin/jq"},
	{"go (bigtables worker)", []string{"BINARY", "worker", "--concurrency", "2"}, ""},
}

func exampleCommand(t *testing.T, cmd []string) []string {
	out := append([]string{}, cmd...)
	if out[0] == "BINARY" {
		out[0] = binary
	}
	return out
}

func needDeps(t *testing.T, path string) {
	t.Helper()
	if path == "" {
		return
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing in CI: scripts/example-deps.sh installs it", path)
		}
		t.Skipf("skipping: %s is missing (run scripts/example-deps.sh)", path)
	}
}

// TestExamplesPassWorkerCheck runs the conformance check on every example.
func TestExamplesPassWorkerCheck(t *testing.T) {
	s := newSystem(t)
	for _, w := range exampleWorkers {
		t.Run(w.name, func(t *testing.T) {
			needDeps(t, w.need)
			t.Parallel()
			args := append([]string{"worker-check", "--"}, exampleCommand(t, w.cmd)...)
			cmd := exec.Command(binary, args...)
			cmd.Dir = ".."
			cmd.Env = s.env
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "8 passed, 0 failed") {
				t.Errorf("worker-check %v: %v\n%s", w.cmd, err, out)
			}
		})
	}
}

// A worker that keeps nothing of the protocol fails the check.
func TestWorkerCheckFailsABadWorker(t *testing.T) {
	s := newSystem(t)
	cmd := exec.Command(binary, "worker-check", "--grace", "1s", "--", "sh", "-c", "trap '' TERM; sleep 60")
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "FAIL") || !strings.Contains(string(out), "took no job") {
		t.Errorf("worker-check passed a worker that does nothing: %v\n%s", err, out)
	}
}

// TestExamplesEndToEnd runs each example against the real scheduler and
// poller: a record whose URL answers is refreshed; one whose URL is gone is
// disabled at once with the worker's reason.
func TestExamplesEndToEnd(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/ok") {
			w.Write([]byte("fine"))
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	for _, w := range exampleWorkers {
		t.Run(w.name, func(t *testing.T) {
			needDeps(t, w.need)
			s := newSystem(t)
			for _, rec := range [][]string{{"good", srv.URL + "/ok"}, {"gone", srv.URL + "/gone"}} {
				if out, code := s.run("add", "--uid", rec[0], "--input-url", rec[1], "--timeout", "10s"); code != 0 {
					t.Fatalf("add: %s", out)
				}
			}
			sched := s.start("scheduler", "--interval", "200ms")
			poll := s.start("poller")
			args := exampleCommand(t, w.cmd)
			worker := exec.Command(args[0], args[1:]...)
			worker.Dir = ".."
			worker.Env = s.env
			var wout testsvc.SyncBuffer
			worker.Stdout, worker.Stderr = &wout, &wout
			if err := worker.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- worker.Wait() }()
			s.waitFor("good to succeed and gone to be disabled", 20*time.Second, func() bool {
				h := s.history("good")
				return len(h) > 0 && h[0].Outcome == "success" && s.get("gone").Disabled
			})
			if r := s.get("gone"); r.DisabledReason != "Provided URL is invalid: "+srv.URL+"/gone" || r.AttemptNo != 1 {
				t.Errorf("gone: %+v", r.State)
			}
			worker.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("worker exited with %v after SIGTERM\n%s", err, wout.String())
				}
			case <-time.After(10 * time.Second):
				worker.Process.Kill()
				t.Errorf("worker still running 10s after SIGTERM")
			}
			sched.stop(t)
			poll.stop(t)
		})
	}
}

// workerEnv gives a worker private queues on the test's Redis, through a URL
// that carries a password (Redis accepts any for its passwordless default
// user), so that the test can check it is never printed.
func workerEnv(t *testing.T) (env []string, q *queue.Queue, rdb redis.UniversalClient, names queue.Names, password string) {
	rawURL, rdb, names := testsvc.Redis(t)
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u.User.Password(); !ok {
		u.User = url.UserPassword("default", "s3cret-"+testsvc.RandomID())
	}
	password, _ = u.User.Password()
	env = append(os.Environ(), "REDIS_URL="+u.String(),
		"BIGTABLES_INPUT_QUEUE="+names.Input, "BIGTABLES_OUTPUT_QUEUE="+names.Output, "BIGTABLES_DEAD_QUEUE="+names.Dead,
		"BIGTABLES_LOG_LEVEL=debug")
	return env, queue.New(rdb, names), rdb, names, password
}

// startWorker starts a worker command from the repository root in a process
// group of its own (as a shell starts a foreground job), and stops it when
// the test ends.
func startWorker(t *testing.T, args []string, env []string) (*exec.Cmd, *testsvc.SyncBuffer, chan error) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = ".."
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &testsvc.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		if t.Failed() {
			t.Logf("--- worker output:\n%s", out)
		}
	})
	return cmd, out, done
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

func waitExit(t *testing.T, done chan error, within time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		done <- err // for Cleanup
		if err != nil {
			t.Errorf("worker exited with %v; want 0", err)
		}
	case <-time.After(within):
		t.Fatalf("worker still running after %v", within)
	}
}

// Every example drops, without work, a job past its deadline and one whose
// attempt was cancelled, and prints a start line (password hidden) and one
// line per job.
func TestExamplesSkipJobsThatCannotRun(t *testing.T) {
	for _, w := range exampleWorkers {
		t.Run(w.name, func(t *testing.T) {
			needDeps(t, w.need)
			t.Parallel()
			var mu sync.Mutex
			var hits []string
			srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				mu.Lock()
				hits = append(hits, r.URL.Path)
				mu.Unlock()
			}))
			defer srv.Close()
			env, q, rdb, names, password := workerEnv(t)
			ctx := context.Background()
			var jobs [][]byte
			for _, uid := range []string{"expired", "cancelled", "good"} {
				deadline := time.Now().Add(time.Minute)
				if uid == "expired" {
					deadline = time.Now().Add(-time.Second)
				}
				j := protocol.Job{BigTableUID: uid, AttemptUID: "attempt-" + uid, InputURL: srv.URL + "/" + uid, AttemptNo: 1, DeadlineAt: deadline}
				jobs = append(jobs, j.Encode())
			}
			if err := q.Cancel(ctx, map[string]time.Time{"attempt-cancelled": time.Now().Add(time.Minute)}); err != nil {
				t.Fatal(err)
			}
			if err := q.PushJobs(ctx, jobs); err != nil {
				t.Fatal(err)
			}
			cmd, out, done := startWorker(t, exampleCommand(t, w.cmd), env)
			waitUntil(t, "the good job's result and both skips", 20*time.Second, func() bool {
				n, _ := rdb.LLen(ctx, names.Output).Result()
				s := out.String()
				return n >= 1 && strings.Contains(s, "its deadline has passed") && strings.Contains(s, "its attempt was cancelled")
			})
			cmd.Process.Signal(syscall.SIGTERM)
			waitExit(t, done, 10*time.Second)
			raw, _ := rdb.LRange(ctx, names.Output, 0, -1).Result()
			if len(raw) != 1 || !strings.Contains(raw[0], `"good"`) {
				t.Errorf("results %v; want good's only", raw)
			}
			mu.Lock()
			if len(hits) != 1 || hits[0] != "/good" {
				t.Errorf("the worker fetched %v; want [/good]", hits)
			}
			mu.Unlock()
			s := out.String()
			if strings.Contains(s, password) {
				t.Errorf("the worker printed the Redis password:\n%s", s)
			}
			if !strings.HasPrefix(w.cmd[0], "BINARY") && !strings.Contains(s, "input "+names.Input+", output "+names.Output+", redis ") {
				t.Errorf("no start line naming the queues and Redis:\n%s", s)
			}
		})
	}
}

// liveInGroup lists the live processes of group pgid (zombies do not count:
// they are dead, waiting to be reaped by a parent that may not care).
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
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])) // state ppid pgrp ...
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			live = append(live, pid)
		}
	}
	return live
}

func pushOneJob(t *testing.T, q *queue.Queue, timeout time.Duration) {
	t.Helper()
	j := protocol.Job{BigTableUID: "job", AttemptUID: "attempt-" + testsvc.RandomID(), InputURL: "http://example.com/", AttemptNo: 1, DeadlineAt: time.Now().Add(timeout)}
	if err := q.PushJobs(context.Background(), [][]byte{j.Encode()}); err != nil {
		t.Fatal(err)
	}
}

// A Ctrl-C at the terminal (SIGINT to the worker's whole process group,
// here followed at once by a SIGTERM, as a wrapper script forwards it) does
// not reach an --exec job, which runs in its own group: the worker finishes
// it, pushes its success, and exits 0.
func TestExecWorkerFinishesItsJobOnCtrlC(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("skipping: Unix process groups and /proc")
	}
	env, q, rdb, names, _ := workerEnv(t)
	dir := t.TempDir()
	env = append(env, "DIR="+dir)
	pushOneJob(t, q, time.Minute)
	cmd, _, done := startWorker(t, []string{binary, "worker", "--concurrency", "1",
		"--exec", `echo $$ >"$DIR/started"; sleep 1; echo finished >"$DIR/finished"`}, env)
	waitUntil(t, "the job to start", 20*time.Second, func() bool { _, err := os.Stat(filepath.Join(dir, "started")); return err == nil })
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	// A wrapper script's trap forwarding its own SIGTERM at once: still one stop.
	cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, done, 15*time.Second)
	raw, _ := rdb.LRange(context.Background(), names.Output, 0, -1).Result()
	if len(raw) != 1 || !strings.Contains(raw[0], `"success"`) {
		t.Errorf("results %v; want one success", raw)
	}
	if _, err := os.Stat(filepath.Join(dir, "finished")); err != nil {
		t.Errorf("the job did not finish: %v", err)
	}
}

// A second SIGTERM stops the --exec job in hand at once: its whole process
// group is killed, nothing is pushed for it (its attempt times out at its
// deadline, as after a crash), and the worker exits 0.
func TestExecWorkerSecondSignalStopsTheJob(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("skipping: Unix process groups and /proc")
	}
	env, q, rdb, names, _ := workerEnv(t)
	dir := t.TempDir()
	env = append(env, "DIR="+dir)
	pushOneJob(t, q, time.Minute)
	cmd, out, done := startWorker(t, []string{binary, "worker", "--concurrency", "1",
		"--exec", `sleep 30 & echo $$ >"$DIR/started"; wait`}, env)
	started := filepath.Join(dir, "started")
	waitUntil(t, "the job to start", 20*time.Second, func() bool {
		b, err := os.ReadFile(started)
		return err == nil && bytes.HasSuffix(b, []byte("\n"))
	})
	b, _ := os.ReadFile(started)
	pgid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	cmd.Process.Signal(syscall.SIGTERM)
	waitUntil(t, "the worker to say it is stopping", 10*time.Second, func() bool { return strings.Contains(out.String(), "a second signal stops them") })
	// Signals within a second of the first count as the first one (the
	// worker's clock, not injectable in a binary): wait that second out.
	time.Sleep(1100 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, done, 10*time.Second)
	if n, _ := rdb.LLen(context.Background(), names.Output).Result(); n != 0 {
		t.Errorf("%d results pushed for a job the worker stopped; want none", n)
	}
	if !strings.Contains(out.String(), "stopped=1") {
		t.Errorf("the worker did not count the stopped job:\n%s", out)
	}
	waitUntil(t, "the job's processes to die", 5*time.Second, func() bool { return len(liveInGroup(t, pgid)) == 0 })
}

// A Ctrl-C at the terminal (SIGINT to the worker's whole process group)
// while every example is fetching: each finishes the job in hand, pushes its
// success and exits 0.
func TestExamplesFinishTheirJobOnCtrlC(t *testing.T) {
	for _, w := range exampleWorkers {
		t.Run(w.name, func(t *testing.T) {
			needDeps(t, w.need)
			t.Parallel()
			requested := make(chan struct{}, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				requested <- struct{}{}
				time.Sleep(time.Second) // the job in hand when the Ctrl-C comes
				rw.Write([]byte("fine"))
			}))
			defer srv.Close()
			env, q, rdb, names, _ := workerEnv(t)
			j := protocol.Job{BigTableUID: "job", AttemptUID: "attempt-1", InputURL: srv.URL + "/", AttemptNo: 1, DeadlineAt: time.Now().Add(time.Minute)}
			if err := q.PushJobs(context.Background(), [][]byte{j.Encode()}); err != nil {
				t.Fatal(err)
			}
			cmd, _, done := startWorker(t, exampleCommand(t, w.cmd), env)
			select {
			case <-requested:
			case <-time.After(20 * time.Second):
				t.Fatal("the worker never fetched the job's URL")
			}
			syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			waitExit(t, done, 15*time.Second)
			raw, _ := rdb.LRange(context.Background(), names.Output, 0, -1).Result()
			if len(raw) != 1 || !strings.Contains(raw[0], `"success"`) {
				t.Errorf("results %v; want one success", raw)
			}
		})
	}
}
