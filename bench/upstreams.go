package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/upstream"
)

// UpstreamsResult are the figures of the upstreams scenario: 10 upstreams,
// one of them dead for a while.
type UpstreamsResult struct {
	// RecordsPerUpstream refresh every PeriodSec seconds.
	RecordsPerUpstream int     `json:"records_per_upstream"`
	PeriodSec          float64 `json:"period_sec"`
	// HealthyRefreshesPerSec: successes per second of the nine healthy
	// upstreams together, with all ten up, then while the tenth is dead;
	// HealthyThroughputRatio is the second over the first.
	HealthyRefreshesPerSec     float64 `json:"healthy_refreshes_per_sec"`
	HealthyWhileDeadPerSec     float64 `json:"healthy_while_dead_per_sec"`
	HealthyThroughputRatio     float64 `json:"healthy_throughput_ratio"`
	DeadSec                    float64 `json:"dead_sec"`
	AttemptsOnDeadWhileOpen    int     `json:"attempts_on_dead_while_open"`
	ProbeRounds                int     `json:"probe_rounds"`
	ProbesAllowed              int     `json:"probes_allowed"`
	ParkedAtRecovery           int     `json:"parked_at_recovery"`
	ReleaseSec                 float64 `json:"release_sec"`
	ReleaseRatePerSec          float64 `json:"release_rate_per_sec"`
	ReleaseObservedPerSec      float64 `json:"release_observed_per_sec"`
	DisabledOnDeadUpstream     int     `json:"disabled_on_dead_upstream"`
	AttemptsOnDeadBeforeOpened int     `json:"attempts_on_dead_before_opened"`
	// AttemptsOnDeadAsItOpened are the attempts started by ticks that ran
	// while the opening was being committed: they read the breaker closed
	// (docs/design.md, U5). AttemptsOnDeadWhileOpen counts only those
	// started after the opening was visible, which must be probes.
	AttemptsOnDeadAsItOpened int `json:"attempts_on_dead_as_it_opened"`
}

// Upstreams runs the upstreams scenario against local services (see
// UpstreamsResult). It takes about 40 seconds.
func Upstreams(ctx context.Context, cfg Config) (UpstreamsResult, error) {
	cfg.defaults()
	e, cleanup, err := setup(ctx, cfg)
	if err != nil {
		return UpstreamsResult{}, err
	}
	defer cleanup()
	return e.upstreams(ctx)
}

