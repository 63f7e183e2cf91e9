package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The Observer interfaces are what the scheduler and poller call.
var (
	_ scheduler.Observer = (*Metrics)(nil)
	_ poller.Observer    = (*Metrics)(nil)
)

func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestMetricsServedWithTheIssuesNames(t *testing.T) {
	src := Sources{
		Depths: func(context.Context) (queue.Depths, error) {
			return queue.Depths{Input: 3, Output: 2, Dead: 1, Processing: 5}, nil
		},
		PollersAlive: func(context.Context) (int, error) { return 2, nil },
		DueLag:       func(context.Context) (time.Duration, error) { return 1500 * time.Millisecond, nil },
	}
	m := New(src, nil)
	m.ObserveTick(scheduler.TickResult{Started: 7, TimedOut: 2, Disabled: 1, Claimed: 9}, 20*time.Millisecond, nil)
	m.ObserveTick(scheduler.TickResult{}, time.Millisecond, errors.New("db down"))
	m.ObserveResults(poller.BatchCounts{Results: map[poller.ResultKind]int{
		{Type: "success", Outcome: poller.OutcomeApplied}: 4,
		{Type: "failure", Outcome: poller.OutcomeStale}:   1,
		{Type: "bogus", Outcome: poller.OutcomeDead}:      2, // an undecodable type: label "invalid"
	}, Disabled: 3})
	m.ObserveRound(5, 10*time.Millisecond, nil)
	srv := httptest.NewServer(m.Handler(nil))
	defer srv.Close()
	code, body := get(t, srv, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		"bigtables_attempts_started_total 7",
		"bigtables_attempts_timed_out_total 2",
		"bigtables_records_disabled_total 4", // 1 timeout + 3 final failures
		`bigtables_results_total{outcome="applied",type="success"} 4`,
		`bigtables_results_total{outcome="stale",type="failure"} 1`,
		`bigtables_results_total{outcome="dead",type="invalid"} 2`,
		`bigtables_results_total{outcome="dead",type="status"} 0`, // every series exists from the start
		`bigtables_queue_length{queue="input"} 3`,
		`bigtables_queue_length{queue="processing"} 5`,
		`bigtables_queue_length{queue="dead"} 1`,
		"bigtables_due_lag_seconds 1.5",
		"bigtables_pollers_alive 2",
		"bigtables_tick_duration_seconds_count 2",
		"bigtables_tick_errors_total 1",
		"bigtables_batch_duration_seconds_count 1",
		"go_goroutines ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(body, want+"\n") && !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "bogus") {
		t.Error("an unknown result type became a label value")
	}
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// The upstreams' protections are visible: rows disabled as unreadable
// (not "parked"), records parked, held by a limit and released by the
// scheduler's ticks, breaker transitions from ticks and poller batches, the
// records in phase parked, and each upstream's breaker, for the upstreams
// of the table only, at most MaxUpstreams of them, those not closed first.
func TestUpstreamMetrics(t *testing.T) {
	row := func(name string, b upstream.BreakerState, configured bool) store.UpstreamRow {
		return store.UpstreamRow{Upstream: upstream.Upstream{Name: name, State: upstream.State{Breaker: b}}, Configured: configured}
	}
	m := New(Sources{
		Parked: func(context.Context) (int64, error) { return 42, nil },
		Upstreams: func(context.Context) ([]store.UpstreamRow, error) {
			return []store.UpstreamRow{row("a.example", "", false), row("b.example", upstream.Closed, true),
				row("dead.example", upstream.Open, false), row("probing.example", upstream.HalfOpen, false)}, nil
		},
		MaxUpstreams: 3,
	}, nil)
	m.ObserveTick(scheduler.TickResult{Unreadable: 2, BreakerParked: 7, Waiting: 3, Released: 1,
		BreakerTransitions: map[upstream.BreakerState]int{upstream.HalfOpen: 1, upstream.Open: 1}}, time.Millisecond, nil)
	m.ObserveTick(scheduler.TickResult{BreakerParked: 2}, time.Millisecond, nil)
	m.ObserveResults(poller.BatchCounts{BreakerTransitions: map[upstream.BreakerState]int{upstream.Open: 2, upstream.Closed: 1, "bogus": 1}})
	srv := httptest.NewServer(m.Handler(nil))
	defer srv.Close()
	_, body := get(t, srv, "/metrics")
	for _, want := range []string{
		"bigtables_records_unreadable_total 2\n",
		"bigtables_records_breaker_parked_total 9\n",
		"bigtables_records_limit_waits_total 3\n",
		"bigtables_records_released_total 1\n",
		`bigtables_breaker_transitions_total{to="open"} 3` + "\n",
		`bigtables_breaker_transitions_total{to="half_open"} 1` + "\n",
		`bigtables_breaker_transitions_total{to="closed"} 1` + "\n",
		"bigtables_records_parked 42\n",
		`bigtables_upstream_breaker_state{upstream="dead.example"} 2` + "\n",
		`bigtables_upstream_breaker_state{upstream="probing.example"} 1` + "\n",
		`bigtables_upstream_breaker_state{upstream="b.example"} 0` + "\n", // configured: before a.example
		`bigtables_upstreams{breaker="closed"} 2` + "\n",
		`bigtables_upstreams{breaker="open"} 1` + "\n",
		`bigtables_upstreams{breaker="half_open"} 1` + "\n",
		`bigtables_scrape_error{source="postgres"} 0` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, not := range []string{`upstream="a.example"`, "bogus", "bigtables_records_parked_total"} {
		if strings.Contains(body, not) {
			t.Errorf("/metrics has %q", not)
		}
	}
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// A failed read of the upstreams leaves their gauges out and says so.
func TestUpstreamsScrapeError(t *testing.T) {
	m := New(Sources{Upstreams: func(context.Context) ([]store.UpstreamRow, error) { return nil, errors.New("pg down") }}, nil)
	srv := httptest.NewServer(m.Handler(nil))
	defer srv.Close()
	_, body := get(t, srv, "/metrics")
	if strings.Contains(body, "bigtables_upstreams{") || !strings.Contains(body, `bigtables_scrape_error{source="postgres"} 1`) {
		t.Errorf("want no upstream gauges and a postgres scrape error:\n%s", body)
	}
}

func TestScrapeErrorLeavesGaugesOutAndSaysSo(t *testing.T) {
	m := New(Sources{
		Depths: func(context.Context) (queue.Depths, error) { return queue.Depths{}, errors.New("redis down") },
		DueLag: func(context.Context) (time.Duration, error) { return 0, nil },
	}, nil)
	srv := httptest.NewServer(m.Handler(nil))
	defer srv.Close()
	_, body := get(t, srv, "/metrics")
	if strings.Contains(body, "bigtables_queue_length{") || !strings.Contains(body, `bigtables_scrape_error{source="redis"} 1`) ||
		!strings.Contains(body, `bigtables_scrape_error{source="postgres"} 0`) {
		t.Errorf("want no queue lengths and a redis scrape error:\n%s", body)
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestHealthzReportsAStuckLoop(t *testing.T) {
	c := &clock{t: time.Date(2024, 3, 4, 6, 0, 0, 0, time.UTC)}
	h := NewHealth(c.now)
	h.Loop("scheduler", time.Minute)
	m := New(Sources{}, h)
	srv := httptest.NewServer(m.Handler(nil))
	defer srv.Close()
	decode := func(body string) Report {
		var r Report
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		return r
	}

	if code, body := get(t, srv, "/healthz"); code != 200 || !decode(body).OK {
		t.Fatalf("fresh: %d %s", code, body)
	}
	c.add(2 * time.Minute) // no tick since start
	code, body := get(t, srv, "/healthz")
	if r := decode(body); code != 503 || r.OK || !strings.Contains(r.Checks["scheduler"].Problem, "no round completed") {
		t.Fatalf("no tick for 2m: %d %s", code, body)
	}
	// A failing tick is still a live loop; the error is shown.
	m.ObserveTick(scheduler.TickResult{}, time.Millisecond, errors.New("tick: connection refused"))
	code, body = get(t, srv, "/healthz")
	if r := decode(body); code != 200 || r.Checks["scheduler"].LastError != "tick: connection refused" {
		t.Fatalf("after a failed tick: %d %s", code, body)
	}
	c.add(61 * time.Second)
	code, body = get(t, srv, "/healthz")
	if r := decode(body); code != 503 || !strings.Contains(r.Checks["scheduler"].Problem, "the loop is stuck") {
		t.Fatalf("stuck: %d %s", code, body)
	}
}

func TestReadyzNamesTheServiceThatDoesNotAnswer(t *testing.T) {
	m := New(Sources{}, nil)
	probes := []Probe{
		{Name: "redis", Check: func(context.Context) error { return nil }},
		{Name: "postgres", Check: func(context.Context) error { return errors.New("ping PostgreSQL: connection refused") }},
	}
	srv := httptest.NewServer(m.Handler(probes))
	defer srv.Close()
	code, body := get(t, srv, "/readyz")
	var r Report
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if code != 503 || r.OK || !r.Checks["redis"].OK || r.Checks["postgres"].Problem != "ping PostgreSQL: connection refused" {
		t.Fatalf("readyz: %d %s", code, body)
	}
}
