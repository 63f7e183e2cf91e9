// Package bench measures bigtables on the machine it runs on, against local
// PostgreSQL and Redis, as ratios taken in the same run: the real scheduler
// and poller end to end against the original row-at-a-time design, each loop
// alone, latencies, how a tick's cost scales with the rows stored, and the
// poller's memory while it drains a backlog. It creates its own database
// and Redis keys and removes them afterwards.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
)

// Config sets the sizes of a run. Zero values take the defaults.
type Config struct {
	// AdminURL is a PostgreSQL URL with the right to create databases.
	AdminURL string
	// RedisURL is the Redis to use; the bench's keys carry a random prefix.
	RedisURL string
	// Records is N, the records cycled end to end (default 100,000).
	Records int
	// Workers is the number of in-process trivial workers (default 8).
	Workers int
	// SchedulerBatch and PollerBatch size the real loops (default 1000).
	SchedulerBatch, PollerBatch int
	// ScaleRows is the large table of the scale test (default 1,000,000);
	// the small one has 10,000.
	ScaleRows int
	// Backlog is the results the poller drains for the memory test (default
	// 1,000,000).
	Backlog int
	// Binary is the bigtables executable run as the poller of the memory
	// test (default: this executable). Empty and not found skips the test.
	Binary string
	// Progress receives a progress line while the bench runs.
	Progress io.Writer
	// Only, when not empty, runs only the named steps: e2e, baseline, two,
	// alone, latency, scale, memory, upstreams.
	Only []string
}

