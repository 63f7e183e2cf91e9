package e2e_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
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
			var wout syncBuffer
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
