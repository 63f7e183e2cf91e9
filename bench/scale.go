package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/lib/pq"
)

// ScaleConfig sets the sizes of a scale run (`bigtables bench-scale`).
// Zero values take the defaults.
type ScaleConfig struct {
	// AdminURL is a PostgreSQL URL with the right to create databases.
	AdminURL string
	// RedisURL is the Redis to use; the run's keys carry a random prefix.
	RedisURL string
	// Stored is the records stored (default 10,000,000).
	Stored int
	// Burst is about how many of them fall due at the same instant
	// (default 1,000,000; the exact count is Stored / (Stored/Burst)). Two
	// disjoint sets of this size are stored, one per burst run, so Stored
	// must be at least three times Burst.
	Burst int
	// Workers is the number of in-process trivial workers (default 8).
	Workers int
	// SchedulerBatch and PollerBatch size the real loops (default 1000).
	SchedulerBatch, PollerBatch int
	// Partitions, when above 1, turns the records table into that many
	// hash partitions of uid before loading (PostgreSQL declarative
	// partitioning), to compare with the plain table.
	Partitions int
	// Load is how the records are loaded: "copy" (COPY FROM STDIN from
	// this process), "generate" (INSERT ... SELECT FROM generate_series in
	// the server) or "auto" (default: time both on a sample, load with the
	// faster).
	Load string
	// Progress receives progress lines.
	Progress io.Writer
}