func (c *Config) defaults() {
	if c.Records <= 0 {
		c.Records = 100_000
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.SchedulerBatch <= 0 {
		c.SchedulerBatch = 1000
	}
	if c.PollerBatch <= 0 {
		c.PollerBatch = 1000
	}
	if c.ScaleRows <= 0 {
		c.ScaleRows = 1_000_000
	}
	if c.Backlog <= 0 {
		c.Backlog = 1_000_000
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// Result holds the figures of a run.
type Result struct {
	Records                int     `json:"records"`
	CyclesPerSec           float64 `json:"cycles_per_sec"`
	BaselineCyclesPerSec   float64 `json:"baseline_cycles_per_sec"`
	SpeedupVsBaseline      float64 `json:"speedup_vs_baseline"`
	TwoEachCyclesPerSec    float64 `json:"two_each_cycles_per_sec"`
	TwoEachExactlyOnce     bool    `json:"two_each_exactly_once"`
	SchedulerStartsPerSec  float64 `json:"scheduler_starts_per_sec"`
	PollerAppliesPerSec    float64 `json:"poller_applies_per_sec"`
	DueToPushedP50Ms       float64 `json:"due_to_pushed_p50_ms"`
	DueToPushedP99Ms       float64 `json:"due_to_pushed_p99_ms"`
	ResultToAppliedP50Ms   float64 `json:"result_to_applied_p50_ms"`
	ResultToAppliedP99Ms   float64 `json:"result_to_applied_p99_ms"`
	TickMsSmallTable       float64 `json:"tick_ms_10k_rows"`
	TickMsLargeTable       float64 `json:"tick_ms_large_rows"`
	LargeTableRows         int     `json:"large_table_rows"`
	TickCostRatio          float64 `json:"tick_cost_ratio"`
	PollerPeakRSSMiBSmall  float64 `json:"poller_peak_rss_mib_small_backlog"`
	PollerPeakRSSMiBLarge  float64 `json:"poller_peak_rss_mib_large_backlog"`
	PollerBacklog          int     `json:"poller_backlog"`
	PollerSmallBacklog     int     `json:"poller_small_backlog"`
	PollerRSSRatio         float64 `json:"poller_rss_ratio"`
	PollerRSSSkippedReason string  `json:"poller_rss_skipped,omitempty"`
	// Upstreams holds the upstreams scenario's figures when it ran.
	Upstreams *UpstreamsResult `json:"upstreams,omitempty"`
}

// env is one isolated database and key prefix.
type env struct {
	cfg   Config
	db    *sqlx.DB // direct access for setup and the baseline
	st    *store.Store
	rdb   redis.UniversalClient
	q     *queue.Queue
	names queue.Names
	dbURL string
	log   *slog.Logger
	// progress reports to cfg.Progress.
	progress *progress
}

// Run runs every measurement and returns the figures.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	var res Result
	res.Records = cfg.Records
	e, cleanup, err := setup(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer cleanup()

	steps := []struct {
		id, name string
		run      func() error
	}{
		{"e2e", "end to end, batched", func() error {
			r, err := e.endToEnd(ctx, 1, 1)
			res.CyclesPerSec = r
			return err
		}},
		{"baseline", "end to end, the original row-at-a-time design", func() error {
			r, err := e.baseline(ctx)
			res.BaselineCyclesPerSec = r
			return err
		}},
		{"two", "end to end, two schedulers and two pollers", func() error {
			r, err := e.endToEnd(ctx, 2, 2)
			res.TwoEachCyclesPerSec = r
			if err == nil {
				res.TwoEachExactlyOnce, err = e.exactlyOnce(ctx)
			}
			return err
		}},
		{"alone", "scheduler and poller alone", func() error {
			var err error
			res.SchedulerStartsPerSec, res.PollerAppliesPerSec, err = e.alone(ctx)
			return err
		}},
		{"latency", "latency", func() error {
			var err error
			res.DueToPushedP50Ms, res.DueToPushedP99Ms, res.ResultToAppliedP50Ms, res.ResultToAppliedP99Ms, err = e.latency(ctx)
			return err
		}},
		{"scale", "tick cost by table size", func() error {
			var err error
			res.LargeTableRows = cfg.ScaleRows
			res.TickMsSmallTable, res.TickMsLargeTable, err = e.scale(ctx)
			return err
		}},
		{"memory", "poller memory draining a backlog", func() error {
			var err error
			res.PollerBacklog, res.PollerSmallBacklog = cfg.Backlog, min(cfg.Backlog/20, 50_000)
			res.PollerPeakRSSMiBSmall, res.PollerPeakRSSMiBLarge, err = e.pollerRSS(ctx)
			var skip skipped
			if errors.As(err, &skip) {
				res.PollerRSSSkippedReason, err = string(skip), nil
			}
			return err
		}},
		{"upstreams", "10 upstreams, one dead for a while", func() error {
			r, err := e.upstreams(ctx)
			res.Upstreams = &r
			return err
		}},
	}
	for i, s := range steps {
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, s.id) {
			continue
		}
		e.progress.step("[%d/%d] %s...", i+1, len(steps), s.name)
		if err := s.run(); err != nil {
			e.progress.end("[%d/%d] %s: failed", i+1, len(steps), s.name)
			return res, fmt.Errorf("bench %s: %w", s.name, err)
		}
	}
	e.progress.end("done")
	if res.BaselineCyclesPerSec > 0 {
		res.SpeedupVsBaseline = res.CyclesPerSec / res.BaselineCyclesPerSec
	}
	if res.TickMsSmallTable > 0 {
		res.TickCostRatio = res.TickMsLargeTable / res.TickMsSmallTable
	}
	if res.PollerPeakRSSMiBSmall > 0 {
		res.PollerRSSRatio = res.PollerPeakRSSMiBLarge / res.PollerPeakRSSMiBSmall
	}
	return res, nil
}

type skipped string

func (s skipped) Error() string { return string(s) }

func setup(ctx context.Context, cfg Config) (*env, func(), error) {
	dbURL, drop, err := store.ScratchDatabase(ctx, cfg.AdminURL, "bigtables_bench")
	if err != nil {
		return nil, nil, err
	}
	e := &env{cfg: cfg, dbURL: dbURL, log: slog.New(slog.DiscardHandler), progress: newProgress(cfg.Progress)}
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		drop()
	}
	fail := func(err error) (*env, func(), error) { cleanup(); return nil, nil, err }
	if e.st, err = store.Open(ctx, e.dbURL); err != nil {
		return fail(err)
	}
	cleanups = append(cleanups, func() { e.st.Close() })
	if _, err := e.st.Migrate(ctx); err != nil {
		return fail(err)
	}
	if e.db, err = sqlx.Open("postgres", e.dbURL); err != nil {
		return fail(err)
	}
	cleanups = append(cleanups, func() { e.db.Close() })
	if e.rdb, err = queue.Connect(ctx, cfg.RedisURL); err != nil {
		return fail(err)
	}
	prefix := fmt.Sprintf("bigtables-bench-%d:", time.Now().UnixNano())
	e.names = queue.Names{Input: prefix + "input", Output: prefix + "output", Dead: prefix + "dead"}
	e.q = queue.New(e.rdb, e.names)
	cleanups = append(cleanups, func() {
		iter := e.rdb.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
		for iter.Next(context.Background()) {
			e.rdb.Unlink(context.Background(), iter.Val())
		}
		e.rdb.Close()
	})
	return e, cleanup, nil
}

// reset empties the tables and queues.
func (e *env) reset(ctx context.Context) error {
	// A checkpoint during a step makes PostgreSQL write every page it touches
	// next in full to the WAL, which slowed some runs by a fifth. Each step
	// starts right after one, so none falls inside a step of a few seconds
	// (checkpoint_timeout is minutes). It needs superuser or pg_checkpoint;
	// without, the step runs as it would.
	e.db.ExecContext(ctx, "CHECKPOINT")
	if _, err := e.db.ExecContext(ctx, "TRUNCATE bigtables, bigtable_attempts, upstreams"); err != nil {
		return fmt.Errorf("truncate: %w", err)
	}
	if err := e.rdb.Del(ctx, e.names.Input, e.names.Output, e.names.Dead).Err(); err != nil {
		return fmt.Errorf("empty queues: %w", err)
	}
	_, err := e.db.ExecContext(ctx, "VACUUM ANALYZE bigtables")
	return err
}

// insert adds n records named prefix+i with a one-off policy, due at due
// (NULL when due is zero), in one statement. Like every loader of the
// bench, it sets the upstream Add would (the host, bench.invalid), so the
// ticks and batches pay for locking it as they would in production.
func (e *env) insert(ctx context.Context, prefix string, n int, due time.Time) error {
	pol := refresh.DefaultPolicy()
	pol.Timeout = refresh.Duration(10 * time.Minute)
	var at any
	if !due.IsZero() {
		at = due
	}
	const q = `INSERT INTO bigtables (uid, input_url, schedule, policy, refresh_at, upstream)
		SELECT $1 || lpad(i::text, 8, '0'), 'http://bench.invalid/' || i, '', $2::jsonb, $3::timestamptz, 'bench.invalid'
		FROM generate_series(1, $4) AS i`
	if _, err := e.db.ExecContext(ctx, q, prefix, string(pol.JSON()), at, n); err != nil {
		return fmt.Errorf("insert %d records: %w", n, err)
	}
	_, err := e.db.ExecContext(ctx, "ANALYZE bigtables")
	return err
}

// workers answer every job with success at once, popping and pushing in
// batches, until ctx ends (within a second: a blocking pop is not
// interrupted). onJob, if set, sees each job as it arrives.
func (e *env) workers(ctx context.Context, n int, onJob func(protocol.Job)) *sync.WaitGroup {
	return e.workersAnswering(ctx, n, func(j protocol.Job) protocol.Result {
		if onJob != nil {
			onJob(j)
		}
		return protocol.Result{BigTableUID: j.BigTableUID, AttemptUID: j.AttemptUID, Type: protocol.Success}
	})
}

// workersAnswering is workers with the answer to each job chosen by answer.
func (e *env) workersAnswering(ctx context.Context, n int, answer func(protocol.Job) protocol.Result) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				// A blocking pop, as real workers wait: idle workers must
				// not load the machine being measured by polling.
				jobs, err := e.q.PopJobs(ctx, time.Second, 200)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				results := make([]any, 0, len(jobs))
				for _, raw := range jobs {
					j, err := protocol.DecodeJob([]byte(raw))
					if err != nil {
						continue
					}
					results = append(results, answer(j).Encode())
				}
				if len(results) > 0 {
					e.rdb.RPush(context.WithoutCancel(ctx), e.names.Output, results...)
				}
			}
		})
	}
	return &wg
}

