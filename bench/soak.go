package bench

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/bigtables/bigtables/internal/wait"
	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/schedule"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/lib/pq"
)

// SoakConfig sets a soak run (`bigtables soak`). Zero values take the
// defaults.
type SoakConfig struct {
	// AdminURL is a PostgreSQL URL with the right to create databases.
	AdminURL string
	// RedisURL is the Redis to use; the run's keys carry a random prefix.
	RedisURL string
	// Duration is how long the steady load runs (default 30m).
	Duration time.Duration
	// Step is the length of one sample: a row of the table, a point of the
	// plot (default 1m).
	Step time.Duration
	// Rate is the cycles per second to sustain; 0 (the default) measures the
	// peak first (one scheduler and poller cycling 30,000 due records) and
	// takes half.
	Rate float64
	// Period is every record's schedule, in whole minutes (default 1: each
	// record refreshes every minute; Rate × Period records are stored).
	Period int
	// FailEvery makes about one attempt in FailEvery a retryable failure
	// (default 50; negative: none).
	FailEvery int
	// Workers is the number of in-process trivial workers (default 8).
	Workers int
	// TableOptions are storage parameters set on the records table before
	// loading, e.g. "fillfactor=70,autovacuum_vacuum_scale_factor=0.02".
	TableOptions string
	// VacuumEvery runs VACUUM on both tables at this interval. 0 (the
	// default) leaves it to autovacuum when the server has it on, and is
	// 1m when it is off; negative never vacuums.
	VacuumEvery time.Duration
	// HistoryAge is the history's retention during the run: attempts older
	// are pruned every second (default 10m), so the history's size is
	// bounded by it.
	HistoryAge time.Duration
	// Plot, when not empty, is the SVG file the samples are drawn into.
	Plot string
	// Progress receives progress lines.
	Progress io.Writer
}

