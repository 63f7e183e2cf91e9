package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// The breaker's transitions a tick makes are events of the tick's
// transaction: a timeout that opens the breaker writes breaker_opened
// (none when the tick rolls back), the end of the cool-down
// breaker_half_open, a probe that times out breaker_opened again with the
// cool-down doubled; each counts the upstream's parked records.
func TestBreakerEventsCommitWithTheTick(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	cfg := upstream.DefaultConfig()
	cfg.Breaker.Consecutive, cfg.Breaker.FailureRate, cfg.Breaker.Probes = 1, 0, 1
	cfg.Breaker.CoolDown = refresh.Duration(time.Minute)
	if err := e.st.SetUpstream(ctx, "example.com", cfg); err != nil {
		t.Fatal(err)
	}
	p := refresh.DefaultPolicy()
	p.Timeout = refresh.Duration(time.Second)
	p.Retries = []refresh.Duration{0, 0, 0}
	add(t, e.st, "slow", p, e.clk.Now().Add(-time.Minute), "")
	s := scheduler.New(e.st, e.q, e.config())
	tick := func() scheduler.TickResult {
		t.Helper()
		res, err := s.Tick(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	events := func() []store.Event {
		t.Helper()
		list, err := e.st.ListEvents(ctx, store.EventFilter{Upstream: "example.com"})
		if err != nil {
			t.Fatal(err)
		}
		return list
	}
	parked := func() int {
		t.Helper()
		var n int
		if err := e.db.Get(&n, `SELECT count(*) FROM bigtables WHERE parked_at IS NOT NULL`); err != nil {
			t.Fatal(err)
		}
		return n
	}
	tick()
	first, _ := e.st.Get(ctx, "slow")
	e.clk.Add(time.Second)

	// The timeout opens the breaker, but the tick's history insert
	// collides with a row already there: the transaction rolls back.
	failedTick(t, e, s, first)
	if got := events(); len(got) != 0 {
		t.Fatalf("a rolled-back tick wrote breaker events: %+v", got)
	}
	if _, err := e.db.Exec(`DELETE FROM bigtable_attempts WHERE attempt_uid = $1`, first.AttemptUID); err != nil {
		t.Fatal(err)
	}
	if res := tick(); res.TimedOut != 1 {
		t.Fatalf("tick %+v; want the attempt timed out", res)
	}
	opened := e.clk.Now()
	got := events()
	if len(got) != 1 || got[0].Type != store.EventBreakerOpened || got[0].UID != "" || got[0].From != "closed" || got[0].To != "open" ||
		got[0].Why != "1 failure" || got[0].CoolDown != time.Minute || !got[0].At.Equal(opened) ||
		!got[0].NextProbeAt.Equal(opened.Add(time.Minute)) || got[0].Parked != parked() {
		t.Fatalf("events %+v; want one breaker_opened at %v, probes 1m later, %d parked", got, opened, parked())
	}

	// While open, another due record is parked; after the cool-down the
	// tick turns the breaker half-open and releases one probe.
	add(t, e.st, "other", p, e.clk.Now(), "")
	e.clk.Add(30 * time.Second)
	if res := tick(); res.BreakerParked != 1 {
		t.Fatalf("tick %+v; want the other record parked", res)
	}
	e.clk.Add(30 * time.Second)
	tick()
	got = events()
	if len(got) != 2 || got[1].Type != store.EventBreakerHalfOpen || got[1].From != "open" || got[1].To != "half_open" ||
		got[1].Why != "cool-down over: probing" || !got[1].At.Equal(e.clk.Now()) || got[1].Parked != 1 || parked() != 1 {
		t.Fatalf("events %+v; want a breaker_half_open after the cool-down, 1 record still parked", got)
	}

	// The probe times out: open again, the cool-down doubled.
	if res := tick(); res.Started != 1 {
		t.Fatalf("tick %+v; want the probe started", res)
	}
	e.clk.Add(time.Second)
	tick()
	got = events()
	if len(got) != 3 || got[2].Type != store.EventBreakerOpened || got[2].From != "half_open" || got[2].Why != "a probe failed" ||
		got[2].CoolDown != 2*time.Minute || !got[2].NextProbeAt.Equal(e.clk.Now().Add(2*time.Minute)) || got[2].Parked != parked() {
		t.Fatalf("events %+v; want breaker_opened again from half_open, cool-down 2m", got)
	}
}
