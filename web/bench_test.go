package web

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/queue"
)

// BenchmarkPages1M measures the dashboard's pages, whole HTTP answers
// rendered, on 1,000,000 records (1% running, 1% retrying, 0.5% disabled,
// 0.1% paused, 0.1% idle, the rest waiting) with 300,000 attempts in the
// history, 200,000 of them in the last hour. The overview is measured
// uncached (every view reads PostgreSQL). Run:
//
//	go test -run XXX -bench Pages1M -benchtime=20x ./web
func BenchmarkPages1M(b *testing.B) {
	ctx := context.Background()
	st, db := testsvc.StoreWithDB(b)
	for _, q := range []string{
		`INSERT INTO bigtables (uid, input_url, policy, refresh_at, attempt_uid, started_at, deadline_at, attempt_no, failing_since,
			disabled_until_update, disabled_reason, paused)
		 SELECT 'r' || lpad(i::text, 7, '0'), 'http://x/' || i, '{}',
			CASE WHEN i % 1000 = 7 THEN NULL WHEN i % 5000 = 3 THEN now() - interval '1 minute' ELSE now() + (i % 86400) * interval '1 second' END,
			CASE WHEN i % 100 = 1 THEN 'a' || i END,
			CASE WHEN i % 100 = 1 THEN now() - (i % 600) * interval '1 second' END,
			CASE WHEN i % 100 = 1 THEN now() + interval '1 hour' END,
			CASE WHEN i % 100 IN (1, 2) THEN 1 ELSE 0 END,
			CASE WHEN i % 100 = 2 THEN now() END,
			i % 200 = 5, CASE WHEN i % 200 = 5 THEN 'gave up' END,
			i % 1000 = 9
		 FROM generate_series(1, 1000000) i`,
		// 200,000 attempts over the last hour, 100,000 older ones.
		`INSERT INTO bigtable_attempts (attempt_uid, uid, attempt_no, started_at, finished_at, outcome, message, decision)
		 SELECT 'h' || i, 'r' || lpad((i % 1000000 + 1)::text, 7, '0'), 1,
			now() - (i % 3600 + CASE WHEN i > 200000 THEN 7200 ELSE 0 END) * interval '1 second' - interval '20 seconds',
			now() - (i % 3600 + CASE WHEN i > 200000 THEN 7200 ELSE 0 END) * interval '1 second',
			(ARRAY['success', 'success', 'success', 'failure', 'timeout'])[i % 5 + 1], 'worker said ' || i,
			CASE WHEN i % 5 IN (3, 4) AND i % 500 = 3 THEN 'exhausted' WHEN i % 5 IN (3, 4) THEN 'retry' ELSE '' END
		 FROM generate_series(1, 300000) i`,
		`VACUUM ANALYZE bigtables`,
		`VACUUM ANALYZE bigtable_attempts`,
	} {
		// bench-smoke (-short) only checks that the benchmark runs: 10,000 records.
		if testing.Short() {
			q = strings.ReplaceAll(q, "1000000", "10000")
		}
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	_, rdb, names := testsvc.Redis(b)
	// One dashboard reads PostgreSQL on every view; the other keeps the
	// overview's counts for its default 5 seconds, as deployed (the records
	// page shows the counts by phase from them).
	serve := func(ttl time.Duration) *httptest.Server {
		srv, err := New(Options{Store: st, Queue: queue.New(rdb, names), CacheTTL: ttl})
		if err != nil {
			b.Fatal(err)
		}
		return httptest.NewServer(srv.Handler())
	}
	uncached, cached := serve(time.Nanosecond), serve(time.Hour)
	defer uncached.Close()
	defer cached.Close()
	now := time.Now()
	for _, part := range []struct {
		name string
		read func() error
	}{
		{"store-overview", func() error { _, err := st.Overview(ctx); return err }},
		{"store-activity-last-hour", func() error { _, err := st.Activity(ctx, now, time.Hour); return err }},
		{"store-final-failures", func() error { _, err := st.FinalFailures(ctx, now.Add(-24*time.Hour), 10); return err }},
	} {
		b.Run(part.name, func(b *testing.B) {
			for b.Loop() {
				if err := part.read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	after := time.Now().Add(12 * time.Hour).UTC().Format(time.RFC3339Nano)
	for _, page := range []struct {
		name, path string
		ts         *httptest.Server
	}{
		{"overview-uncached", "/", uncached},
		{"overview-cached", "/", cached},
		{"records-next-refresh", "/records", cached},
		{"records-next-refresh-middle", "/records?sort=next&after=r0500000&after_at=" + after, cached},
		{"records-uid-middle", "/records?sort=uid&after=r0500000", cached},
		{"records-retrying", "/records?phase=retrying", cached},
		{"records-disabled-by-uid", "/records?phase=disabled&sort=uid", cached},
		{"records-prefix", "/records?prefix=r05&sort=uid", cached},
		{"record", "/record?uid=r0000001", cached},
	} {
		b.Run(page.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Get(page.ts.URL + page.path)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %d\n%s", page.path, resp.StatusCode, body)
				}
			}
		})
	}
}