func (c *ScaleConfig) defaults() {
	if c.Stored <= 0 {
		c.Stored = 10_000_000
	}
	if c.Burst <= 0 {
		c.Burst = 1_000_000
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
	if c.Load == "" {
		c.Load = "auto"
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// Validate reports a configuration a scale run cannot use.
func (c ScaleConfig) Validate() error {
	c.defaults()
	switch {
	case c.Stored < 30_000:
		return fmt.Errorf("stored %d: at least 30,000 (the tick test alone needs 10,000)", c.Stored)
	case c.Stored > 99_999_999:
		return fmt.Errorf("stored %d: at most 99,999,999 (uids have 8 digits)", c.Stored)
	case c.Burst < 1000 || c.Stored/c.Burst < 3:
		return fmt.Errorf("burst %d: at least 1,000 and at most a third of stored (%d): two bursts and the records not due are stored apart", c.Burst, c.Stored)
	case c.Partitions < 0 || c.Partitions > 256:
		return fmt.Errorf("partitions %d: from 0 (a plain table) to 256", c.Partitions)
	case !slices.Contains([]string{"auto", "copy", "generate"}, c.Load):
		return fmt.Errorf("load %q: auto, copy or generate", c.Load)
	}
	return nil
}

// BurstResult is one burst: every record of a set due at one instant.
type BurstResult struct {
	Schedulers int `json:"schedulers"`
	Pollers    int `json:"pollers"`
	Records    int `json:"records"`
	// StartedSec is from the instant they fell due until every job was at
	// a worker; AppliedSec until every result was applied.
	StartedSec float64 `json:"started_sec"`
	AppliedSec float64 `json:"applied_sec"`
	// CyclesPerSec is Records / AppliedSec.
	CyclesPerSec float64 `json:"cycles_per_sec"`
	// DueToJobP50Ms and DueToJobP99Ms: from due to the job at a worker.
	DueToJobP50Ms float64 `json:"due_to_job_p50_ms"`
	DueToJobP99Ms float64 `json:"due_to_job_p99_ms"`
	// ExactlyOnce: the history holds one attempt per record of the set.
	ExactlyOnce bool `json:"exactly_once"`
	// PostgresCPUSec is the CPU time of the database's backends serving
	// this run; GoCPUSec that of this process (scheduler, poller, workers
	// and the bench). Redis is left out: its server is shared.
	PostgresCPUSec float64 `json:"postgres_cpu_sec"`
	GoCPUSec       float64 `json:"go_cpu_sec"`
}

// QueryTiming is an operator's query timed at the stored size.
type QueryTiming struct {
	Name string  `json:"name"`
	SQL  string  `json:"-"`
	Ms   float64 `json:"ms"` // median of the runs, caches warm
}

// ScaleResult holds the figures of a scale run.
type ScaleResult struct {
	Stored     int `json:"stored"`
	Partitions int `json:"partitions"`
	// LoadSampleRows were loaded both ways when Load is auto.
	LoadSampleRows         int     `json:"load_sample_rows,omitempty"`
	LoadCopyRowsPerSec     float64 `json:"load_copy_rows_per_sec,omitempty"`
	LoadGenerateRowsPerSec float64 `json:"load_generate_rows_per_sec,omitempty"`
	LoadMethod             string  `json:"load_method"`
	LoadSec                float64 `json:"load_sec"`
	VacuumSec              float64 `json:"vacuum_analyze_sec"`

	TickMsSmall   float64 `json:"tick_ms_10k_rows"`
	TickMsLarge   float64 `json:"tick_ms_stored"`
	TickCostRatio float64 `json:"tick_cost_ratio"`

	Queries []QueryTiming `json:"queries"`
	Bursts  []BurstResult `json:"bursts"`

	// Disk per record after loading (VACUUM ANALYZE done): the heap, its
	// TOAST and maps, each index; and per attempt in the history.
	TableBytesPerRecord    float64            `json:"table_bytes_per_record"`
	ToastBytesPerRecord    float64            `json:"toast_bytes_per_record"`
	IndexBytesPerRecord    float64            `json:"index_bytes_per_record"`
	IndexBytes             map[string]float64 `json:"index_bytes_per_record_by_index"`
	HistoryBytesPerAttempt float64            `json:"history_bytes_per_attempt"`
	HistoryIndexPerAttempt float64            `json:"history_index_bytes_per_attempt"`
	HistoryAttempts        int                `json:"history_attempts"`
	DatabaseMiB            float64            `json:"database_mib"`
}

// scale row slots: which set a record belongs to, by its number i.
const (
	slotBurstA  = 1 // i % k == 0: due at the first burst
	slotBurstB  = 2 // i % k == 1: due at the second burst, 6 h later
	otherSlots  = 16
	burstBHours = 6
	otherHours  = 8 // the others fall due from 8 h to 23 h after the first burst
)

// scaleSpec describes the rows of a scale run: record i is
// 'r'+8 digits, daily, at the time of its slot.
type scaleSpec struct {
	k         int         // one record in k belongs to each burst set
	policy    string      // one policy for all
	schedules []string    // by slot-1
	at        []time.Time // by slot-1: first refresh
	burstA    time.Time
}

func newScaleSpec(stored, burst int, burstA time.Time) scaleSpec {
	pol := refresh.DefaultPolicy()
	pol.Timeout = refresh.Duration(10 * time.Minute)
	s := scaleSpec{k: stored / burst, policy: string(pol.JSON()), burstA: burstA}
	add := func(t time.Time) {
		s.at = append(s.at, t)
		s.schedules = append(s.schedules, "DTSTART:"+t.UTC().Format("20060102T150405Z")+"\nRRULE:FREQ=DAILY")
	}
	add(burstA)
	add(burstA.Add(burstBHours * time.Hour))
	for h := range otherSlots {
		add(burstA.Add(time.Duration(otherHours+h) * time.Hour))
	}
	return s
}

func (s scaleSpec) slot(i int) int {
	switch i % s.k {
	case 0:
		return slotBurstA
	case 1:
		return slotBurstB
	}
	return 3 + i%otherSlots
}

// count returns how many of records 1..n are in the slot.
func (s scaleSpec) count(n, slot int) int {
	c := 0
	for i := 1; i <= n; i++ { // a few ms for 10 M: simpler than the arithmetic
		if s.slot(i) == slot {
			c++
		}
	}
	return c
}

// generateRows is the server-side loader: records lo..hi, as spec says.
const generateRows = `
INSERT INTO bigtables (uid, input_url, schedule, policy, refresh_at, upstream)
SELECT 'r' || lpad(i::text, 8, '0'), 'http://bench.invalid/' || i, ($3::text[])[s], $4::jsonb, ($5::timestamptz[])[s], 'bench.invalid'
FROM generate_series($1::int, $2::int) AS i,
     LATERAL (SELECT CASE i % $6 WHEN 0 THEN 1 WHEN 1 THEN 2 ELSE 3 + i % 16 END AS s) AS slot`

// load inserts records lo..hi with the method, in chunks of a transaction
// each.
func (e *env) load(ctx context.Context, spec scaleSpec, method string, lo, hi int) error {
	const chunk = 500_000
	for a := lo; a <= hi; a += chunk {
		b := min(a+chunk-1, hi)
		var err error
		if method == "generate" {
			_, err = e.db.ExecContext(ctx, generateRows, a, b, pq.StringArray(spec.schedules), spec.policy, pq.Array(spec.at), spec.k)
		} else {
			err = e.copyRows(ctx, spec, a, b)
		}
		if err != nil {
			return fmt.Errorf("load records %d-%d (%s): %w", a, b, method, err)
		}
		e.progress.update("  loading (%s): %d/%d", method, b-lo+1, hi-lo+1)
	}
	return nil
}

// copyRows sends records lo..hi with COPY FROM STDIN in one transaction.
func (e *env) copyRows(ctx context.Context, spec scaleSpec, lo, hi int) error {
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, pq.CopyIn("bigtables", "uid", "input_url", "schedule", "policy", "refresh_at"))
	if err != nil {
		return err
	}
	for i := lo; i <= hi; i++ {
		s := spec.slot(i) - 1
		if _, err := stmt.ExecContext(ctx, fmt.Sprintf("r%08d", i), fmt.Sprintf("http://bench.invalid/%d", i),
			spec.schedules[s], spec.policy, spec.at[s]); err != nil {
			stmt.Close()
			return err
		}
	}
	if _, err := stmt.ExecContext(ctx); err != nil { // flush
		stmt.Close()
		return err
	}
	if err := stmt.Close(); err != nil {
		return err
	}
	return tx.Commit()
}

// partition replaces the empty records table by one hash-partitioned by
// uid into n partitions, with the same columns, constraints, indexes and
// trigger.
func (e *env) partition(ctx context.Context, n int) error {
	stmts := []string{
		`ALTER TABLE bigtables RENAME TO bigtables_plain`,
		`CREATE TABLE bigtables (LIKE bigtables_plain INCLUDING ALL) PARTITION BY HASH (uid)`,
	}
	for i := range n {
		stmts = append(stmts, fmt.Sprintf(`CREATE TABLE bigtables_p%d PARTITION OF bigtables FOR VALUES WITH (MODULUS %d, REMAINDER %d)`, i, n, i))
	}
	stmts = append(stmts, `DROP TABLE bigtables_plain`,
		`CREATE TRIGGER bigtables_delete_history AFTER DELETE ON bigtables REFERENCING OLD TABLE AS gone
			FOR EACH STATEMENT EXECUTE FUNCTION bigtables_delete_history()`)
	for _, q := range stmts {
		if _, err := e.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("partition the records table: %s: %w", strings.Fields(q)[0:3], err)
		}
	}
	return nil
}

// RunScale stores cfg.Stored records, times two bursts of cfg.Burst records
// due at one instant (one scheduler and poller, then two of each), the tick
// at that size against 10,000 rows, operators' queries, and disk per
// record. It creates its own database and drops it afterwards.
func RunScale(ctx context.Context, cfg ScaleConfig) (ScaleResult, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return ScaleResult{}, err
	}
	res := ScaleResult{Stored: cfg.Stored, Partitions: cfg.Partitions}
	e, cleanup, err := setup(ctx, Config{AdminURL: cfg.AdminURL, RedisURL: cfg.RedisURL, Progress: cfg.Progress,
		Workers: cfg.Workers, SchedulerBatch: cfg.SchedulerBatch, PollerBatch: cfg.PollerBatch})
	if err != nil {
		return res, err
	}
	defer cleanup()
	if cfg.Partitions > 1 {
		if err := e.partition(ctx, cfg.Partitions); err != nil {
			return res, err
		}
	}
	step := func(n int, name string) { e.progress.step("[%d/7] %s...", n, name) }

	step(1, "tick with 10,000 rows stored")
	if res.TickMsSmall, err = e.tickStored(ctx, 10_000); err != nil {
		return res, fmt.Errorf("small tick: %w", err)
	}
	if err := e.reset(ctx); err != nil {
		return res, err
	}

	// The first burst falls due an hour before now, on the hour: due as
	// soon as the schedulers run; the second 6 h later, reached by moving
	// the store's clock; the others later still.
	var dbNow time.Time
	if err := e.db.GetContext(ctx, &dbNow, "SELECT now()"); err != nil {
		return res, err
	}
	spec := newScaleSpec(cfg.Stored, cfg.Burst, dbNow.UTC().Truncate(time.Hour).Add(-time.Hour))

	step(2, "loading "+Thousands(cfg.Stored)+" records")
	res.LoadMethod = cfg.Load
	if cfg.Load == "auto" {
		sample := min(cfg.Stored/10, 1_000_000)
		res.LoadSampleRows = sample
		for _, m := range []string{"generate", "copy"} {
			start := time.Now()
			if err := e.load(ctx, spec, m, 1, sample); err != nil {
				return res, err
			}
			rate := float64(sample) / time.Since(start).Seconds()
			if m == "copy" {
				res.LoadCopyRowsPerSec = rate
			} else {
				res.LoadGenerateRowsPerSec = rate
			}
			if err := e.reset(ctx); err != nil {
				return res, err
			}
		}
		res.LoadMethod = "copy"
		if res.LoadGenerateRowsPerSec > res.LoadCopyRowsPerSec {
			res.LoadMethod = "generate"
		}
	}
	start := time.Now()
	if err := e.load(ctx, spec, res.LoadMethod, 1, cfg.Stored); err != nil {
		return res, err
	}
	res.LoadSec = time.Since(start).Seconds()
	start = time.Now()
	if _, err := e.db.ExecContext(ctx, "VACUUM (ANALYZE) bigtables"); err != nil {
		return res, fmt.Errorf("vacuum after load: %w", err)
	}
	res.VacuumSec = time.Since(start).Seconds()
	if err := e.diskPerRecord(ctx, &res); err != nil {
		return res, err
	}

	step(3, "tick with "+Thousands(cfg.Stored)+" rows stored")
	if err := e.insertDue(ctx, spec.burstA.Add(-24*time.Hour)); err != nil {
		return res, err
	}
	if res.TickMsLarge, err = e.tickBest(ctx, cfg.Stored, spec.burstA.Add(-24*time.Hour)); err != nil {
		return res, fmt.Errorf("large tick: %w", err)
	}
	if res.TickMsSmall > 0 {
		res.TickCostRatio = res.TickMsLarge / res.TickMsSmall
	}
	if _, err := e.db.ExecContext(ctx, "DELETE FROM bigtables WHERE uid LIKE 'due%'"); err != nil {
		return res, err
	}
	if _, err := e.db.ExecContext(ctx, "TRUNCATE bigtable_attempts"); err != nil {
		return res, err
	}

	step(4, "operators' queries at "+Thousands(cfg.Stored)+" rows")
	if res.Queries, err = e.operatorQueries(ctx, cfg.Stored); err != nil {
		return res, err
	}

	nA, nB := spec.count(cfg.Stored, slotBurstA), spec.count(cfg.Stored, slotBurstB)
	step(5, Thousands(nA)+" due at once: one scheduler, one poller")
	b, err := e.burst(ctx, 1, 1, nA, 0)
	if err != nil {
		return res, err
	}
	res.Bursts = append(res.Bursts, b)
	if _, err := e.db.ExecContext(ctx, "VACUUM bigtables"); err != nil {
		return res, fmt.Errorf("vacuum between bursts: %w", err)
	}

	step(6, Thousands(nB)+" due at once: two schedulers, two pollers")
	// Move the store's clock to just after the second set's instant.
	offset := spec.at[slotBurstB-1].Add(time.Second).Sub(time.Now())
	b, err = e.burst(ctx, 2, 2, nB, offset)
	if err != nil {
		return res, err
	}
	res.Bursts = append(res.Bursts, b)

	step(7, "history size")
	if err := e.historyPerAttempt(ctx, &res); err != nil {
		return res, err
	}
	e.progress.end("done")
	return res, nil
}

