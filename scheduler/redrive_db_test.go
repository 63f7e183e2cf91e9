package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/redis/go-redis/v9"
)

// lostStart leaves record uid as a scheduler killed between its commit and
// its push would: the start is committed, its job never reached Redis and
// nothing undid it. It returns the row as committed.
func lostStart(t *testing.T, e env, uid string, timeout time.Duration) store.Row {
	t.Helper()
	add(t, e.st, uid, policy(timeout), e.clk.Now(), "")
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { dead.Close() })
	cfg := e.config()
	cfg.PushAttempts = 1
	killed := scheduler.New(e.st, queue.New(dead, e.q.Names()), cfg)
	scheduler.SetUndo(killed, func(context.Context, []store.Started) (int, error) {
		return 0, errors.New("killed before the undo")
	})
	if _, err := killed.Tick(context.Background()); err == nil {
		t.Fatal("tick with an unreachable Redis succeeded")
	}
	r, err := e.st.Get(context.Background(), uid)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Running() || r.AttemptNo != 1 || r.PushToken == "" {
		t.Fatalf("lost start %+v (token %q); want running attempt 1 with its push token recorded", r.State, r.PushToken)
	}
	return r
}

// An attempt whose job was never pushed is redriven at its deadline, not
// timed out: attempt_no unchanged, no timeout in the history, a new attempt
// with a full timeout and its job pushed; the lost attempt is marked
// cancelled and its push can no longer land.
func TestNeverPushedStartIsRedriven(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	lost := lostStart(t, e, "r", time.Minute)

	s := scheduler.New(e.st, e.q, e.config())
	e.clk.Add(time.Minute - time.Microsecond)
	if res := mustTick(t, s); res.Claimed != 0 {
		t.Fatalf("tick before the deadline = %+v; want nothing", res)
	}
	e.clk.Add(time.Microsecond)
	res := mustTick(t, s)
	if res.Redriven != 1 || res.TimedOut != 0 || res.Started != 1 {
		t.Fatalf("tick at the deadline = %+v; want the lost start redriven and started again, no timeout", res)
	}
	r, _ := e.st.Get(ctx, "r")
	if !r.Running() || r.AttemptNo != 1 || r.AttemptUID == lost.AttemptUID || !r.StartedAt.Equal(e.clk.Now()) ||
		r.PushToken == "" || r.PushToken == lost.PushToken {
		t.Errorf("after the redrive %+v (token %q); want attempt 1 again, a new attempt started now with a new token", r.State, r.PushToken)
	}
	if h, _ := e.st.History(ctx, "r", 5); len(h) != 0 {
		t.Errorf("history %+v; want none: a start whose job never existed is no attempt", h)
	}
	js := jobs(t, e)
	if len(js) != 1 || js[0].AttemptUID != r.AttemptUID || js[0].AttemptNo != 1 {
		t.Errorf("jobs %+v; want the new attempt's only", js)
	}
	if n, _ := e.rdb.Exists(ctx, e.q.Names().CancelKey(lost.AttemptUID)).Result(); n != 1 {
		t.Error("the lost attempt was not marked cancelled")
	}
	// The dead scheduler's push turns up after all: refused.
	if _, _, err := e.q.PushJobsOnce(ctx, lost.PushToken, [][]byte{[]byte("late")}); !errors.Is(err, queue.ErrPushRefused) {
		t.Errorf("late push of the lost token: %v; want ErrPushRefused", err)
	}
}

// An attempt whose job was pushed times out at its deadline as before; one
// whose token Redis lost (restarted without its data) is redriven.
func TestPushedStartTimesOutLostTokenRedrives(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	add(t, e.st, "pushed", policy(time.Minute), e.clk.Now(), "")
	add(t, e.st, "forgotten", policy(time.Minute), e.clk.Now(), "")
	s := scheduler.New(e.st, e.q, e.config())
	if res := mustTick(t, s); res.Started != 2 {
		t.Fatalf("tick = %+v; want 2 started", res)
	}
	pushed, _ := e.st.Get(ctx, "pushed")
	forgotten, _ := e.st.Get(ctx, "forgotten")
	if pushed.PushToken == "" || pushed.PushToken != forgotten.PushToken {
		t.Fatalf("tokens %q, %q; want the tick's token on both starts", pushed.PushToken, forgotten.PushToken)
	}
	ttl, _ := e.rdb.PTTL(ctx, e.q.Names().PushTokenKey(pushed.PushToken)).Result()
	if min := time.Minute + time.Hour; ttl <= min {
		t.Errorf("push token lives %v; want more than the timeout plus MaxResultWait (%v)", ttl, min)
	}
	// Separate the two: forgotten's attempt is re-recorded as if its tick's
	// token had been lost with Redis's data.
	if _, err := e.db.ExecContext(ctx, `UPDATE bigtables SET push_token = 'gone-with-redis' WHERE uid = 'forgotten'`); err != nil {
		t.Fatal(err)
	}
	e.clk.Add(time.Minute)
	res := mustTick(t, s)
	if res.TimedOut != 1 || res.Redriven != 1 || res.Started != 2 {
		t.Fatalf("tick at the deadline = %+v; want pushed timed out, forgotten redriven, both started again", res)
	}
	h, _ := e.st.History(ctx, "pushed", 5)
	if len(h) != 1 || h[0].Outcome != store.OutcomeTimeout || h[0].AttemptUID != pushed.AttemptUID {
		t.Errorf("pushed's history %+v; want its attempt timed out", h)
	}
	if r, _ := e.st.Get(ctx, "pushed"); r.AttemptNo != 2 {
		t.Errorf("pushed %+v; want attempt 2 after the timeout", r.State)
	}
	if r, _ := e.st.Get(ctx, "forgotten"); r.AttemptNo != 1 {
		t.Errorf("forgotten %+v; want attempt 1 again", r.State)
	}
	if h, _ := e.st.History(ctx, "forgotten", 5); len(h) != 0 {
		t.Errorf("forgotten's history %+v; want none", h)
	}
}

// When Redis cannot say whether the jobs were pushed, the timeouts are held
// (with the reason), but no longer than MaxResultWait past the deadline.
func TestUnknownPushHoldsTimeout(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	add(t, e.st, "r", policy(time.Minute), e.clk.Now(), "")
	cfg := e.config()
	cfg.MaxResultWait = 10 * time.Minute
	s := scheduler.New(e.st, e.q, cfg)
	mustTick(t, s)
	started, _ := e.st.Get(ctx, "r")
	scheduler.SetSettle(s, func(context.Context, []string) (map[string]time.Time, error) {
		return nil, errors.New("dial tcp: connection refused")
	})
	e.clk.Set(started.DeadlineAt.Add(10*time.Minute - time.Microsecond))
	res := mustTick(t, s)
	if res.TimedOut != 0 || res.Redriven != 0 || res.Held != 1 || !strings.Contains(res.HeldWhy, "cannot be asked") {
		t.Errorf("tick while Redis cannot be asked = %+v; want the timeout held, saying why", res)
	}
	if r, _ := e.st.Get(ctx, "r"); r.AttemptUID != started.AttemptUID {
		t.Fatalf("held attempt changed: %+v", r.State)
	}
	e.clk.Add(time.Microsecond)
	if res := mustTick(t, s); res.TimedOut != 1 {
		t.Errorf("tick at MaxResultWait = %+v; want timed out", res)
	}
}