// waitApplied waits until the pollers have committed want results, reporting
// progress. It counts in process, as the baseline does: polling the
// database would load the machine being measured. checkApplied then confirms
// the count from the history, after the clock has stopped.
func (e *env) waitApplied(ctx context.Context, pollers []*poller.Poller, want int, label string, start time.Time) error {
	return e.waitCycles(ctx, want, label, start, func(context.Context) (int, error) {
		var n int64
		for _, p := range pollers {
			n += p.Stats().Applied
		}
		return int(n), nil
	})
}

// checkApplied confirms that the history holds want successes.
func (e *env) checkApplied(ctx context.Context, want int) error {
	var n int
	if err := e.db.GetContext(ctx, &n, "SELECT count(*) FROM bigtable_attempts WHERE outcome = 'success'"); err != nil {
		return fmt.Errorf("count successes: %w", err)
	}
	if n < want {
		return fmt.Errorf("the pollers reported at least %d results applied but the history holds %d successes", want, n)
	}
	return nil
}

// waitCycles polls count (an in-process counter: cheap) every 2 ms until it
// reaches want, so the time measured is within 2 ms of the last cycle (a
// 100 ms poll made a 2.7 s run read as 2.8 s), reporting progress every
// 100 ms, for at most 30 minutes.
func (e *env) waitCycles(ctx context.Context, want int, label string, start time.Time, count func(context.Context) (int, error)) error {
	deadline := time.Now().Add(30 * time.Minute)
	var reported time.Time
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := count(ctx)
		if err != nil {
			return err
		}
		if n >= want || time.Since(reported) >= 100*time.Millisecond {
			el := time.Since(start).Seconds()
			e.progress.update("  %s: %d/%d cycles, %.0f/s", label, n, want, float64(n)/max(el, 1e-9))
			reported = time.Now()
		}
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: only %d of %d cycles after 30 minutes", label, n, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// endToEnd cycles N records once each with the real loops and returns
// cycles per second.
func (e *env) endToEnd(ctx context.Context, schedulers, pollers int) (float64, error) {
	if err := e.reset(ctx); err != nil {
		return 0, err
	}
	if err := e.insert(ctx, "r", e.cfg.Records, time.Now().Add(-time.Second)); err != nil {
		return 0, err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	start := time.Now()
	for range schedulers {
		s := scheduler.New(e.st, e.q, scheduler.Config{Interval: 20 * time.Millisecond, Batch: e.cfg.SchedulerBatch, Logger: e.log})
		wg.Go(func() { s.Run(runCtx) })
	}
	var ps []*poller.Poller
	for range pollers {
		p := poller.New(e.st, e.q, poller.Config{Batch: e.cfg.PollerBatch, Idle: 5 * time.Millisecond, Logger: e.log})
		ps = append(ps, p)
		wg.Go(func() { p.Run(runCtx) })
	}
	ws := e.workers(runCtx, e.cfg.Workers, nil)
	err := e.waitApplied(ctx, ps, e.cfg.Records, fmt.Sprintf("%d scheduler(s), %d poller(s)", schedulers, pollers), start)
	elapsed := time.Since(start)
	stop()
	wg.Wait()
	ws.Wait()
	if err == nil {
		err = e.checkApplied(ctx, e.cfg.Records)
	}
	if err != nil {
		return 0, err
	}
	return float64(e.cfg.Records) / elapsed.Seconds(), nil
}

// exactlyOnce checks the last run started and applied every record once.
func (e *env) exactlyOnce(ctx context.Context) (bool, error) {
	var attempts, distinct, notOne int
	err := e.db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT uid) FROM bigtable_attempts`).Scan(&attempts, &distinct)
	if err == nil {
		err = e.db.GetContext(ctx, &notOne, `SELECT count(*) FROM bigtables WHERE attempt_no <> 0 OR attempt_uid IS NOT NULL`)
	}
	if err != nil {
		return false, err
	}
	return attempts == e.cfg.Records && distinct == e.cfg.Records && notOne == 0, nil
}

// alone measures the scheduler starting N due records with nobody answering,
// then the poller applying N queued successes for them.
func (e *env) alone(ctx context.Context) (startsPerSec, appliesPerSec float64, err error) {
	if err := e.reset(ctx); err != nil {
		return 0, 0, err
	}
	if err := e.insert(ctx, "r", e.cfg.Records, time.Now().Add(-time.Second)); err != nil {
		return 0, 0, err
	}
	s := scheduler.New(e.st, e.q, scheduler.Config{Batch: e.cfg.SchedulerBatch, Logger: e.log})
	start := time.Now()
	started := 0
	for started < e.cfg.Records {
		r, err := s.Tick(ctx)
		if err != nil {
			return 0, 0, err
		}
		if r.Started == 0 {
			return 0, 0, fmt.Errorf("scheduler stalled at %d of %d", started, e.cfg.Records)
		}
		started += r.Started
		e.progress.update("  scheduler alone: %d/%d started", started, e.cfg.Records)
	}
	startsPerSec = float64(started) / time.Since(start).Seconds()

	// Turn every job into a success result, outside the timing.
	for {
		jobs, err := e.rdb.LPopCount(ctx, e.names.Input, 1000).Result()
		if errors.Is(err, redis.Nil) || len(jobs) == 0 {
			break
		}
		if err != nil {
			return 0, 0, err
		}
		results := make([]any, 0, len(jobs))
		for _, raw := range jobs {
			j, _ := protocol.DecodeJob([]byte(raw))
			results = append(results, protocol.Result{BigTableUID: j.BigTableUID, AttemptUID: j.AttemptUID, Type: protocol.Success}.Encode())
		}
		if err := e.rdb.RPush(ctx, e.names.Output, results...).Err(); err != nil {
			return 0, 0, err
		}
	}
	p := poller.New(e.st, e.q, poller.Config{Batch: e.cfg.PollerBatch, Logger: e.log})
	start = time.Now()
	applied := 0
	for {
		n, err := p.Once(ctx)
		if err != nil {
			return 0, 0, err
		}
		if n == 0 {
			break
		}
		applied += n
		e.progress.update("  poller alone: %d/%d applied", applied, e.cfg.Records)
	}
	appliesPerSec = float64(p.Stats().Applied) / time.Since(start).Seconds()
	if p.Stats().Applied != int64(e.cfg.Records) {
		return 0, 0, fmt.Errorf("poller applied %d of %d", p.Stats().Applied, e.cfg.Records)
	}
	return startsPerSec, appliesPerSec, nil
}

// latency runs records that fall due over a few seconds through the real
// loops at a steady pace and returns p50/p99 of due -> job received by a
// worker, and result pushed -> applied (the apply transaction's clock).
func (e *env) latency(ctx context.Context) (dueP50, dueP99, applyP50, applyP99 float64, err error) {
	if err := e.reset(ctx); err != nil {
		return 0, 0, 0, 0, err
	}
	n := min(e.cfg.Records, 5000)
	spread := 5 * time.Second
	base := time.Now().Add(time.Second)
	// Record i falls due at base + i*spread/n.
	pol := refresh.DefaultPolicy()
	const q = `INSERT INTO bigtables (uid, input_url, schedule, policy, refresh_at, upstream)
		SELECT 'l' || lpad(i::text, 8, '0'), 'http://bench.invalid/' || i, '', $1::jsonb,
		       $2::timestamptz + (i * $3::bigint) * interval '1 microsecond', 'bench.invalid'
		FROM generate_series(0, $4 - 1) AS i`
	step := spread.Microseconds() / int64(n)
	if _, err := e.db.ExecContext(ctx, q, string(pol.JSON()), base, step, n); err != nil {
		return 0, 0, 0, 0, err
	}
	due := func(uid string) time.Time {
		i, _ := strconv.Atoi(strings.TrimLeft(uid[1:], "0"))
		return base.Add(time.Duration(int64(i)*step) * time.Microsecond)
	}
	var mu sync.Mutex
	var toPushed []float64
	pushedAt := map[string]time.Time{}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	s := scheduler.New(e.st, e.q, scheduler.Config{Interval: 50 * time.Millisecond, Batch: e.cfg.SchedulerBatch, Logger: e.log})
	p := poller.New(e.st, e.q, poller.Config{Batch: e.cfg.PollerBatch, Idle: 10 * time.Millisecond, Logger: e.log})
	wg.Go(func() { s.Run(runCtx) })
	wg.Go(func() { p.Run(runCtx) })
	ws := e.workers(runCtx, 2, func(j protocol.Job) {
		now := time.Now()
		mu.Lock()
		toPushed = append(toPushed, float64(now.Sub(due(j.BigTableUID)).Microseconds())/1000)
		pushedAt[j.AttemptUID] = now
		mu.Unlock()
	})
	err = e.waitApplied(ctx, []*poller.Poller{p}, n, "steady load", time.Now())
	stop()
	wg.Wait()
	ws.Wait()
	if err == nil {
		err = e.checkApplied(ctx, n)
	}
	if err != nil {
		return 0, 0, 0, 0, err
	}
	rows, err := e.db.QueryContext(ctx, "SELECT attempt_uid, finished_at FROM bigtable_attempts")
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer rows.Close()
	var toApplied []float64
	for rows.Next() {
		var uid string
		var at time.Time
		if err := rows.Scan(&uid, &at); err != nil {
			return 0, 0, 0, 0, err
		}
		if t, ok := pushedAt[uid]; ok {
			toApplied = append(toApplied, max(float64(at.Sub(t).Microseconds())/1000, 0))
		}
	}
	return percentile(toPushed, 50), percentile(toPushed, 99), percentile(toApplied, 50), percentile(toApplied, 99), rows.Err()
}

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	return v[min(int(float64(len(v))*p/100), len(v)-1)]
}

// scale times a scheduler tick that starts 1,000 due records with 10,000
// and then ScaleRows records stored.
func (e *env) scale(ctx context.Context) (small, large float64, err error) {
	if small, err = e.tickStored(ctx, 10_000); err != nil {
		return 0, 0, err
	}
	if large, err = e.tickStored(ctx, e.cfg.ScaleRows); err != nil {
		return 0, 0, err
	}
	return small, large, nil
}

// pollerRSS runs the real poller binary over a backlog of stale results,
// for a small and for the configured backlog, and returns its peak RSS
// (VmHWM) in MiB for each.
func (e *env) pollerRSS(ctx context.Context) (small, large float64, err error) {
	bin := e.cfg.Binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return 0, 0, skipped("cannot find the bigtables binary: " + err.Error())
		}
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		return 0, 0, skipped("no /proc: peak RSS is read from /proc/PID/status")
	}
	if err := e.reset(ctx); err != nil {
		return 0, 0, err
	}
	if err := e.insert(ctx, "r", 1000, time.Time{}); err != nil {
		return 0, 0, err
	}
	run := func(backlog int) (float64, error) {
		// Stale results (no running attempt) for existing records: each is
		// locked, checked and counted, like any result.
		for sent := 0; sent < backlog; {
			batch := make([]any, 0, 5000)
			for i := 0; i < 5000 && sent < backlog; i, sent = i+1, sent+1 {
				batch = append(batch, protocol.Result{BigTableUID: fmt.Sprintf("r%08d", sent%1000+1),
					AttemptUID: "stale-" + strconv.Itoa(sent), Type: protocol.Success}.Encode())
			}
			if err := e.rdb.RPush(ctx, e.names.Output, batch...).Err(); err != nil {
				return 0, err
			}
			e.progress.update("  filling a backlog: %d/%d", sent, backlog)
		}
		cmd := exec.CommandContext(ctx, bin, "poller", "--batch", strconv.Itoa(e.cfg.PollerBatch), "--log-level", "error")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+e.dbURL, "REDIS_URL="+e.cfg.RedisURL,
			"BIGTABLES_INPUT_QUEUE="+e.names.Input, "BIGTABLES_OUTPUT_QUEUE="+e.names.Output, "BIGTABLES_DEAD_QUEUE="+e.names.Dead)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		var peak atomic.Int64
		done := make(chan struct{})
		go func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if kb := vmHWM(cmd.Process.Pid); kb > peak.Load() {
					peak.Store(kb)
				}
			}
		}()
		for {
			n, err := e.rdb.LLen(ctx, e.names.Output).Result()
			if err != nil {
				close(done)
				cmd.Process.Kill()
				cmd.Wait()
				return 0, err
			}
			e.progress.update("  poller draining %d: %d left, peak RSS %.1f MiB", backlog, n, float64(peak.Load())/1024)
			if n == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
		if kb := vmHWM(cmd.Process.Pid); kb > peak.Load() {
			peak.Store(kb)
		}
		close(done)
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		return float64(peak.Load()) / 1024, nil
	}
	if small, err = run(min(e.cfg.Backlog/20, 50_000)); err != nil {
		return 0, 0, err
	}
	if large, err = run(e.cfg.Backlog); err != nil {
		return 0, 0, err
	}
	return small, large, nil
}