// insertDue adds the tick test's 1,000 one-off records, due at at.
func (e *env) insertDue(ctx context.Context, at time.Time) error {
	pol := refresh.DefaultPolicy()
	pol.Timeout = refresh.Duration(10 * time.Minute)
	_, err := e.db.ExecContext(ctx, `INSERT INTO bigtables (uid, input_url, schedule, policy, refresh_at, upstream)
		SELECT 'due' || lpad(i::text, 8, '0'), 'http://bench.invalid/due' || i, '', $1::jsonb, $2::timestamptz, 'bench.invalid'
		FROM generate_series(1, 1000) AS i`, string(pol.JSON()), at)
	if err != nil {
		return fmt.Errorf("insert the due records: %w", err)
	}
	_, err = e.db.ExecContext(ctx, "ANALYZE bigtables")
	return err
}

// tickStored times the tick with stored rows in an emptied table: 1,000
// due, the others not due for a day.
func (e *env) tickStored(ctx context.Context, stored int) (float64, error) {
	if err := e.reset(ctx); err != nil {
		return 0, err
	}
	if err := e.insert(ctx, "idle", stored-1000, time.Now().Add(24*time.Hour)); err != nil {
		return 0, err
	}
	at := time.Now().Add(-time.Second)
	if err := e.insertDue(ctx, at); err != nil {
		return 0, err
	}
	return e.tickBest(ctx, stored, at)
}