func (c *SoakConfig) defaults() {
	if c.Duration <= 0 {
		c.Duration = 30 * time.Minute
	}
	if c.Step <= 0 {
		c.Step = time.Minute
	}
	if c.Period <= 0 {
		c.Period = 1
	}
	if c.FailEvery == 0 {
		c.FailEvery = 50
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.HistoryAge <= 0 {
		c.HistoryAge = 10 * time.Minute
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

var tableOptions = regexp.MustCompile(`^[a-z_]+=[0-9a-z_.]+(,[a-z_]+=[0-9a-z_.]+)*$`)

// Validate reports a configuration a soak cannot use.
func (c SoakConfig) Validate() error {
	c.defaults()
	switch {
	case c.Step < 10*time.Second || c.Step > c.Duration:
		return fmt.Errorf("step %v: from 10s to the duration (%v)", c.Step, c.Duration)
	case c.Rate < 0 || c.Rate*float64(c.Period)*60 > 20_000_000:
		return fmt.Errorf("rate %.0f/s with a %d-minute period: at most 20,000,000 records", c.Rate, c.Period)
	case c.Period > 60:
		return fmt.Errorf("period %d minutes: at most 60", c.Period)
	case c.TableOptions != "" && !tableOptions.MatchString(c.TableOptions):
		return fmt.Errorf("table options %q: name=value pairs separated by commas, e.g. fillfactor=70", c.TableOptions)
	}
	return nil
}

// SoakSample is one step of a soak.
type SoakSample struct {
	// Minute is the end of the step, in minutes since the load started.
	Minute float64 `json:"minute"`
	// CyclesPerSec is the results applied in the step, per second.
	CyclesPerSec float64 `json:"cycles_per_sec"`
	// DueToJobP99Ms: from a record's due time to its job at a worker.
	DueToJobP50Ms float64 `json:"due_to_job_p50_ms"`
	DueToJobP99Ms float64 `json:"due_to_job_p99_ms"`
	// StartToAppliedP99Ms: from the start (scheduler) to the result
	// applied (poller), for the attempts the step finished, from the
	// history.
	StartToAppliedP99Ms float64 `json:"start_to_applied_p99_ms"`
	TableMiB            float64 `json:"table_mib"`
	IndexMiB            float64 `json:"index_mib"`
	HistoryMiB          float64 `json:"history_mib"`
	LiveTuples          int64   `json:"live_tuples"`
	DeadTuples          int64   `json:"dead_tuples"`
	// HOTPercent is the share of the step's updates of the records table
	// that were HOT (no new index entries).
	HOTPercent float64 `json:"hot_percent"`
	Vacuums    int64   `json:"vacuums"` // so far, manual and auto
	RSSMiB     float64 `json:"rss_mib"`
	HeapMiB    float64 `json:"heap_mib"`
}

// SoakResult holds the figures of a soak.
type SoakResult struct {
	PeakCyclesPerSec float64      `json:"peak_cycles_per_sec,omitempty"`
	Rate             float64      `json:"rate"`
	Records          int          `json:"records"`
	Period           int          `json:"period_minutes"`
	Duration         string       `json:"duration"`
	Autovacuum       string       `json:"autovacuum"`
	VacuumEvery      string       `json:"vacuum_every"`
	TableOptions     string       `json:"table_options"`
	Samples          []SoakSample `json:"samples"`
	// Window is how many steps the drift compares at each end (five
	// minutes' worth, at most a third of the run).
	Window int `json:"window_steps"`
	// FirstRate and LastRate are the mean cycles/s of the first and last
	// windows; Drift is |last - first| / first.
	FirstRate float64 `json:"first_rate"`
	LastRate  float64 `json:"last_rate"`
	Drift     float64 `json:"drift"`
	// Plot is the SVG written, if any.
	Plot string `json:"plot,omitempty"`
}

// TargetSoakDrift is the most the soak's throughput may drift between its
// first and last five minutes.
const TargetSoakDrift = 0.10

// soakInsert stores the soak's records: record i runs every period at
// second slot i % slots of it, first at the next such time.
const soakInsert = `
INSERT INTO bigtables (uid, input_url, schedule, policy, refresh_at, upstream)
SELECT 's' || lpad(i::text, 8, '0'), 'http://bench.invalid/' || i, ($3::text[])[i % $5 + 1], $4::jsonb, ($6::timestamptz[])[i % $5 + 1], 'bench.invalid'
FROM generate_series($1::int, $2::int) AS i`

// RunSoak runs a steady load for cfg.Duration and samples it every
// cfg.Step. It creates its own database and drops it afterwards.
func RunSoak(ctx context.Context, cfg SoakConfig) (SoakResult, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return SoakResult{}, err
	}
	res := SoakResult{Period: cfg.Period, Duration: cfg.Duration.String(), TableOptions: cfg.TableOptions, Plot: cfg.Plot}
	e, cleanup, err := setup(ctx, Config{AdminURL: cfg.AdminURL, RedisURL: cfg.RedisURL, Progress: cfg.Progress,
		Workers: cfg.Workers, Records: 30_000})
	if err != nil {
		return res, err
	}
	defer cleanup()
	if err := e.db.GetContext(ctx, &res.Autovacuum, "SHOW autovacuum"); err != nil {
		return res, fmt.Errorf("read autovacuum: %w", err)
	}
	vacuumEvery := cfg.VacuumEvery
	if vacuumEvery == 0 && res.Autovacuum != "on" {
		vacuumEvery = time.Minute
	}
	switch {
	case vacuumEvery > 0:
		res.VacuumEvery = vacuumEvery.String()
	case vacuumEvery == 0:
		res.VacuumEvery = "autovacuum"
	default:
		res.VacuumEvery = "never"
	}

	res.Rate = cfg.Rate
	if res.Rate == 0 {
		e.progress.step("measuring the peak rate (30,000 records, one scheduler and poller)...")
		if res.PeakCyclesPerSec, err = e.endToEnd(ctx, 1, 1); err != nil {
			return res, fmt.Errorf("peak rate: %w", err)
		}
		res.Rate = res.PeakCyclesPerSec / 2
	}
	if err := e.reset(ctx); err != nil {
		return res, err
	}
	if cfg.TableOptions != "" {
		if _, err := e.db.ExecContext(ctx, "ALTER TABLE bigtables SET ("+cfg.TableOptions+")"); err != nil {
			return res, fmt.Errorf("table options %s: %w", cfg.TableOptions, err)
		}
	}

	// Load: one record per (slot, k), every slot of the period alike.
	period := time.Duration(cfg.Period) * time.Minute
	slots := cfg.Period * 60
	res.Records = max(int(res.Rate*period.Seconds()), slots)
	e.progress.step("storing %s records on a %d-minute schedule (%.0f cycles/s)...", Thousands(res.Records), cfg.Period, res.Rate)
	day0 := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	texts, first := make([]string, slots), make([]time.Time, slots)
	// Nothing falls due while loading (about 100,000 rows/s here), so the
	// run starts in its steady state: a period's records spread evenly.
	loadAt := time.Now().Add(5*time.Second + time.Duration(res.Records/100)*time.Millisecond)
	for s := range slots {
		texts[s] = fmt.Sprintf("DTSTART:%s\nRRULE:FREQ=MINUTELY;INTERVAL=%d", day0.Add(time.Duration(s)*time.Second).Format("20060102T150405Z"), cfg.Period)
		first[s] = schedule.MustParse(texts[s]).Next(loadAt)
	}
	pol := refresh.DefaultPolicy()
	pol.Timeout = refresh.Duration(10 * time.Minute)
	for a := 1; a <= res.Records; a += 500_000 {
		b := min(a+499_999, res.Records)
		if _, err := e.db.ExecContext(ctx, soakInsert, a, b, pq.StringArray(texts), string(pol.JSON()), slots, pq.Array(first)); err != nil {
			return res, fmt.Errorf("store soak records: %w", err)
		}
	}
	if _, err := e.db.ExecContext(ctx, "VACUUM (ANALYZE) bigtables"); err != nil {
		return res, err
	}

	// The run, from the first record due.
	if err := wait.Sleep(ctx, time.Until(loadAt)); err != nil {
		return res, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var lat latencies
	retention := scheduler.Retention{MaxAge: cfg.HistoryAge, Every: time.Second, Batch: max(int(2*res.Rate), 1000)}
	s := scheduler.New(e.st, e.q, scheduler.Config{Batch: 1000, Logger: e.log, Watermark: nowWatermark, Retention: &retention})
	p := poller.New(e.st, e.q, poller.Config{Batch: 1000, Logger: e.log})
	wg.Go(func() { s.Run(runCtx) })
	wg.Go(func() { p.Run(runCtx) })
	failEvery := uint32(max(cfg.FailEvery, 0))
	ws := e.workersAnswering(runCtx, cfg.Workers, func(j protocol.Job) protocol.Result {
		now := time.Now()
		i, _ := strconv.Atoi(j.BigTableUID[1:])
		slotStart := day0.Add(time.Duration(i%slots) * time.Second)
		due := now.Add(-now.Sub(slotStart) % period)
		lat.add(float32(now.Sub(due).Microseconds()) / 1000)
		r := protocol.Result{BigTableUID: j.BigTableUID, AttemptUID: j.AttemptUID, Type: protocol.Success}
		if failEvery > 0 {
			h := fnv.New32a()
			h.Write([]byte(j.AttemptUID))
			if h.Sum32()%failEvery == 0 {
				r.Type, r.Message = protocol.Failure, "soak: a retryable failure"
			}
		}
		return r
	})
	if vacuumEvery > 0 {
		wg.Go(func() {
			for {
				select {
				case <-runCtx.Done():
					return
				case <-time.After(vacuumEvery):
				}
				e.db.ExecContext(runCtx, "VACUUM bigtables, bigtable_attempts")
			}
		})
	}

	e.progress.step("soaking for %v, a sample every %v...", cfg.Duration, cfg.Step)
	start := time.Now()
	prevApplied := int64(0)
	prevStats, err := e.tableStats(ctx)
	if err != nil {
		return res, err
	}
	for n := 1; time.Duration(n)*cfg.Step <= cfg.Duration; n++ {
		end := start.Add(time.Duration(n) * cfg.Step)
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(time.Until(end)):
		}
		applied := p.Stats().Applied
		sm := SoakSample{Minute: time.Since(start).Minutes(), CyclesPerSec: float64(applied-prevApplied) / cfg.Step.Seconds()}
		prevApplied = applied
		sm.DueToJobP50Ms, sm.DueToJobP99Ms = lat.take()
		st, err := e.tableStats(ctx)
		if err != nil {
			return res, err
		}
		sm.TableMiB, sm.IndexMiB, sm.HistoryMiB = st.table/(1<<20), st.indexes/(1<<20), st.history/(1<<20)
		sm.LiveTuples, sm.DeadTuples, sm.Vacuums = st.live, st.dead, st.vacuums
		if d := st.updates - prevStats.updates; d > 0 {
			sm.HOTPercent = 100 * float64(st.hot-prevStats.hot) / float64(d)
		}
		prevStats = st
		if err := e.db.GetContext(ctx, &sm.StartToAppliedP99Ms, `SELECT COALESCE(1000 * extract(epoch FROM
			percentile_disc(0.99) WITHIN GROUP (ORDER BY finished_at - started_at)), 0)::float8
			FROM bigtable_attempts WHERE finished_at >= $1 AND finished_at < $2`, end.Add(-cfg.Step), end); err != nil {
			return res, fmt.Errorf("latency from the history: %w", err)
		}
		sm.RSSMiB = float64(vmRSS(os.Getpid())) / 1024
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		sm.HeapMiB = float64(ms.HeapInuse) / (1 << 20)
		res.Samples = append(res.Samples, sm)
		e.progress.step("  %5.1f min: %6.0f cycles/s, due->job p99 %5.0f ms, start->applied p99 %5.0f ms, table %4.0f MiB, indexes %4.0f MiB, dead %d, RSS %.0f MiB",
			sm.Minute, sm.CyclesPerSec, sm.DueToJobP99Ms, sm.StartToAppliedP99Ms, sm.TableMiB, sm.IndexMiB, sm.DeadTuples, sm.RSSMiB)
	}
	stop()
	wg.Wait()
	ws.Wait()
	res.summarize(cfg.Step)
	if cfg.Plot != "" {
		if err := WriteSoakPlot(cfg.Plot, res); err != nil {
			return res, err
		}
	}
	e.progress.end("done")
	return res, nil
}

// summarize computes the drift between the first and the last windows of
// five minutes (at most a third of the run each).
func (r *SoakResult) summarize(step time.Duration) {
	n := len(r.Samples)
	if n == 0 {
		return
	}
	r.Window = max(min(int(5*time.Minute/step), n/3), 1)
	mean := func(s []SoakSample) float64 {
		var t float64
		for _, x := range s {
			t += x.CyclesPerSec
		}
		return t / float64(len(s))
	}
	r.FirstRate, r.LastRate = mean(r.Samples[:r.Window]), mean(r.Samples[n-r.Window:])
	if r.FirstRate > 0 {
		r.Drift = (r.LastRate - r.FirstRate) / r.FirstRate
		if r.Drift < 0 {
			r.Drift = -r.Drift
		}
	}
}

// latencies collects one step's latencies from many goroutines.
type latencies struct {
	mu sync.Mutex
	v  []float64
}

func (l *latencies) add(ms float32) {
	l.mu.Lock()
	l.v = append(l.v, float64(ms))
	l.mu.Unlock()
}

// take returns p50 and p99 of the step and starts the next one, keeping the
// buffer (its size is one step's jobs).
func (l *latencies) take() (p50, p99 float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p50, p99 = percentile(l.v, 50), percentile(l.v, 99)
	l.v = l.v[:0]
	return p50, p99
}

type tableStats struct {
	table, indexes, history float64
	live, dead, vacuums     int64
	updates, hot            int64
}

func (e *env) tableStats(ctx context.Context) (tableStats, error) {
	var s tableStats
	err := e.db.QueryRowContext(ctx, `SELECT pg_table_size('bigtables'), pg_indexes_size('bigtables'),
		pg_total_relation_size('bigtable_attempts'), n_live_tup, n_dead_tup, vacuum_count + autovacuum_count,
		n_tup_upd, n_tup_hot_upd
		FROM pg_stat_user_tables WHERE relid = 'bigtables'::regclass`).Scan(&s.table, &s.indexes, &s.history,
		&s.live, &s.dead, &s.vacuums, &s.updates, &s.hot)
	if err != nil {
		return s, fmt.Errorf("table statistics: %w", err)
	}
	return s, nil
}
