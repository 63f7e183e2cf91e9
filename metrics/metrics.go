// Package metrics is what the long-running processes (scheduler, poller,
// worker) serve on --http: Prometheus metrics on /metrics (Go and process
// collectors included), liveness on /healthz (each loop ran recently) and
// readiness on /readyz (PostgreSQL and Redis answer), with JSON bodies that
// say what is wrong. Labels stay few and fixed: never a record's uid.
//
// The scheduler and poller report through their Observer interfaces,
// which Metrics implements; they import nothing from here.
package metrics

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Sources are what the scrape-time gauges read; a nil field leaves its
// gauges out (the worker has no database).
type Sources struct {
	// Depths reads the queue lengths (bigtables_queue_length).
	Depths func(context.Context) (queue.Depths, error)
	// PollersAlive counts live pollers (bigtables_pollers_alive).
	PollersAlive func(context.Context) (int, error)
	// DueLag is how late the oldest due record is
	// (bigtables_due_lag_seconds).
	DueLag func(context.Context) (time.Duration, error)
	// Parked counts the records in phase parked (bigtables_records_parked).
	Parked func(context.Context) (int64, error)
	// Upstreams lists the upstreams that have a row in the upstreams table
	// (bigtables_upstream_breaker_state, bigtables_upstreams).
	Upstreams func(context.Context) ([]store.UpstreamRow, error)
	// MaxUpstreams bounds the series of bigtables_upstream_breaker_state:
	// upstreams whose breaker is not closed first, then configured ones,
	// then by name. Default 500.
	MaxUpstreams int
	// Timeout bounds one scrape's reads. Default 3s.
	Timeout time.Duration
	// Logger receives a line per failed read. Default slog.Default().
	Logger *slog.Logger
}

// Metrics holds the registry of one process and implements
// scheduler.Observer and poller.Observer.
type Metrics struct {
	// Registry is what /metrics serves.
	Registry *prometheus.Registry
	// Health is told of every tick and round by the Observe methods.
	Health *Health

	attemptsStarted  prometheus.Counter
	attemptsTimedOut prometheus.Counter
	attemptsUndone   prometheus.Counter
	recordsDisabled  prometheus.Counter
	recordsUnread    prometheus.Counter
	breakerParked    prometheus.Counter
	limitWaits       prometheus.Counter
	released         prometheus.Counter
	transitions      *prometheus.CounterVec
	timeoutsHeld     prometheus.Gauge
	results          *prometheus.CounterVec
	tickDuration     prometheus.Histogram
	tickErrors       prometheus.Counter
	batchDuration    prometheus.Histogram
	batchErrors      prometheus.Counter
}

// Result outcomes and types are known in advance, so every series exists
// from the start (a rate() over a series that appears late misses its
// first increase).
var (
	resultTypes    = []string{"success", "failure", "status", poller.TypeInvalid}
	resultOutcomes = []string{poller.OutcomeApplied, poller.OutcomeStale, poller.OutcomeDead}
)

// New returns the metrics of one process with the Go and process
// collectors and the scrape-time gauges of src registered. health may be
// nil (a Health with no loops).
func New(src Sources, health *Health) *Metrics {
	if health == nil {
		health = NewHealth(nil)
	}
	reg := prometheus.NewRegistry()
	m := &Metrics{Registry: reg, Health: health}
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		f(c)
		return c
	}
	m.attemptsStarted = counter("bigtables_attempts_started_total", "Attempts started by this scheduler whose jobs were pushed in time.")
	m.attemptsTimedOut = counter("bigtables_attempts_timed_out_total", "Running attempts this scheduler failed with reason timeout.")
	m.attemptsUndone = counter("bigtables_attempts_undone_total", "Starts reverted because their push failed or landed too late, or found never pushed at their deadline (started again).")
	m.recordsDisabled = counter("bigtables_records_disabled_total", "Records disabled by a final failure (a timeout in the scheduler, a failure in the poller).")
	m.recordsUnread = counter("bigtables_records_unreadable_total", "Records disabled because their stored schedule or policy cannot be read.")
	m.breakerParked = counter("bigtables_records_breaker_parked_total", "Due records this scheduler parked because their upstream's breaker is open (no attempt burned).")
	m.limitWaits = counter("bigtables_records_limit_waits_total",
		"Due records a limit of their upstream (max in flight, rate) held back at a tick of this scheduler; a record held at several ticks counts at each.")
	m.released = counter("bigtables_records_released_total", "Parked records this scheduler released (probes of a half-open breaker, or after it closed).")
	m.transitions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bigtables_breaker_transitions_total",
		Help: "Transitions of the upstreams' breakers this process made, by the state they went to (open, half_open, closed)."}, []string{"to"})
	f(m.transitions)
	for _, s := range breakerStates {
		m.transitions.WithLabelValues(string(s))
	}
	m.tickErrors = counter("bigtables_tick_errors_total", "Scheduler ticks that failed.")
	m.batchErrors = counter("bigtables_batch_errors_total", "Poller rounds (drain and apply) that failed.")
	m.timeoutsHeld = prometheus.NewGauge(prometheus.GaugeOpts{Name: "bigtables_timeouts_held",
		Help: "Attempts past their deadline not timed out yet, at the last tick: their results may still wait for a poller."})
	f(m.timeoutsHeld)
	m.results = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bigtables_results_total",
		Help: "Results drained by this poller, by type (success, failure, status, invalid) and outcome (applied, stale, dead)."},
		[]string{"type", "outcome"})
	f(m.results)
	for _, t := range resultTypes {
		for _, o := range resultOutcomes {
			m.results.WithLabelValues(t, o)
		}
	}
	m.tickDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bigtables_tick_duration_seconds",
		Help: "How long a scheduler tick took (claim, plan, commit, push).", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12)})
	f(m.tickDuration)
	m.batchDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bigtables_batch_duration_seconds",
		Help: "How long a poller round took (drain, apply, commit, acknowledge) when it handled results.", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12)})
	f(m.batchDuration)
	f(&gauges{src: src.withDefaults()})
	return m
}

