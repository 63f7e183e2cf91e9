package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/worker"
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
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	h := worker.HTTPGet(srv.Client())
	tests := []struct {
		path      string
		timeout   time.Duration
		wantErr   string // "" for success
		permanent bool
	}{
		{"/ok", time.Minute, "", false},
		{"/missing", time.Minute, "404 Not Found", true},
		{"/gone", time.Minute, "410 Gone", true},
		{"/broken", time.Minute, "500 Internal Server Error", false},
		{"/slow", 200 * time.Millisecond, "context deadline exceeded", false},
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
	for _, uid := range []string{"ok", "fail", "perm", "panic"} {
		j := job("http://example.com/"+uid, time.Minute)
		j.BigTableUID = uid
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
				}
				return nil
			})
	}()
	// 4 jobs: 4 statuses and 4 results.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := rdb.LLen(ctx, names.Output).Result()
		if n >= 8 || time.Now().After(deadline) {
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
	if statuses != 4 || len(got) != 4 {
		t.Fatalf("%d statuses and %d results: %v", statuses, len(got), raw)
	}
	if got["ok"].Type != protocol.Success || got["fail"].Type != protocol.Failure || got["fail"].Message != "upstream 500" ||
		!got["perm"].NotRetryable() || got["perm"].UserFriendlyReason != "Provided URL is invalid" ||
		got["panic"].Type != protocol.Failure || !strings.Contains(got["panic"].Message, "panicked") {
		t.Errorf("results %+v", got)
	}
	if got["ok"].AttemptUID != "c1" {
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