// tickBest times a scheduler tick starting the 1,000 'due' records, made
// due (at at) again before each of 7 rounds, and returns the best of the
// last 6 in ms (the first warms caches).
func (e *env) tickBest(ctx context.Context, stored int, at time.Time) (float64, error) {
	s := scheduler.New(e.st, e.q, scheduler.Config{Batch: 1000, Logger: e.log, Watermark: nowWatermark})
	var best time.Duration
	for round := range 7 {
		if round > 0 {
			if _, err := e.db.ExecContext(ctx, `UPDATE bigtables SET attempt_uid = NULL, deadline_at = NULL, started_at = NULL,
				attempt_no = 0, refresh_at = $1 WHERE uid LIKE 'due%'`, at); err != nil {
				return 0, err
			}
			e.rdb.Del(ctx, e.names.Input)
		}
		start := time.Now()
		r, err := s.Tick(ctx)
		d := time.Since(start)
		if err != nil {
			return 0, err
		}
		if r.Started != 1000 {
			return 0, fmt.Errorf("tick started %d of 1000", r.Started)
		}
		if round > 0 && (best == 0 || d < best) {
			best = d
		}
		e.progress.update("  tick with %d rows stored: best %.1f ms", stored, float64(best.Microseconds())/1000)
	}
	return float64(best.Microseconds()) / 1000, nil
}

