package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/internal/wait"
)

func TestWebServesDashboardAndMetrics(t *testing.T) {
	r := newOpsRunner(t)
	r.ok("add", "--uid", "a", "--input-url", "https://example.com/a")
	for _, bad := range [][]string{{"web", "--admin-token", "short"}, {"web", "--addr", "nohost"}} {
		if _, stderr, code := r.run(bad...); code != 2 {
			t.Errorf("%v: exit %d: %s", bad, code, stderr)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &testsvc.SyncBuffer{}
	e := env{getenv: func(k string) string { return r.env[k] }, stdout: io.Discard, stderr: stderr, stdin: strings.NewReader(""),
		backoff: wait.Backoff{Sleep: func(context.Context, time.Duration) error { return context.Canceled }},
		process: func(env, *slog.Logger) {}}
	done := make(chan int, 1)
	go func() { done <- run(ctx, e, []string{"web", "--addr", "127.0.0.1:0"}) }()
	urlRE := regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+/)`)
	var base string
	for deadline := time.Now().Add(20 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := urlRE.FindStringSubmatch(stderr.String()); m != nil {
			base = m[1]
		}
	}
	if base == "" {
		t.Fatalf("no dashboard URL logged:\n%s", stderr.String())
	}
	for path, want := range map[string]string{"": "read-only", "records?sort=uid": `href="/record?uid=a"`, "healthz": `"ok": true`,
		"readyz": `"postgres"`, "metrics": "bigtables_due_lag_seconds"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(want)) {
			t.Errorf("GET /%s: %d, lacks %q", path, resp.StatusCode, want)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("web exited %d:\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("web did not stop")
	}
}