func (s Sources) withDefaults() Sources {
	if s.Timeout <= 0 {
		s.Timeout = 3 * time.Second
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.MaxUpstreams <= 0 {
		s.MaxUpstreams = 500
	}
	return s
}

// ObserveTick implements scheduler.Observer.
func (m *Metrics) ObserveTick(res scheduler.TickResult, took time.Duration, err error) {
	m.attemptsStarted.Add(float64(res.Started))
	m.attemptsTimedOut.Add(float64(res.TimedOut))
	m.attemptsUndone.Add(float64(res.Undone + res.Redriven))
	m.recordsDisabled.Add(float64(res.Disabled))
	m.recordsUnread.Add(float64(res.Unreadable))
	m.breakerParked.Add(float64(res.BreakerParked))
	m.limitWaits.Add(float64(res.Waiting))
	m.released.Add(float64(res.Released))
	m.addTransitions(res.BreakerTransitions)
	m.timeoutsHeld.Set(float64(res.Held))
	m.tickDuration.Observe(took.Seconds())
	if err != nil {
		m.tickErrors.Inc()
	}
	m.Health.Beat("scheduler", err)
}

// ObserveResults implements poller.Observer.
func (m *Metrics) ObserveResults(c poller.BatchCounts) {
	for k, n := range c.Results {
		typ := k.Type
		if typ != "success" && typ != "failure" && typ != "status" {
			typ = poller.TypeInvalid // keeps the label's values fixed
		}
		m.results.WithLabelValues(typ, k.Outcome).Add(float64(n))
	}
	m.recordsDisabled.Add(float64(c.Disabled))
	m.addTransitions(c.BreakerTransitions)
}

// addTransitions counts breaker transitions by the state they went to.
func (m *Metrics) addTransitions(by map[upstream.BreakerState]int) {
	for to, n := range by {
		if !knownState(to) {
			continue // keeps the label's values fixed
		}
		m.transitions.WithLabelValues(string(to)).Add(float64(n))
	}
}

// breakerStates are the values of the breaker labels, in the order of the
// numbers bigtables_upstream_breaker_state reports (0, 1, 2).
var breakerStates = []upstream.BreakerState{upstream.Closed, upstream.HalfOpen, upstream.Open}

func knownState(s upstream.BreakerState) bool {
	for _, k := range breakerStates {
		if k == s {
			return true
		}
	}
	return false
}

// ObserveRound implements poller.Observer.
func (m *Metrics) ObserveRound(results int, took time.Duration, err error) {
	if results > 0 || err != nil {
		m.batchDuration.Observe(took.Seconds())
	}
	if err != nil {
		m.batchErrors.Inc()
	}
	m.Health.Beat("poller", err)
}

// gauges reads queue depths, live pollers, due lag, parked records and
// the upstreams' breakers at scrape time.
type gauges struct {
	src Sources
	mu  sync.Mutex // one scrape's reads at a time
}

var (
	queueLengthDesc = prometheus.NewDesc("bigtables_queue_length",
		"Length of a Redis list: input (jobs), output (results), dead (dead letters), processing (drained, not acknowledged).", []string{"queue"}, nil)
	pollersAliveDesc = prometheus.NewDesc("bigtables_pollers_alive", "Pollers whose lease has not expired.", nil, nil)
	dueLagDesc       = prometheus.NewDesc("bigtables_due_lag_seconds", "How late the oldest due record is (0: none is due).", nil, nil)
	parkedDesc       = prometheus.NewDesc("bigtables_records_parked",
		"Records in phase parked: due, but held back by their upstream's open breaker.", nil, nil)
	breakerStateDesc = prometheus.NewDesc("bigtables_upstream_breaker_state",
		"The breaker of an upstream that has a row in the upstreams table (configured, or its breaker counted an attempt): 0 closed, 1 half-open, 2 open. At most MaxUpstreams (500) series: those not closed first.",
		[]string{"upstream"}, nil)
	upstreamsDesc = prometheus.NewDesc("bigtables_upstreams",
		"Upstreams that have a row in the upstreams table, by the state of their breaker (closed, half_open, open).", []string{"breaker"}, nil)
	scrapeErrorDesc = prometheus.NewDesc("bigtables_scrape_error",
		"1 if the last scrape could not read a source (redis or postgres); its gauges are then absent.", []string{"source"}, nil)
)

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueLengthDesc
	ch <- pollersAliveDesc
	ch <- dueLagDesc
	ch <- parkedDesc
	ch <- breakerStateDesc
	ch <- upstreamsDesc
	ch <- scrapeErrorDesc
}

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), g.src.Timeout)
	defer cancel()
	redisErr, pgErr := 0.0, 0.0
	if g.src.Depths != nil {
		if d, err := g.src.Depths(ctx); err != nil {
			g.src.Logger.Warn("metrics: read queue lengths", "err", err)
			redisErr = 1
		} else {
			for _, q := range []struct {
				name string
				n    int64
			}{{"input", d.Input}, {"output", d.Output}, {"dead", d.Dead}, {"processing", d.Processing}} {
				ch <- prometheus.MustNewConstMetric(queueLengthDesc, prometheus.GaugeValue, float64(q.n), q.name)
			}
		}
	}
	if g.src.PollersAlive != nil {
		if n, err := g.src.PollersAlive(ctx); err != nil {
			g.src.Logger.Warn("metrics: count live pollers", "err", err)
			redisErr = 1
		} else {
			ch <- prometheus.MustNewConstMetric(pollersAliveDesc, prometheus.GaugeValue, float64(n))
		}
	}
	if g.src.DueLag != nil {
		if lag, err := g.src.DueLag(ctx); err != nil {
			g.src.Logger.Warn("metrics: read due lag", "err", err)
			pgErr = 1
		} else {
			ch <- prometheus.MustNewConstMetric(dueLagDesc, prometheus.GaugeValue, lag.Seconds())
		}
	}
	if g.src.Parked != nil {
		if n, err := g.src.Parked(ctx); err != nil {
			g.src.Logger.Warn("metrics: count parked records", "err", err)
			pgErr = 1
		} else {
			ch <- prometheus.MustNewConstMetric(parkedDesc, prometheus.GaugeValue, float64(n))
		}
	}
	if g.src.Upstreams != nil {
		if list, err := g.src.Upstreams(ctx); err != nil {
			g.src.Logger.Warn("metrics: list upstreams", "err", err)
			pgErr = 1
		} else {
			g.collectUpstreams(ch, list)
		}
	}
	if g.src.DueLag != nil || g.src.Parked != nil || g.src.Upstreams != nil {
		ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, pgErr, "postgres")
	}
	if g.src.Depths != nil || g.src.PollersAlive != nil {
		ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, redisErr, "redis")
	}
}

