package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/internal/wait"
)

// closedPort returns a local port nothing listens on (for now).
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// forward listens on addr and relays every connection to target, until the
// test ends: a service that comes up late.
func forward(t *testing.T, addr, target string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				go io.Copy(s, c)
				io.Copy(c, s)
			}()
		}
	}()
}

// withHost returns rawURL with its host:port replaced.
func withHost(t *testing.T, rawURL, hostPort string) (string, string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	old := u.Host
	u.Host = hostPort
	return u.String(), old
}

// The long-running commands wait for services that are not up yet, saying
// so, and carry on once they are: start order does not matter. Here
// PostgreSQL (for the scheduler and poller) or Redis (for the worker)
// answers only after the command's second try.
func TestProcessesWaitForTheirServicesAtStart(t *testing.T) {
	r := newRunner(t)
	redisURL, _, names := testsvc.Redis(t)
	for _, tt := range []struct {
		command, service, running string
	}{
		{"scheduler", "PostgreSQL", "scheduler running"},
		{"poller", "PostgreSQL", "poller running"},
		{"worker", "Redis", "worker"},
	} {
		t.Run(tt.command, func(t *testing.T) {
			addr := closedPort(t)
			env := map[string]string{"REDIS_URL": redisURL, "DATABASE_URL": r.env["DATABASE_URL"],
				"BIGTABLES_INPUT_QUEUE": names.Input, "BIGTABLES_OUTPUT_QUEUE": names.Output, "BIGTABLES_DEAD_QUEUE": names.Dead}
			var target string
			if tt.service == "PostgreSQL" {
				env["DATABASE_URL"], target = withHost(t, env["DATABASE_URL"], addr)
			} else {
				env["REDIS_URL"], target = withHost(t, env["REDIS_URL"], addr)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stderr testsvc.SyncBuffer
			sleeps := 0
			e := envFor(env, io.Discard, &stderr)
			e.backoff = wait.Backoff{First: time.Second, Sleep: func(ctx context.Context, d time.Duration) error {
				if sleeps++; sleeps == 2 {
					forward(t, addr, target) // the service comes up
				}
				return ctx.Err()
			}}
			done := make(chan int)
			go func() { done <- run(ctx, e, []string{tt.command, "--log-level", "debug"}) }()
			deadline := time.After(30 * time.Second)
			for !strings.Contains(stderr.String(), tt.running) || !strings.Contains(stderr.String(), "not ready") {
				select {
				case code := <-done:
					t.Fatalf("%s exited %d while its %s was down:\n%s", tt.command, code, tt.service, stderr.String())
				case <-deadline:
					t.Fatalf("%s did not start:\n%s", tt.command, stderr.String())
				case <-time.After(10 * time.Millisecond):
				}
			}
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("%s exit %d after SIGTERM:\n%s", tt.command, code, stderr.String())
			}
			log := stderr.String()
			if sleeps != 2 || strings.Count(log, tt.service+" is not ready; retrying") != 2 {
				t.Errorf("want two log lines saying %s is not ready (slept %d times):\n%s", tt.service, sleeps, log)
			}
		})
	}
}

// Stopped while it waits, a long-running command exits cleanly; a URL that
// can never work fails at once; one-shot commands never wait.
func TestWaitingEndsWithTheContextAndOnlyForProcesses(t *testing.T) {
	addr := closedPort(t)
	env := map[string]string{"DATABASE_URL": "postgres://postgres@" + addr + "/x?sslmode=disable", "REDIS_URL": "redis://" + addr + "/0"}
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	e := envFor(env, io.Discard, &stderr)
	e.backoff = wait.Backoff{First: time.Second, Sleep: func(ctx context.Context, d time.Duration) error { cancel(); return ctx.Err() }}
	if code := run(ctx, e, []string{"scheduler"}); code != 0 || !strings.Contains(stderr.String(), "PostgreSQL is not ready") {
		t.Errorf("scheduler stopped while waiting: exit %d:\n%s", code, stderr.String())
	}

	e.backoff.Sleep = func(context.Context, time.Duration) error {
		t.Error("a one-shot command waited")
		return errors.New("no")
	}
	for _, args := range [][]string{{"list"}, {"show", "x"}, {"add", "--uid", "a", "--input-url", "https://a.example/x"}} {
		stderr.Reset()
		if code := run(context.Background(), e, args); code != 1 || !strings.Contains(stderr.String(), "connect to database") {
			t.Errorf("%v: exit %d, %q; want exit 1 at once with the reason", args, code, stderr.String())
		}
	}
	for _, bad := range []map[string]string{{"DATABASE_URL": "mysql://x/y"}, {"REDIS_URL": "http://x"}} {
		stderr.Reset()
		e := envFor(bad, io.Discard, &stderr)
		e.backoff.Sleep = func(context.Context, time.Duration) error {
			t.Errorf("%v: waited for a URL that can never work", bad)
			return errors.New("no")
		}
		if code := run(context.Background(), e, []string{"scheduler"}); code != 1 {
			t.Errorf("%v: exit %d: %s", bad, code, stderr.String())
		}
	}
}

func envFor(vars map[string]string, stdout, stderr io.Writer) env {
	return env{getenv: func(k string) string { return vars[k] }, stdout: stdout, stderr: stderr, stdin: strings.NewReader(""),
		process: func(env, *slog.Logger) {}}
}