func (e *env) upstreams(ctx context.Context) (UpstreamsResult, error) {
	const (
		ups     = 10
		perUp   = 200
		period  = 2 * time.Second
		phase   = 10 * time.Second
		dead    = "up0.invalid"
		release = 20.0 // parked records released per second
	)
	res := UpstreamsResult{RecordsPerUpstream: perUp, PeriodSec: period.Seconds(), ReleaseRatePerSec: release}
	if err := e.reset(ctx); err != nil {
		return res, err
	}
	e.db.ExecContext(ctx, "TRUNCATE upstreams")
	pol := refresh.DefaultPolicy()
	pol.Timeout, pol.Align = refresh.Duration(10*time.Second), false
	pol.SetStrategy(refresh.ListStrategy(refresh.Duration(time.Second), refresh.Duration(time.Second), refresh.Duration(time.Second)))
	pol.OnExhausted = refresh.WaitNext
	dtstart := time.Now().UTC().Truncate(time.Second)
	sched := fmt.Sprintf("DTSTART:%s\nRRULE:FREQ=SECONDLY;INTERVAL=%d", dtstart.Format("20060102T150405Z"), int(period.Seconds()))
	const q = `INSERT INTO bigtables (uid, input_url, schedule, policy, refresh_at, upstream)
		SELECT 'u' || (i % $1) || '-' || i, 'http://up' || (i % $1) || '.invalid/' || i, $2, $3::jsonb,
			now() + (i % 100) * interval '20 milliseconds', 'up' || (i % $1) || '.invalid'
		FROM generate_series(0, $4 - 1) AS i`
	if _, err := e.db.ExecContext(ctx, q, ups, sched, string(pol.JSON()), ups*perUp); err != nil {
		return res, fmt.Errorf("insert records: %w", err)
	}
	c := upstream.DefaultConfig()
	c.ReleaseRate = release
	c.Breaker.CoolDown, c.Breaker.MaxCoolDown, c.Breaker.Probes = refresh.Duration(2*time.Second), refresh.Duration(4*time.Second), 1
	if err := e.st.SetUpstream(ctx, dead, c); err != nil {
		return res, err
	}

	var down atomic.Bool
	var mu sync.Mutex
	ok := map[string]int{}   // successes by upstream
	var deadJobs []time.Time // start times of the jobs on the dead upstream
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	s := scheduler.New(e.st, e.q, scheduler.Config{Interval: 50 * time.Millisecond, Logger: e.log})
	wg.Go(func() { s.Run(runCtx) })
	p := poller.New(e.st, e.q, poller.Config{Idle: 10 * time.Millisecond, Logger: e.log})
	wg.Go(func() { p.Run(runCtx) })
	workers := e.workersAnswering(runCtx, e.cfg.Workers, func(j protocol.Job) protocol.Result {
		up := upstream.Name(j.InputURL)
		r := protocol.Result{BigTableUID: j.BigTableUID, AttemptUID: j.AttemptUID, Type: protocol.Success}
		mu.Lock()
		defer mu.Unlock()
		if up == dead {
			deadJobs = append(deadJobs, j.DeadlineAt.Add(-time.Duration(pol.Timeout)))
		}
		if up == dead && down.Load() {
			r.Type, r.Message = protocol.Failure, "503"
		} else {
			ok[up]++
		}
		return r
	})
	healthy := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for up, k := range ok {
			if up != dead {
				n += k
			}
		}
		return n
	}
	// measure counts the healthy successes over a whole number of periods
	// (phase), from halfway between two due times: every record falls due
	// once per period, at the same instant, so a window that started at a
	// due time would count one burst more or less (±10 %).
	measure := func(label string) float64 {
		e.progress.update("upstreams: %s", label)
		since := time.Since(dtstart.Add(period / 2))
		time.Sleep(period - since%period)
		n0 := healthy()
		time.Sleep(phase)
		return float64(healthy()-n0) / phase.Seconds()
	}
	time.Sleep(2 * period) // warm up: every record has run once
	res.HealthyRefreshesPerSec = measure("all ten up")

	down.Store(true)
	deadFrom := time.Now()
	// When the breaker's first opening became visible to a new statement:
	// attempts started by ticks that began later saw it open.
	var openSeen time.Time
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var watch sync.WaitGroup
	watch.Go(func() {
		for watchCtx.Err() == nil {
			var b string
			if e.db.QueryRowContext(watchCtx, `SELECT breaker FROM upstreams WHERE name = $1`, dead).Scan(&b) == nil && b != string(upstream.Closed) {
				openSeen = time.Now()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	res.HealthyWhileDeadPerSec = measure("one dead")
	time.Sleep(phase / 2)
	var openedAt time.Time
	var opens int
	if err := e.db.QueryRowContext(ctx, `SELECT COALESCE(min(finished_at), now()) FROM bigtable_attempts
		WHERE uid LIKE 'u0-%' AND outcome = 'failure'`).Scan(&openedAt); err != nil {
		return res, err
	}
	if err := e.db.QueryRowContext(ctx, `SELECT opens FROM upstreams WHERE name = $1`, dead).Scan(&opens); err != nil {
		return res, err
	}
	if err := e.db.QueryRowContext(ctx, `SELECT count(*) FROM bigtables WHERE upstream = $1 AND parked_at IS NOT NULL`, dead).Scan(&res.ParkedAtRecovery); err != nil {
		return res, err
	}
	down.Store(false)
	recovered := time.Now()
	stopWatch()
	watch.Wait()
	if openSeen.IsZero() {
		openSeen = recovered
	}
	res.DeadSec = recovered.Sub(deadFrom).Seconds()
	res.ProbeRounds = max(opens-1, 0) + 1 // every reopening follows a failed round; the last round may be out
	res.ProbesAllowed = res.ProbeRounds * c.Breaker.Probes

	// Wait for every parked record to be released and refreshed.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var parked int
		if err := e.db.QueryRowContext(ctx, `SELECT count(*) FROM bigtables WHERE upstream = $1 AND (parked_at IS NOT NULL OR failing_since IS NOT NULL)`, dead).Scan(&parked); err != nil {
			return res, err
		}
		e.progress.update("upstreams: releasing, %d left", parked)
		if parked == 0 {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("upstreams: %d parked or failing records left 2 minutes after the recovery", parked)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res.ReleaseSec = time.Since(recovered).Seconds()
	if res.ReleaseSec > 0 {
		res.ReleaseObservedPerSec = float64(res.ParkedAtRecovery) / res.ReleaseSec
	}
	stop()
	wg.Wait()
	workers.Wait()

	// The breaker opened with the Consecutive-th failure (openAt, the
	// start of the poller's transaction) and was visible from openSeen.
	// Attempts started after openSeen and before the recovery must be
	// probes; those between were started by ticks that read the breaker
	// closed while the opening was being committed. Counted from the jobs'
	// start times.
	var openAt time.Time
	e.db.QueryRowContext(ctx, `SELECT finished_at FROM bigtable_attempts WHERE uid LIKE 'u0-%' AND outcome = 'failure'
		ORDER BY finished_at OFFSET $1 LIMIT 1`, c.Breaker.Consecutive-1).Scan(&openAt)
	for _, t := range deadJobs {
		switch {
		case t.After(openSeen) && t.Before(recovered):
			res.AttemptsOnDeadWhileOpen++
		case t.After(openAt) && t.Before(recovered):
			res.AttemptsOnDeadAsItOpened++
		case !t.After(openAt) && t.After(deadFrom):
			res.AttemptsOnDeadBeforeOpened++
		}
	}
	if err := e.db.QueryRowContext(ctx, `SELECT count(*) FROM bigtables WHERE upstream = $1 AND disabled_until_update`, dead).Scan(&res.DisabledOnDeadUpstream); err != nil {
		return res, err
	}
	if res.HealthyRefreshesPerSec > 0 {
		res.HealthyThroughputRatio = res.HealthyWhileDeadPerSec / res.HealthyRefreshesPerSec
	}
	return res, nil
}