// stateValue is the number bigtables_upstream_breaker_state reports.
func stateValue(s upstream.BreakerState) int {
	for i, k := range breakerStates {
		if k == s {
			return i
		}
	}
	return 0 // "" reads as closed
}

// collectUpstreams reports how many upstreams are in each state, and the
// state of each of the first MaxUpstreams: those whose breaker is not
// closed first (an operator looks for them), then configured ones, then
// by name. Only upstreams with a row in the upstreams table are listed,
// so the series are bounded by that table, not by the hosts of every
// record.
func (g *gauges) collectUpstreams(ch chan<- prometheus.Metric, list []store.UpstreamRow) {
	by := map[upstream.BreakerState]int{}
	for _, u := range list {
		by[breakerStates[stateValue(u.State.Breaker)]]++
	}
	for _, s := range breakerStates {
		ch <- prometheus.MustNewConstMetric(upstreamsDesc, prometheus.GaugeValue, float64(by[s]), string(s))
	}
	sorted := slices.Clone(list)
	slices.SortStableFunc(sorted, func(a, b store.UpstreamRow) int {
		if c := cmp.Compare(stateValue(b.State.Breaker), stateValue(a.State.Breaker)); c != 0 {
			return c
		}
		if a.Configured != b.Configured {
			if a.Configured {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Name, b.Name)
	})
	for _, u := range sorted[:min(len(sorted), g.src.MaxUpstreams)] {
		ch <- prometheus.MustNewConstMetric(breakerStateDesc, prometheus.GaugeValue, float64(stateValue(u.State.Breaker)), u.Name)
	}
}
