package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/internal/wait"
	"github.com/bigtables/bigtables/notifier"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// events lists, filters and prints events as a table or JSON; bad filters
// are refused with the reason; requeue names what it could not find.
func TestEventsCommand(t *testing.T) {
	r := newOpsRunner(t)
	r.ok("add", "--uid", "u1", "--input-url", "https://example.com/a")
	r.ok("add", "--uid", "u2", "--input-url", "https://example.com/b")
	r.ok("pause", "u1")
	r.ok("resume", "u1")
	r.ok("delete", "u2")
	out := r.ok("events")
	for _, want := range []string{"TYPE", "paused", "resumed", "deleted", "u1", "u2", "pending"} {
		if !strings.Contains(out, want) {
			t.Errorf("events output lacks %q:\n%s", want, out)
		}
	}
	var views []eventView
	if err := json.Unmarshal([]byte(r.ok("events", "--json", "--uid", "u1", "--type", "resumed")), &views); err != nil {
		t.Fatal(err)
	}
	if len(views) != 1 || views[0].Type != "resumed" || views[0].BigTableUID != "u1" || views[0].ID == "" || views[0].State != store.EventPending {
		t.Errorf("events --json --uid u1 --type resumed = %+v", views)
	}
	if out := r.ok("events", "--dead"); strings.Contains(out, "paused") {
		t.Errorf("events --dead shows live events:\n%s", out)
	}
	for _, bad := range [][]string{{"events", "--type", "exploded"}, {"events", "requeue", "x"}, {"events", "frobnicate"}, {"events", "--limit", "0"}} {
		if _, stderr, code := r.run(bad...); code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, %q; want a usage error", bad, code, stderr)
		}
	}
	if _, stderr, code := r.run("events", "requeue", "12345"); code != 1 || !strings.Contains(stderr, "no dead event") {
		t.Errorf("requeue of a missing event: exit %d, %q", code, stderr)
	}
}

// An upstream's breaker events belong to no record: --type and --upstream
// select them, --uid never shows them, and the table names the upstream.
func TestEventsOfBreakers(t *testing.T) {
	r := newOpsRunner(t)
	ctx := context.Background()
	r.ok("add", "--uid", "u1", "--input-url", "https://partner.example/a")
	r.ok("pause", "u1")
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tr := range []upstream.Transition{
		{Upstream: "partner.example", From: upstream.Closed, To: upstream.Open, At: at, Why: "5 failures in a row", CoolDown: 30 * time.Second},
		{Upstream: "other.example", From: upstream.HalfOpen, To: upstream.Closed, At: at, Why: "a probe succeeded"},
	} {
		if err := r.st.WriteEvent(ctx, store.BreakerEvent(tr, 3)); err != nil {
			t.Fatal(err)
		}
	}
	var views []eventView
	if err := json.Unmarshal([]byte(r.ok("events", "--json", "--type", "breaker_opened")), &views); err != nil {
		t.Fatal(err)
	}
	if len(views) != 1 || views[0].Upstream != "partner.example" || views[0].BigTableUID != "" || views[0].From != "closed" ||
		views[0].To != "open" || views[0].Why != "5 failures in a row" || views[0].CoolDown != "30s" ||
		views[0].NextProbeAt == nil || !views[0].NextProbeAt.Equal(at.Add(30*time.Second)) || views[0].Parked != 3 {
		t.Errorf("events --type breaker_opened = %+v", views)
	}
	if out := r.ok("events", "--upstream", "other.example"); !strings.Contains(out, "breaker_closed") || strings.Contains(out, "breaker_opened") || strings.Contains(out, "paused") {
		t.Errorf("events --upstream other.example:\n%s", out)
	}
	if out := r.ok("events", "--uid", "u1"); strings.Contains(out, "breaker") || !strings.Contains(out, "paused") {
		t.Errorf("events --uid u1 shows other than the record's events:\n%s", out)
	}
	if out := r.ok("events"); !strings.Contains(out, "upstream partner.example") ||
		!strings.Contains(out, "closed -> open: 5 failures in a row; cool-down 30s, probes at 2030-01-01T00:00:30Z; 3 parked") {
		t.Errorf("events table does not name the upstream and what happened:\n%s", out)
	}
}

// The notifier process delivers a pending event to its webhook, signed
// with the secret from the environment, and stops cleanly on cancel.
func TestNotifierProcess(t *testing.T) {
	r := newOpsRunner(t)
	r.ok("add", "--uid", "u1", "--input-url", "https://example.com/a")
	r.ok("pause", "u1")
	got := make(chan *http.Request, 4)
	bodies := make(chan []byte, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		got <- req
		bodies <- b
	}))
	defer srv.Close()
	r.env["BIGTABLES_WEBHOOK_SECRET"] = "from-the-env"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testsvc.SyncBuffer
	done := make(chan int)
	go func() {
		e := env{getenv: func(k string) string { return r.env[k] }, stdout: &stdout, stderr: &stderr, stdin: strings.NewReader(""),
			backoff: wait.Backoff{Sleep: func(context.Context, time.Duration) error { return errors.New("no waiting in this test") }},
			process: func(env, *slog.Logger) {}}
		done <- run(ctx, e, []string{"notifier", "--webhook", srv.URL + "/hook", "--events-list", r.q.Names().Input + "-events"})
	}()
	select {
	case req := <-got:
		body := <-bodies
		if !notifier.Verify("from-the-env", body, req.Header.Get(notifier.HeaderSignature)) || req.Header.Get(notifier.HeaderEventType) != "paused" {
			t.Errorf("delivery %v %s; want a paused event signed with the env's secret", req.Header, body)
		}
		if n, _ := r.rdb.LLen(context.Background(), r.q.Names().Input+"-events").Result(); n != 1 {
			t.Errorf("events list holds %d; want 1", n)
		}
	case code := <-done:
		t.Fatalf("notifier exited %d: %s", code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("no delivery; stderr:\n%s", stderr.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("notifier exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "from-the-env") || bytes.Contains([]byte(stdout.String()), []byte("from-the-env")) {
		t.Error("the secret was printed")
	}
	if _, stderr, code := r.run("notifier"); code != 2 || !strings.Contains(stderr, "nothing to deliver") {
		t.Errorf("notifier without destinations: exit %d, %q", code, stderr)
	}
	if _, stderr, code := r.run("notifier", "--webhook", "ftp://x"); code != 2 || !strings.Contains(stderr, "http or https") {
		t.Errorf("notifier with a bad webhook: exit %d, %q", code, stderr)
	}
}
