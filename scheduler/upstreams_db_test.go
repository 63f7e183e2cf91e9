package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// setUpstream configures the upstream of the test records (example.com).
func setUpstream(t *testing.T, e env, mod func(*upstream.Config)) {
	t.Helper()
	cfg := upstream.DefaultConfig()
	mod(&cfg)
	if err := e.st.SetUpstream(context.Background(), "example.com", cfg); err != nil {
		t.Fatal(err)
	}
}

func upstreamState(t *testing.T, e env) upstream.State {
	t.Helper()
	list, err := e.st.Upstreams(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range list {
		if u.Name == "example.com" {
			return u.State
		}
	}
	t.Fatal("example.com has no upstream row")
	return upstream.State{}
}

// openBreaker opens example.com's breaker until the clock's now + d.
func openBreaker(t *testing.T, e env, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	err := e.st.InTx(ctx, func(tx *store.Tx) error {
		ups, err := tx.LockUpstreams(ctx, []string{"example.com"})
		if err != nil {
			return err
		}
		ups["example.com"].State = upstream.State{Breaker: upstream.Open, Opens: 1, NextProbe: e.clk.Now().Add(d), ChangedAt: e.clk.Now()}
		return tx.SaveUpstreams(ctx, ups)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Attempts the scheduler times out count as failures of their upstream:
// as many timeouts as the consecutive threshold open its breaker, and the
// records due again are then parked, attempt_no kept, not started.
func TestTimeoutsOpenTheBreaker(t *testing.T) {
	e := setup(t)
	setUpstream(t, e, func(c *upstream.Config) { c.Breaker.Consecutive, c.Breaker.FailureRate = 3, 0 })
	p := policy(time.Minute)
	p.Retries = []refresh.Duration{refresh.Duration(10 * time.Second)}
	for i := range 3 {
		add(t, e.st, fmt.Sprintf("r%d", i), p, e.clk.Now(), "")
	}
	s := scheduler.New(e.st, e.q, e.config())
	if res := mustTick(t, s); res.Started != 3 {
		t.Fatalf("first tick = %+v; want 3 started", res)
	}
	e.clk.Add(time.Minute)
	if res := mustTick(t, s); res.TimedOut != 3 {
		t.Fatalf("tick at the deadlines = %+v; want 3 timed out", res)
	}
	if st := upstreamState(t, e); st.Breaker != upstream.Open || st.Failures != 3 {
		t.Fatalf("breaker %s with %d failures after 3 timeouts; want open, 3", st.Breaker, st.Failures)
	}
	e.clk.Add(10 * time.Second)
	if res := mustTick(t, s); res.Started != 0 || res.BreakerParked != 3 {
		t.Fatalf("tick at the retries = %+v; want none started, 3 parked by the breaker", res)
	}
	for i := range 3 {
		r, _ := e.st.Get(context.Background(), fmt.Sprintf("r%d", i))
		if r.Phase() != refresh.PhaseParked || r.AttemptNo != 1 {
			t.Errorf("%s: phase %s attempt_no %d; want parked with its 1 attempt", r.UID, r.Phase(), r.AttemptNo)
		}
	}
}

// A start whose job was never pushed, redriven while its upstream's
// breaker is open, is parked in the same tick: the tick writes the undone
// start and the parking together (one used to invalidate the other's row
// version, failing every tick after).
func TestRedrivenStartOfAnOpenUpstreamIsParked(t *testing.T) {
	e := setup(t)
	lostStart(t, e, "r", time.Minute)
	e.clk.Add(time.Minute)
	openBreaker(t, e, time.Hour)
	s := scheduler.New(e.st, e.q, e.config())
	res := mustTick(t, s)
	if res.Redriven != 1 || res.Started != 0 || res.BreakerParked != 1 {
		t.Fatalf("tick = %+v; want the lost start redriven and parked", res)
	}
	r, _ := e.st.Get(context.Background(), "r")
	if r.Phase() != refresh.PhaseParked || r.AttemptNo != 0 || r.Running() {
		t.Fatalf("after the tick: phase %s, attempt_no %d, attempt %q; want parked, 0, none", r.Phase(), r.AttemptNo, r.AttemptUID)
	}
	if res := mustTick(t, s); res.Claimed != 0 {
		t.Fatalf("next tick = %+v; want nothing claimed", res)
	}
}

// Two schedulers ticking at the same time against one database never run
// more attempts of one upstream than its max_in_flight: the upstream's row
// is locked by each tick and the attempts in flight are counted under
// that lock. Between rounds the attempts end, as results would end them.
func TestMaxInFlightAcrossTwoSchedulers(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	const limit = 3
	setUpstream(t, e, func(c *upstream.Config) { c.MaxInFlight = limit })
	const rounds = 30
	for i := range rounds * limit {
		add(t, e.st, fmt.Sprintf("r%03d", i), policy(time.Hour), e.clk.Now(), "")
	}
	a, b := scheduler.New(e.st, e.q, e.config()), scheduler.New(e.st, e.q, e.config())
	running := func() int {
		var n int
		if err := e.db.GetContext(ctx, &n, "SELECT count(*) FROM bigtables WHERE attempt_uid IS NOT NULL"); err != nil {
			t.Fatal(err)
		}
		return n
	}
	total := 0
	for round := range rounds {
		var wg sync.WaitGroup
		var mu sync.Mutex
		started := 0
		gate := make(chan struct{})
		for _, s := range []*scheduler.Scheduler{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				res, err := s.Tick(ctx)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				started += res.Started
				mu.Unlock()
			}()
		}
		close(gate)
		wg.Wait()
		total += started
		if n := running(); n > limit {
			t.Fatalf("round %d: %d attempts running on one upstream, more than its max_in_flight %d", round, n, limit)
		}
		// The attempts end (as their results would), freeing their places
		// and the upstream's block.
		if _, err := e.db.ExecContext(ctx, `UPDATE bigtables SET attempt_uid = NULL, started_at = NULL, deadline_at = NULL,
			push_token = NULL, refresh_at = NULL WHERE attempt_uid IS NOT NULL`); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.ExecContext(ctx, `UPDATE upstreams SET blocked_until = NULL`); err != nil {
			t.Fatal(err)
		}
	}
	if total != rounds*limit {
		t.Fatalf("%d attempts started in %d rounds; want every free place used (%d)", total, rounds, rounds*limit)
	}
}

// A release does not end while a parked record is left: one another
// transaction holds (a person editing it) is skipped by a tick's release
// and released by a later one, not left parked for good.
func TestReleaseOutlivesALockedParkedRecord(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	now := e.clk.Now()
	for _, uid := range []string{"a", "b"} {
		add(t, e.st, uid, policy(time.Minute), now.Add(-time.Minute), "")
	}
	if err := e.st.InTx(ctx, func(tx *store.Tx) error {
		if _, err := tx.Lock(ctx, []string{"a", "b"}); err != nil {
			return err
		}
		if err := tx.Park(ctx, []string{"a", "b"}); err != nil {
			return err
		}
		ups, err := tx.LockUpstreams(ctx, []string{"example.com"})
		if err != nil {
			return err
		}
		// Closed by a good probe a minute ago: releasing.
		ups["example.com"].State = upstream.State{Breaker: upstream.Closed, Releasing: true, ReleasedAt: now.Add(-time.Minute)}
		return tx.SaveUpstreams(ctx, ups)
	}); err != nil {
		t.Fatal(err)
	}
	other, err := e.db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.ExecContext(ctx, "SELECT 1 FROM bigtables WHERE uid = 'b' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	s := scheduler.New(e.st, e.q, e.config())
	if res := mustTick(t, s); res.Released != 1 {
		t.Fatalf("tick while b is held = %+v; want a released", res)
	}
	other.Rollback()
	e.clk.Add(time.Second)
	mustTick(t, s)
	if r, _ := e.st.Get(ctx, "b"); r.Phase() == refresh.PhaseParked {
		t.Fatalf("b is still parked after its upstream closed and the release went on")
	}
	if st := upstreamState(t, e); st.Releasing {
		t.Fatalf("the release is still on with nothing parked: %+v", st)
	}
}

// addOn adds a record of the named upstream, due at at.
func addOn(t *testing.T, e env, uid, name string, at time.Time) {
	t.Helper()
	def := store.Definition{InputURL: "http://" + name + ".example/" + uid, Policy: policy(time.Hour).JSON(), Upstream: name}
	if _, err := e.st.Add(context.Background(), uid, def, &at); err != nil {
		t.Fatal(err)
	}
}

// finishRunning ends the running attempts of the named upstream as their
// results would: the rows are idle again and each attempt is observed by
// the upstream (which frees its place in flight), in one transaction.
func finishRunning(t *testing.T, e env, name string) int {
	t.Helper()
	ctx := context.Background()
	var n int
	err := e.st.InTx(ctx, func(tx *store.Tx) error {
		ups, err := tx.LockUpstreams(ctx, []string{name})
		if err != nil {
			return err
		}
		res, err := e.db.ExecContext(ctx, `UPDATE bigtables SET attempt_uid = NULL, started_at = NULL, deadline_at = NULL,
			push_token = NULL, refresh_at = NULL WHERE attempt_uid IS NOT NULL AND upstream = $1`, name)
		if err != nil {
			return err
		}
		got, _ := res.RowsAffected()
		n = int(got)
		for range n {
			ups[name].Observe(upstream.Succeeded, e.clk.Now())
		}
		return tx.SaveUpstreams(ctx, ups)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A limited upstream's backlog does not take the claim from the others:
// with 500 due records of "slow" (max_in_flight 2, or a rate of 20/s with
// a burst of 2) older than the 50 of "fast" (no limits), and the attempts
// of "slow" ending between every two ticks 100 ms apart (which lets its
// next starts through), every record of "fast" starts within the first
// ticks, while "slow" keeps starting its own, 2 a tick, oldest first
// (docs/design.md, U10, U11).
func TestLimitedBacklogDoesNotStarveOtherUpstreams(t *testing.T) {
	for name, limit := range map[string]func(*upstream.Config){
		"max_in_flight": func(c *upstream.Config) { c.MaxInFlight = 2 },
		"rate":          func(c *upstream.Config) { c.Rate, c.Burst = 20, 2 },
	} {
		t.Run(name, func(t *testing.T) { limitedBacklog(t, limit) })
	}
}

func limitedBacklog(t *testing.T, limit func(*upstream.Config)) {
	e := setup(t)
	ctx := context.Background()
	cfg := upstream.DefaultConfig()
	limit(&cfg)
	if err := e.st.SetUpstream(ctx, "slow", cfg); err != nil {
		t.Fatal(err)
	}
	now := e.clk.Now()
	for i := range 500 {
		addOn(t, e, fmt.Sprintf("slow%03d", i), "slow", now.Add(-time.Hour+time.Duration(i)*time.Millisecond))
	}
	for i := range 50 {
		addOn(t, e, fmt.Sprintf("fast%02d", i), "fast", now.Add(-time.Minute+time.Duration(i)*time.Millisecond))
	}
	c := e.config()
	c.Batch = 100
	s := scheduler.New(e.st, e.q, c)
	started := func(name string) []string {
		var uids []string
		if err := e.db.SelectContext(ctx, &uids, `SELECT uid FROM bigtables WHERE upstream = $1 AND attempt_no > 0 ORDER BY uid`, name); err != nil {
			t.Fatal(err)
		}
		return uids
	}
	slowStarted := 0
	for tick := 1; tick <= 3; tick++ {
		res := mustTick(t, s)
		slowStarted += finishRunning(t, e, "slow")
		e.clk.Add(100 * time.Millisecond)
		t.Logf("tick %d: %+v", tick, res)
	}
	if got := len(started("fast")); got != 50 {
		t.Fatalf("after 3 ticks, %d of fast's 50 due records started; want all: slow's backlog must not fill the claim", got)
	}
	slow := started("slow")
	if len(slow) != slowStarted || slowStarted != 6 {
		t.Fatalf("slow started %d records (%d finished) in 3 ticks; want 2 a tick", len(slow), slowStarted)
	}
	for i, uid := range slow {
		if want := fmt.Sprintf("slow%03d", i); uid != want {
			t.Fatalf("slow's starts %v; want its oldest records first", slow)
		}
	}
}
