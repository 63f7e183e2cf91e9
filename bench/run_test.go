package bench

import (
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
)

// services returns the admin and Redis URLs of the test services (a skip
// outside CI when they are missing, a failure in CI).
func services(t *testing.T) (adminURL, redisURL string) {
	testsvc.Database(t) // checks PostgreSQL is there
	redisURL, _, _ = testsvc.Redis(t)
	adminURL = os.Getenv("TEST_DATABASE_URL")
	if adminURL == "" {
		adminURL = testsvc.DefaultDatabaseURL
	}
	return adminURL, redisURL
}

// The scale run at its smallest, on a hash-partitioned table: both bursts
// start and apply every record once, and every figure is filled in.
func TestRunScaleSmall(t *testing.T) {
	admin, rds := services(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := RunScale(ctx, ScaleConfig{AdminURL: admin, RedisURL: rds, Stored: 30_000, Burst: 1000, Partitions: 4, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Bursts) != 2 {
		t.Fatalf("%d bursts; want 2", len(res.Bursts))
	}
	for _, b := range res.Bursts {
		if !b.ExactlyOnce || b.Records != 1000 || b.AppliedSec <= 0 || b.StartedSec <= 0 || b.StartedSec > b.AppliedSec || b.DueToJobP99Ms < b.DueToJobP50Ms {
			t.Errorf("burst %+v", b)
		}
	}
	if res.HistoryAttempts != 2000 {
		t.Errorf("history holds %d attempts; want 2000 (the bursts' only)", res.HistoryAttempts)
	}
	if res.TickMsSmall <= 0 || res.TickMsLarge <= 0 || res.TickCostRatio <= 0 {
		t.Errorf("ticks %.1f / %.1f ms", res.TickMsSmall, res.TickMsLarge)
	}
	if len(res.Queries) != 7 {
		t.Errorf("%d queries timed; want 7", len(res.Queries))
	}
	if res.TableBytesPerRecord < 100 || res.IndexBytes["bigtables_pkey"] <= 0 || res.LoadCopyRowsPerSec <= 0 || res.LoadGenerateRowsPerSec <= 0 {
		t.Errorf("sizes or load rates missing: %+v", res)
	}
}

// A soak of one short step: the load runs at the rate asked, the sample
// is filled in and the plot is written.
func TestRunSoakShort(t *testing.T) {
	admin, rds := services(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	plot := filepath.Join(t.TempDir(), "soak.svg")
	res, err := RunSoak(ctx, SoakConfig{AdminURL: admin, RedisURL: rds, Duration: 10 * time.Second, Step: 10 * time.Second,
		Rate: 200, Workers: 2, TableOptions: "fillfactor=80", Plot: plot})
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 12_000 || len(res.Samples) != 1 {
		t.Fatalf("%d records, %d samples; want 12,000 and 1", res.Records, len(res.Samples))
	}
	s := res.Samples[0]
	if s.CyclesPerSec < 100 || s.TableMiB <= 0 || s.RSSMiB <= 0 || s.DueToJobP99Ms <= 0 {
		t.Errorf("sample %+v", s)
	}
	b, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b, new(struct{})); err != nil {
		t.Errorf("plot is not well-formed: %v", err)
	}
}