// nowWatermark says every result pushed before now has been applied. The
// bench's pollers keep up and no attempt outlives its timeout, so the
// scheduler need not hold timeouts for them.
func nowWatermark(context.Context) (time.Time, error) { return time.Now(), nil }

// operatorQueries times what an operator's commands run against the
// table: list pages, show, the due lag and the counts.
func (e *env) operatorQueries(ctx context.Context, stored int) ([]QueryTiming, error) {
	type q struct {
		name string
		run  func() error
	}
	mid := fmt.Sprintf("r%08d", stored/2)
	queries := []q{
		{"list, first page of 50", func() error { _, err := e.st.List(ctx, store.ListOptions{Limit: 50}); return err }},
		{"list, a page of 50 in the middle", func() error {
			_, err := e.st.List(ctx, store.ListOptions{Limit: 50, After: mid})
			return err
		}},
		{"list --disabled, first page", func() error {
			_, err := e.st.List(ctx, store.ListOptions{Limit: 50, DisabledOnly: true})
			return err
		}},
		{"show (record and its last 20 attempts)", func() error {
			if _, err := e.st.Get(ctx, mid); err != nil {
				return err
			}
			_, err := e.st.History(ctx, mid, 20)
			return err
		}},
		{"due lag (oldest due refresh_at)", func() error {
			var lag any
			return e.db.QueryRowContext(ctx, `SELECT now() - min(refresh_at) FROM bigtables
				WHERE attempt_uid IS NULL AND NOT disabled_until_update AND refresh_at <= now()`).Scan(&lag)
		}},
		{"stats: count(*) by state over the table", func() error { _, err := e.st.Count(ctx); return err }},
		{"stats from indexes and the planner's estimate", func() error {
			var total float64
			var running, due, disabled int
			return e.db.QueryRowContext(ctx, statsFromIndexes).Scan(&total, &running, &due, &disabled)
		}},
	}
	var out []QueryTiming
	for _, x := range queries {
		var times []float64
		for range 5 {
			start := time.Now()
			if err := x.run(); err != nil {
				return nil, fmt.Errorf("%s: %w", x.name, err)
			}
			times = append(times, float64(time.Since(start).Microseconds())/1000)
		}
		slices.Sort(times)
		out = append(out, QueryTiming{Name: x.name, Ms: times[len(times)/2]})
		e.progress.update("  %s: %.1f ms", x.name, times[len(times)/2])
	}
	return out, nil
}

