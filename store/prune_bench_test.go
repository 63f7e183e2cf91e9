package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
)

// BenchmarkPruneSteps measures the history retention's steps on 2,000
// records with 200 attempts each, one an hour (400,000 rows): the steps
// that delete (keep 100 per record, 500 records a step, at most 1,000 rows)
// and, once nothing is left to delete, the steady-state step, which is what
// the scheduler pays every minute. Run with -benchtime=1x:
//
//	go test -run XXX -bench PruneSteps -benchtime=1x ./store
func BenchmarkPruneSteps(b *testing.B) {
	ctx := context.Background()
	s, db := testsvc.StoreWithDB(b)
	const records, per = 2000, 200
	for _, q := range []string{
		`INSERT INTO bigtables (uid, input_url, policy) SELECT 'r' || lpad(i::text, 6, '0'), 'http://x', '{}' FROM generate_series(1, 2000) i`,
		`INSERT INTO bigtable_attempts (attempt_uid, uid, attempt_no, started_at, finished_at, outcome)
		 SELECT 'a' || i || '-' || j, 'r' || lpad(i::text, 6, '0'), j, now() - j * interval '1 hour', now() - j * interval '1 hour', 'failure'
		 FROM generate_series(1, 2000) i, generate_series(1, 200) j`,
		`VACUUM ANALYZE bigtable_attempts`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		var steps, deleted int
		var spent time.Duration
		after := ""
		for {
			t0 := time.Now()
			n, next, err := s.PruneAttemptsBeyond(ctx, 100, after, 500, 1000)
			spent += time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			steps, deleted, after = steps+1, deleted+n, next
			if next == "" && n == 0 {
				break
			}
		}
		b.ReportMetric(float64(spent.Milliseconds())/float64(steps), "ms/beyond-step")
		b.ReportMetric(float64(deleted), "deleted-beyond")
		t0 := time.Now()
		if _, _, err := s.PruneAttemptsBeyond(ctx, 100, "", 500, 1000); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "ms/steady-beyond-step")

		// By age: 50 hours keeps 49 of the 100 left per record.
		steps, deleted, spent = 0, 0, 0
		for {
			t0 := time.Now()
			n, err := s.PruneAttemptsOlder(ctx, 50*time.Hour, 1000)
			spent += time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			steps, deleted = steps+1, deleted+n
			if n < 1000 {
				break
			}
		}
		b.ReportMetric(float64(spent.Milliseconds())/float64(steps), "ms/older-step")
		b.ReportMetric(float64(deleted), "deleted-older")
		t0 = time.Now()
		if _, err := s.PruneAttemptsOlder(ctx, 50*time.Hour, 1000); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "ms/steady-older-step")
	}
	_ = records * per
}
