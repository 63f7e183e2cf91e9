package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
)

type env struct {
	st  *store.Store // on clk
	q   *queue.Queue
	rdb redis.UniversalClient
	db  *sqlx.DB // for writes no API makes (unreadable rows)
	clk *clock
}

// clock is a settable test clock: deadlines are crossed by moving it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}
func (c *clock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

// setup gives the test a store whose clock starts at the real time (so
// that Redis' clock, used for landing times, agrees with it) and moves
// only when the test moves it.
func setup(t *testing.T) env {
	t.Helper()
	ctx := context.Background()
	_, rdb, names := testsvc.Redis(t)
	dbURL := testsvc.Database(t)
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	db, err := sqlx.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clk := &clock{now: time.Now().UTC().Truncate(time.Microsecond)}
	return env{st: st.WithClock(clk.Now), q: queue.New(rdb, names), rdb: rdb, db: db, clk: clk}
}

// config is the tests' scheduler configuration: quiet, and with pollers
// that are up to date (the watermark is the clock's now).
func (e env) config() scheduler.Config {
	return scheduler.Config{Logger: quiet(), Now: e.clk.Now, Watermark: func(context.Context) (time.Time, error) { return e.clk.Now(), nil }}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func add(t *testing.T, st *store.Store, uid string, p refresh.Policy, at time.Time, sched string) {
	t.Helper()
	def := store.Definition{InputURL: "http://example.com/" + uid, Schedule: sched, Policy: p.JSON()}
	if _, err := st.Add(context.Background(), uid, def, &at); err != nil {
		t.Fatal(err)
	}
}

func jobs(t *testing.T, e env) []protocol.Job {
	t.Helper()
	raw, err := e.rdb.LRange(context.Background(), e.q.Names().Input, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []protocol.Job
	for _, r := range raw {
		j, err := protocol.DecodeJob([]byte(r))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, j)
	}
	return out
}

func TestTickStartsDueRowsAndPushesJobs(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	past, future := e.clk.Now().Add(-time.Minute), e.clk.Now().Add(time.Hour)
	add(t, e.st, "due", refresh.DefaultPolicy(), past, "DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY")
	add(t, e.st, "later", refresh.DefaultPolicy(), future, "")
	s := scheduler.New(e.st, e.q, e.config())
	res, err := s.Tick(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Started != 1 || res.Claimed != 1 {
		t.Fatalf("tick = %+v; want 1 started", res)
	}
	row, _ := e.st.Get(ctx, "due")
	js := jobs(t, e)
	if len(js) != 1 {
		t.Fatalf("%d jobs pushed; want 1", len(js))
	}
	j := js[0]
	if j.BigTableUID != "due" || j.AttemptUID != row.AttemptUID || j.AttemptNo != 1 || !j.DeadlineAt.Equal(row.DeadlineAt) ||
		j.InputURL != "http://example.com/due" {
		t.Errorf("job %+v does not match row %+v", j, row.State)
	}
	if got := row.DeadlineAt.Sub(row.StartedAt); got != time.Hour {
		t.Errorf("deadline - started = %v; want the 1h timeout", got)
	}
	if !row.RefreshAt.After(row.DeadlineAt) {
		t.Errorf("refresh_at %v not after deadline %v", row.RefreshAt, row.DeadlineAt)
	}
	// A second tick finds nothing: the row runs.
	if res, err := s.Tick(ctx); err != nil || res.Claimed != 0 {
		t.Errorf("second tick = %+v, %v; want nothing claimed", res, err)
	}
}

func TestTickTimesOutAndRetries(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	p := refresh.DefaultPolicy()
	p.Timeout = refresh.Duration(time.Second)
	add(t, e.st, "slow", p, e.clk.Now().Add(-time.Minute), "")
	s := scheduler.New(e.st, e.q, e.config())
	if _, err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	first, _ := e.st.Get(ctx, "slow")
	e.clk.Add(time.Second - time.Microsecond)
	if res, err := s.Tick(ctx); err != nil || res.TimedOut != 0 || res.Claimed != 0 {
		t.Fatalf("tick just before the deadline = %+v, %v; want nothing", res, err)
	}
	e.clk.Add(time.Microsecond)
	// The deadline passed: the attempt fails with reason timeout and, with a
	// retry delay of 0, attempt 2 starts in the same tick.
	res, err := s.Tick(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.TimedOut != 1 || res.Started != 1 {
		t.Fatalf("tick = %+v; want 1 timed out and 1 started", res)
	}
	second, _ := e.st.Get(ctx, "slow")
	if second.AttemptNo != 2 || second.AttemptUID == first.AttemptUID {
		t.Errorf("after timeout: %+v", second.State)
	}
	if n, _ := e.rdb.Exists(ctx, e.q.Names().CancelKey(first.AttemptUID)).Result(); n != 1 {
		t.Error("the timed-out attempt was not marked cancelled for its worker")
	}
	h, _ := e.st.History(ctx, "slow", 5)
	if len(h) != 1 || h[0].Outcome != store.OutcomeTimeout || h[0].AttemptUID != first.AttemptUID || h[0].Decision != string(refresh.RetryNoPlan) {
		t.Errorf("history %+v; want the first attempt timed out", h)
	}
}

func TestPushFailureUndoesStarts(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	at := e.clk.Now().Add(-time.Minute)
	add(t, e.st, "a", refresh.DefaultPolicy(), at, "")
	// A Redis that is not there.
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer dead.Close()
	cfg := e.config()
	cfg.PushAttempts = 2
	s := scheduler.New(e.st, queue.New(dead, e.q.Names()), cfg)
	res, err := s.Tick(ctx)
	if err == nil || res.Undone != 1 {
		t.Fatalf("tick = %+v, %v; want an error and 1 start undone", res, err)
	}
	row, _ := e.st.Get(ctx, "a")
	if row.AttemptNo != 0 || row.Running() || !row.RefreshAt.Equal(at) {
		t.Errorf("after undo %+v; want the row as before (refresh_at %v): our outage must not burn an attempt", row.State, at)
	}
	// Redis is back: the next tick starts it normally.
	s = scheduler.New(e.st, e.q, e.config())
	if res, err := s.Tick(ctx); err != nil || res.Started != 1 {
		t.Errorf("tick after recovery = %+v, %v", res, err)
	}
}

func TestSchedulersSideBySideNeverDoubleStart(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	const n = 600
	past := e.clk.Now().Add(-time.Minute)
	for i := range n {
		add(t, e.st, fmt.Sprintf("r%04d", i), refresh.DefaultPolicy(), past, "")
	}
	var wg sync.WaitGroup
	for range 3 {
		cfg := e.config()
		cfg.Batch = 50
		s := scheduler.New(e.st, e.q, cfg)
		wg.Go(func() {
			for {
				res, err := s.Tick(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Claimed == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	js := jobs(t, e)
	seen := map[string]int{}
	for _, j := range js {
		seen[j.BigTableUID]++
		if j.AttemptNo != 1 {
			t.Errorf("%s started as attempt %d", j.BigTableUID, j.AttemptNo)
		}
	}
	if len(js) != n || len(seen) != n {
		t.Errorf("%d jobs for %d records; want %d each exactly once", len(js), len(seen), n)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		cfg := e.config()
		cfg.Interval = 50 * time.Millisecond
		done <- scheduler.New(e.st, e.q, cfg).Run(ctx)
	}()
	time.Sleep(150 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v; want nil on shutdown", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop after cancel")
	}
}

// A timeout that disables the record writes its disabled event in the
// tick's transaction; a tick whose transaction fails after the plan (here
// the clock makes the history row collide with one already there) writes
// none.
func TestTimeoutDisabledEventCommitsWithTheTick(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	p := refresh.DefaultPolicy()
	p.Timeout = refresh.Duration(time.Second)
	p.Retries = nil
	add(t, e.st, "slow", p, e.clk.Now().Add(-time.Minute), "")
	s := scheduler.New(e.st, e.q, e.config())
	if _, err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	first, _ := e.st.Get(ctx, "slow")
	e.clk.Add(time.Second)
	// The history already holds a row for the running attempt: the tick's
	// insert fails after Save and WriteEvents, and the transaction rolls
	// back.
	failedTick(t, e, s, first)
	list, err := e.st.ListEvents(ctx, store.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("a rolled-back tick wrote events: %+v", list)
	}
	if _, err := e.db.Exec(`DELETE FROM bigtable_attempts WHERE attempt_uid = $1`, first.AttemptUID); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Tick(ctx); err != nil || res.Disabled != 1 {
		t.Fatalf("tick = %+v, %v; want the record disabled", res, err)
	}
	list, err = e.st.ListEvents(ctx, store.EventFilter{UID: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Type != store.EventDisabled || list[0].Attempts != 1 || !list[0].At.Equal(e.clk.Now()) {
		t.Fatalf("events %+v; want one disabled event at the tick's now", list)
	}
}

// failedTick runs a tick that times out the running attempt of row but
// rolls back: a history row with that attempt's uid is already there, so
// the tick's insert fails after its Save and WriteEvents.
func failedTick(t *testing.T, e env, s *scheduler.Scheduler, row store.Row) {
	t.Helper()
	if _, err := e.db.Exec(`INSERT INTO bigtable_attempts (attempt_uid, uid, attempt_no, started_at, finished_at, outcome)
		VALUES ($1, $2, 1, now(), now(), 'failure')`, row.AttemptUID, row.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Tick(context.Background()); err == nil {
		t.Fatal("tick succeeded; want the history insert to fail")
	}
}