// statsFromIndexes counts what the partial indexes hold (running, due,
// disabled) with index-only scans, and takes the total from the
// planner's estimate (pg_class.reltuples, kept by ANALYZE and autovacuum):
// a dashboard's counts without reading the table.
const statsFromIndexes = `
SELECT (SELECT sum(GREATEST(c.reltuples, 0)) FROM pg_class AS c
        WHERE c.oid = 'bigtables'::regclass OR c.oid IN (SELECT relid FROM pg_partition_tree('bigtables') WHERE isleaf)),
       (SELECT count(*) FROM bigtables WHERE attempt_uid IS NOT NULL),
       (SELECT count(*) FROM bigtables WHERE attempt_uid IS NULL AND NOT disabled_until_update AND refresh_at <= now()),
       (SELECT count(*) FROM bigtables WHERE disabled_until_update)`

// burst runs schedulers and pollers with trivial workers until the n
// records due at once have been started and applied. offset moves the
// store's clock (0: the database's own).
func (e *env) burst(ctx context.Context, schedulers, pollers, n int, offset time.Duration) (BurstResult, error) {
	res := BurstResult{Schedulers: schedulers, Pollers: pollers, Records: n}
	st, watermark := e.st, nowWatermark
	if offset != 0 {
		clock := func() time.Time { return time.Now().Add(offset) }
		st = e.st.WithClock(clock)
		watermark = func(context.Context) (time.Time, error) { return clock(), nil }
	}
	if err := e.rdb.Del(ctx, e.names.Input, e.names.Output).Err(); err != nil {
		return res, err
	}
	var before int
	if err := e.db.GetContext(ctx, &before, "SELECT count(*) FROM bigtable_attempts"); err != nil {
		return res, err
	}
	lat := make([]float32, n)
	var jobs atomic.Int64
	cpu0, err := e.cpuTimes(ctx)
	if err != nil {
		return res, err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	start := time.Now()
	for range schedulers {
		s := scheduler.New(st, e.q, scheduler.Config{Batch: e.cfg.SchedulerBatch, Logger: e.log, Watermark: watermark})
		wg.Go(func() { s.Run(runCtx) })
	}
	var ps []*poller.Poller
	for range pollers {
		p := poller.New(st, e.q, poller.Config{Batch: e.cfg.PollerBatch, Logger: e.log})
		ps = append(ps, p)
		wg.Go(func() { p.Run(runCtx) })
	}
	ws := e.workers(runCtx, e.cfg.Workers, func(protocol.Job) {
		i := jobs.Add(1) - 1
		if i < int64(n) {
			lat[i] = float32(time.Since(start).Microseconds()) / 1000
		}
	})
	var startedAt time.Duration
	err = e.waitCycles(ctx, n, fmt.Sprintf("%d scheduler(s), %d poller(s)", schedulers, pollers), start, func(context.Context) (int, error) {
		if startedAt == 0 && jobs.Load() >= int64(n) {
			startedAt = time.Since(start)
		}
		var a int64
		for _, p := range ps {
			a += p.Stats().Applied
		}
		return int(a), nil
	})
	applied := time.Since(start)
	stop()
	wg.Wait()
	ws.Wait()
	if err != nil {
		return res, err
	}
	cpu1, err := e.cpuTimes(ctx)
	if err != nil {
		return res, err
	}
	res.PostgresCPUSec, res.GoCPUSec = cpu1.postgresSince(cpu0), cpu1.self-cpu0.self
	res.StartedSec, res.AppliedSec = startedAt.Seconds(), applied.Seconds()
	res.CyclesPerSec = float64(n) / applied.Seconds()
	l := make([]float64, n)
	for i, v := range lat {
		l[i] = float64(v)
	}
	res.DueToJobP50Ms, res.DueToJobP99Ms = percentile(l, 50), percentile(l, 99)
	var attempts, distinct int
	if err := e.db.QueryRowContext(ctx, "SELECT count(*), count(DISTINCT uid) FROM bigtable_attempts").Scan(&attempts, &distinct); err != nil {
		return res, err
	}
	res.ExactlyOnce = attempts-before == n && distinct == attempts && jobs.Load() == int64(n)
	return res, nil
}

// diskPerRecord reads the records table's sizes (every partition's).
func (e *env) diskPerRecord(ctx context.Context, res *ScaleResult) error {
	var heap, table, indexes float64
	err := e.db.QueryRowContext(ctx, `SELECT sum(pg_relation_size(r)), sum(pg_table_size(r)), sum(pg_indexes_size(r))
		FROM unnest(`+relations+`) AS r`).Scan(&heap, &table, &indexes)
	if err != nil {
		return fmt.Errorf("table sizes: %w", err)
	}
	n := float64(res.Stored)
	res.TableBytesPerRecord, res.ToastBytesPerRecord, res.IndexBytesPerRecord = heap/n, (table-heap)/n, indexes/n
	rows, err := e.db.QueryContext(ctx, `SELECT regexp_replace(i.indexrelid::regclass::text, '_p[0-9]+_', '_'), sum(pg_relation_size(i.indexrelid))
		FROM pg_index AS i WHERE i.indrelid = ANY(`+relations+`) GROUP BY 1 ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("index sizes: %w", err)
	}
	defer rows.Close()
	res.IndexBytes = map[string]float64{}
	for rows.Next() {
		var name string
		var b float64
		if err := rows.Scan(&name, &b); err != nil {
			return err
		}
		res.IndexBytes[name] = b / n
	}
	return rows.Err()
}

// relations is the records table, or its partitions when partitioned.
const relations = `COALESCE((SELECT array_agg(relid) FROM pg_partition_tree('bigtables') WHERE isleaf), ARRAY['bigtables'::regclass])`

// historyPerAttempt reads the history's size per attempt recorded.
func (e *env) historyPerAttempt(ctx context.Context, res *ScaleResult) error {
	var heap, indexes, db float64
	err := e.db.QueryRowContext(ctx, `SELECT count(*), pg_table_size('bigtable_attempts'), pg_indexes_size('bigtable_attempts'),
		pg_database_size(current_database()) FROM bigtable_attempts`).Scan(&res.HistoryAttempts, &heap, &indexes, &db)
	if err != nil {
		return fmt.Errorf("history size: %w", err)
	}
	if res.HistoryAttempts > 0 {
		res.HistoryBytesPerAttempt = heap / float64(res.HistoryAttempts)
		res.HistoryIndexPerAttempt = indexes / float64(res.HistoryAttempts)
	}
	res.DatabaseMiB = db / (1 << 20)
	return nil
}

// Thousands writes n with commas between groups of three digits, as the
// bench reports print counts.
func Thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
