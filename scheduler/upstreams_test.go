package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/upstream"
)

// A timed-out attempt whose retry is due at once, on an upstream whose
// breaker is open (here: opened by that very timeout), is saved and parked
// in one tick: the park must not move the row before the save writes it
// (the save finds rows by the ctid they were locked with).
func TestTimedOutRetryParkedInTheSameTick(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	cfg := upstream.DefaultConfig()
	cfg.Breaker.Consecutive, cfg.Breaker.FailureRate = 1, 0
	if err := e.st.SetUpstream(ctx, "example.com", cfg); err != nil {
		t.Fatal(err)
	}
	p := refresh.DefaultPolicy() // its first retry is due at once
	p.Timeout = refresh.Duration(time.Second)
	add(t, e.st, "slow", p, e.clk.Now().Add(-time.Minute), "")
	s := scheduler.New(e.st, e.q, e.config())
	if _, err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	e.clk.Add(time.Second)
	res, err := s.Tick(ctx)
	if err != nil || res.TimedOut != 1 || res.BreakerParked != 1 {
		t.Fatalf("tick = %+v, %v; want the attempt timed out and its retry parked", res, err)
	}
	r, _ := e.st.Get(ctx, "slow")
	if r.Phase() != refresh.PhaseParked || r.AttemptNo != 1 || r.Running() {
		t.Fatalf("slow: phase %s attempt_no %d running %v; want parked after attempt 1", r.Phase(), r.AttemptNo, r.Running())
	}
}
