package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

// BenchmarkOperatorReads measures what stats and list cost on 1,000,000
// records: 1% running, 1% retrying, 0.5% disabled, 0.1% paused, 0.1%
// idle, 200 due, the rest waiting. Run:
//
//	go test -run XXX -bench OperatorReads -benchtime=20x ./store
func BenchmarkOperatorReads(b *testing.B) {
	ctx := context.Background()
	s, db := testsvc.StoreWithDB(b)
	for _, q := range []string{
		`INSERT INTO bigtables (uid, input_url, policy, refresh_at, attempt_uid, deadline_at, attempt_no, failing_since,
			disabled_until_update, disabled_reason, paused)
		 SELECT 'r' || lpad(i::text, 7, '0'), 'http://x', '{}',
			CASE WHEN i % 1000 = 7 THEN NULL WHEN i % 5000 = 3 THEN now() - interval '1 minute' ELSE now() + (i % 86400) * interval '1 second' END,
			CASE WHEN i % 100 = 1 THEN 'a' || i END,
			CASE WHEN i % 100 = 1 THEN now() + interval '1 hour' END,
			CASE WHEN i % 100 IN (1, 2) THEN 1 ELSE 0 END,
			CASE WHEN i % 100 = 2 THEN now() END,
			i % 200 = 5, CASE WHEN i % 200 = 5 THEN 'gave up' END,
			i % 1000 = 9
		 FROM generate_series(1, 1000000) i`,
		`VACUUM ANALYZE bigtables`,
	} {
		// bench-smoke (-short) only checks that the benchmark runs: 10,000 records.
		if testing.Short() {
			q = strings.ReplaceAll(q, "1000000", "10000")
		}
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	o, err := s.Overview(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("overview: total %d (exact %v) phases %v failing %d due %d lag %v", o.Total, o.TotalExact, o.Phases, o.Failing, o.Due, o.DueLag)
	b.Run("stats", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Overview(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The baseline stats avoids: one pass over the whole table.
	b.Run("baseline-count-by-phase-full-scan", func(b *testing.B) {
		for b.Loop() {
			var n int
			if err := db.GetContext(ctx, &n, `SELECT count(*) FILTER (WHERE attempt_no > 0) FROM bigtables`); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("due-lag", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.DueLag(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	middle := "r0500000" // the middle of the uids
	if testing.Short() {
		middle = "r0005000"
	}
	for _, tt := range []struct {
		name string
		opt  store.ListOptions
	}{
		{"list-page-100-middle", store.ListOptions{After: middle, Limit: 100}},
		{"list-waiting-100-middle", store.ListOptions{Phase: refresh.PhaseWaiting, After: middle, Limit: 100}},
		{"list-retrying-100", store.ListOptions{Phase: refresh.PhaseRetrying, Limit: 100}},
		{"list-paused-100", store.ListOptions{Phase: refresh.PhasePaused, Limit: 100}},
		{"list-running-100-middle", store.ListOptions{Phase: refresh.PhaseRunning, After: middle, Limit: 100}},
		{"list-failing-100", store.ListOptions{Failing: true, Limit: 100}},
		{"list-overdue-100", store.ListOptions{Overdue: true, Limit: 100}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			for b.Loop() {
				rows, err := s.List(ctx, tt.opt)
				if err != nil || len(rows) == 0 {
					b.Fatal(len(rows), err)
				}
			}
		})
	}
}
