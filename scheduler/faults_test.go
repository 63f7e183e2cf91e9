package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/redis/go-redis/v9"
)

func policy(timeout time.Duration) refresh.Policy {
	p := refresh.DefaultPolicy()
	p.Timeout = refresh.Duration(timeout)
	return p
}

func mustTick(t *testing.T, s *scheduler.Scheduler) scheduler.TickResult {
	t.Helper()
	res, err := s.Tick(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Rows whose stored schedule or policy no longer parses are disabled in
// the tick that claims them (counted as unreadable), so with a small batch they cannot starve the good
// rows behind them, due or expired.
func TestUnreadableRowsAreDisabled(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	t0 := e.clk.Now()
	setupSched := scheduler.New(e.st, e.q, e.config())
	// Three running attempts that will be unreadable, with the earliest
	// deadlines, and a good one behind them.
	for i := range 3 {
		add(t, e.st, fmt.Sprintf("bad-run-%d", i), policy(time.Minute), t0.Add(-time.Hour), "")
	}
	mustTick(t, setupSched)
	e.clk.Add(10 * time.Second)
	add(t, e.st, "good-run", policy(time.Minute), e.clk.Now(), "")
	mustTick(t, setupSched)
	// Three due rows that will be unreadable, due first, and a good one.
	for i := range 3 {
		add(t, e.st, fmt.Sprintf("bad-due-%d", i), policy(time.Minute), t0.Add(-2*time.Hour), "")
	}
	add(t, e.st, "good-due", policy(time.Minute), t0.Add(-90*time.Minute), "")
	for _, q := range []string{
		`UPDATE bigtables SET policy = '{"timeout": "forever"}' WHERE uid IN ('bad-run-0', 'bad-run-1', 'bad-due-0', 'bad-due-1')`,
		`UPDATE bigtables SET schedule = 'RRULE:FREQ=SOMETIMES' WHERE uid IN ('bad-run-2', 'bad-due-2')`,
	} {
		if _, err := e.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	e.clk.Add(2 * time.Minute) // every attempt is past its deadline

	cfg := e.config()
	cfg.Batch = 2
	s := scheduler.New(e.st, e.q, cfg)
	unreadable := 0
	for range 3 {
		unreadable += mustTick(t, s).Unreadable
	}
	if unreadable != 6 {
		t.Errorf("%d rows disabled as unreadable; want the 6 unreadable ones", unreadable)
	}
	if r, _ := e.st.Get(ctx, "good-due"); r.AttemptNo != 1 || !r.Running() {
		t.Errorf("good-due %+v; want started despite the unreadable rows due before it", r.State)
	}
	if h, _ := e.st.History(ctx, "good-run", 5); len(h) != 1 || h[0].Outcome != store.OutcomeTimeout {
		t.Errorf("good-run history %+v; want its attempt timed out despite the unreadable rows expired before it", h)
	}
	disabled, err := e.st.List(ctx, store.ListOptions{DisabledOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var uids []string
	for _, r := range disabled {
		uids = append(uids, r.UID)
		want := "stored policy"
		if strings.HasSuffix(r.UID, "-2") {
			want = "stored schedule"
		}
		if !strings.Contains(r.DisabledReason, want) || r.Running() || !r.RefreshAt.IsZero() {
			t.Errorf("%s ended as %+v; want disabled with the %s's error as the reason", r.UID, r.State, want)
		}
	}
	if want := []string{"bad-due-0", "bad-due-1", "bad-due-2", "bad-run-0", "bad-run-1", "bad-run-2"}; !slices.Equal(uids, want) {
		t.Errorf("list --disabled shows %v; want %v", uids, want)
	}
	h, _ := e.st.History(ctx, "bad-run-2", 5)
	if len(h) != 1 || h[0].Outcome != store.OutcomeCancelled || !strings.Contains(h[0].Message, "stored schedule") {
		t.Errorf("bad-run-2 history %+v; want its attempt ended as cancelled, with the reason", h)
	}
	if n, _ := e.rdb.Exists(ctx, e.q.Names().CancelKey(h[0].AttemptUID)).Result(); n != 1 {
		t.Error("the unreadable row's running attempt was not marked cancelled for its worker")
	}
	// Disabled rows left the due set: nothing is claimed any more.
	if res := mustTick(t, s); res.Claimed != 0 {
		t.Errorf("tick after disabling claimed %d rows; want none", res.Claimed)
	}
}

// An attempt past its deadline is timed out only once the watermark (every
// result pushed before it is applied) has reached its deadline, or when
// MaxResultWait has passed since its deadline.
func TestTimeoutsWaitForThePollers(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	add(t, e.st, "r", policy(time.Minute), e.clk.Now(), "")
	cfg := e.config()
	var watermark atomic.Pointer[time.Time]
	zero := time.Time{}
	watermark.Store(&zero)
	cfg.Watermark = func(context.Context) (time.Time, error) { return *watermark.Load(), nil }
	cfg.MaxResultWait = 10 * time.Minute
	s := scheduler.New(e.st, e.q, cfg)
	mustTick(t, s)
	started, _ := e.st.Get(ctx, "r")

	e.clk.Add(5 * time.Minute) // 4 minutes past the deadline
	res := mustTick(t, s)
	if res.TimedOut != 0 || res.Held != 1 || !strings.Contains(res.HeldWhy, "no poller") {
		t.Errorf("tick without a watermark = %+v; want the timeout held, saying why", res)
	}
	behind := started.DeadlineAt.Add(-time.Microsecond)
	watermark.Store(&behind)
	res = mustTick(t, s)
	if res.TimedOut != 0 || res.Held != 1 || !strings.Contains(res.HeldWhy, "behind") {
		t.Errorf("tick with the watermark just before the deadline = %+v; want the timeout held", res)
	}
	if r, _ := e.st.Get(ctx, "r"); r.AttemptUID != started.AttemptUID {
		t.Fatalf("held attempt changed: %+v", r.State)
	}
	at := started.DeadlineAt
	watermark.Store(&at)
	if res := mustTick(t, s); res.TimedOut != 1 || res.Held != 0 {
		t.Errorf("tick with the watermark at the deadline = %+v; want the attempt timed out", res)
	}

	// Pollers down for good: the timeout waits MaxResultWait, no more.
	second, _ := e.st.Get(ctx, "r") // restarted at once (retry delay 0)
	watermark.Store(&zero)
	e.clk.Set(second.DeadlineAt.Add(10*time.Minute - time.Microsecond))
	if res := mustTick(t, s); res.TimedOut != 0 || res.Held != 1 {
		t.Errorf("tick just before MaxResultWait = %+v; want held", res)
	}
	e.clk.Add(time.Microsecond)
	if res := mustTick(t, s); res.TimedOut != 1 {
		t.Errorf("tick at MaxResultWait = %+v; want timed out", res)
	}
	if h, _ := e.st.History(ctx, "r", 5); len(h) != 2 || h[0].Outcome != store.OutcomeTimeout || h[1].Outcome != store.OutcomeTimeout {
		t.Errorf("history %+v; want two timeouts", h)
	}
}

// hook makes go-redis report an error after a command ran (a lost reply)
// and records the order of the commands.
type hook struct {
	mu    sync.Mutex
	names []string
	lose  func(cmd redis.Cmder) bool
}

func (h *hook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.mu.Lock()
		h.names = append(h.names, cmd.Name())
		lose := err == nil && h.lose != nil && h.lose(cmd)
		h.mu.Unlock()
		if lose {
			return errors.New("read tcp: connection reset by peer (reply lost)")
		}
		return err
	}
}
func (h *hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.names = append(h.names, "pipeline:"+cmds[0].Name())
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func isPush(cmd redis.Cmder) bool {
	n := cmd.Name()
	return n == "rpush" || n == "evalsha" || n == "eval"
}

// A push whose reply was lost after Redis ran it is retried with the same
// token: its jobs land once and its starts stand.
func TestLostPushReplyNeitherDuplicatesNorUndoes(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for _, uid := range []string{"a", "b"} {
		add(t, e.st, uid, policy(time.Hour), e.clk.Now(), "")
	}
	lost := 0
	h := &hook{lose: func(cmd redis.Cmder) bool {
		if isPush(cmd) && lost < 2 {
			lost++
			return true
		}
		return false
	}}
	e.rdb.AddHook(h)
	res, err := scheduler.New(e.st, e.q, e.config()).Tick(ctx)
	if err != nil || res.Started != 2 || res.Undone != 0 {
		t.Fatalf("tick = %+v, %v; want 2 started, none undone", res, err)
	}
	js := jobs(t, e)
	if len(js) != 2 {
		t.Fatalf("%d jobs in the input list; want 2, once each", len(js))
	}
	for _, j := range js {
		if r, _ := e.st.Get(ctx, j.BigTableUID); r.AttemptUID != j.AttemptUID {
			t.Errorf("%s runs %q; its job names %q", j.BigTableUID, r.AttemptUID, j.AttemptUID)
		}
	}
}

// A push that lands after a job's deadline, or with less than half its
// timeout left, does not cost the record: that start is undone and its
// attempt marked cancelled; the starts that landed in time stand.
func TestLatePushUndoesThoseStarts(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	prev := e.clk.Now().Add(-time.Minute)
	add(t, e.st, "hour", policy(time.Hour), prev, "")
	add(t, e.st, "two", policy(2*time.Second), prev, "")
	add(t, e.st, "one", policy(time.Second), prev, "")
	// The tick's clock is 1.5 s behind Redis': the push lands 1.5 s after
	// the starts, after one's deadline and with 0.5 s of two's 2 s left.
	e.clk.Add(-1500 * time.Millisecond)
	res, err := scheduler.New(e.st, e.q, e.config()).Tick(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Started != 1 || res.Late != 2 || res.Undone != 2 {
		t.Fatalf("tick = %+v; want 1 started, 2 late and undone", res)
	}
	if r, _ := e.st.Get(ctx, "hour"); !r.Running() {
		t.Errorf("hour %+v; want running", r.State)
	}
	for _, j := range jobs(t, e) {
		r, _ := e.st.Get(ctx, j.BigTableUID)
		if j.BigTableUID == "hour" {
			continue
		}
		if r.Running() || r.AttemptNo != 0 || !r.RefreshAt.Equal(prev) {
			t.Errorf("%s after a late landing %+v; want as before the start (refresh_at %v)", j.BigTableUID, r.State, prev)
		}
		if n, _ := e.rdb.Exists(ctx, e.q.Names().CancelKey(j.AttemptUID)).Result(); n != 1 {
			t.Errorf("%s's undone attempt was not marked cancelled", j.BigTableUID)
		}
	}
}

// The cancel markers of timed-out attempts are written after the push, so
// a slow Redis cannot delay the jobs behind them.
func TestCancelMarkersAfterThePush(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	add(t, e.st, "r", policy(time.Second), e.clk.Now(), "")
	s := scheduler.New(e.st, e.q, e.config())
	mustTick(t, s)
	first, _ := e.st.Get(ctx, "r")
	e.clk.Add(time.Second)
	h := &hook{}
	e.rdb.AddHook(h)
	if res := mustTick(t, s); res.TimedOut != 1 || res.Started != 1 {
		t.Fatalf("tick = %+v; want a timeout and a start", res)
	}
	if n, _ := e.rdb.Exists(ctx, e.q.Names().CancelKey(first.AttemptUID)).Result(); n != 1 {
		t.Error("the timed-out attempt was not marked cancelled")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	push := slices.IndexFunc(h.names, func(n string) bool { return n == "evalsha" || n == "eval" || n == "rpush" })
	cancel := slices.Index(h.names, "pipeline:set")
	if push < 0 || cancel < 0 || cancel < push {
		t.Errorf("commands %v; want the push before the cancel markers", h.names)
	}
}

// A failed undo is retried.
func TestFailedUndoIsRetried(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	prev := e.clk.Now().Add(-time.Minute)
	add(t, e.st, "a", policy(time.Hour), prev, "")
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer dead.Close()
	cfg := e.config()
	cfg.PushAttempts = 1
	s := scheduler.New(e.st, queue.New(dead, e.q.Names()), cfg)
	tries := 0
	scheduler.SetUndo(s, func(ctx context.Context, starts []store.Started) (int, error) {
		tries++
		if tries == 1 {
			return 0, errors.New("undo 1 starts: pq: deadlock detected")
		}
		return e.st.UndoStarts(ctx, starts)
	})
	res, err := s.Tick(ctx)
	if err == nil || res.Undone != 1 || tries != 2 {
		t.Fatalf("tick = %+v, %v after %d undo tries; want the push error and the start undone on the second try", res, err, tries)
	}
	if r, _ := e.st.Get(ctx, "a"); r.Running() || r.AttemptNo != 0 || !r.RefreshAt.Equal(prev) {
		t.Errorf("after the retried undo %+v; want the row as before", r.State)
	}
}

// The scheduler prunes the history by its retention, a bounded step at a
// time, and Run does it by itself.
func TestSchedulerPrunesHistory(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for _, uid := range []string{"a", "b"} {
		add(t, e.st, uid, policy(time.Hour), e.clk.Now(), "")
		var list []store.Attempt
		for i := range 10 {
			at := e.clk.Now().Add(-time.Duration(10-i) * 24 * time.Hour) // 10 days ago to 1 day ago
			list = append(list, store.Attempt{AttemptUID: fmt.Sprintf("%s-%d", uid, i), UID: uid, AttemptNo: 1,
				StartedAt: at, FinishedAt: at, Outcome: store.OutcomeFailure})
		}
		if err := e.st.InTx(ctx, func(tx *store.Tx) error { return tx.RecordAttempts(ctx, list) }); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.config()
	// Older than 7.5 days: the 3 oldest of each; beyond 5 per record: 2 more
	// each. A step deletes the 4 oldest of all, then a's 3 oldest left
	// beyond its 5 newest; the next, b's last one older than 7.5 days, then
	// b's 2 beyond.
	cfg.Retention = &scheduler.Retention{KeepPerRecord: 5, MaxAge: 180 * time.Hour, Batch: 4, Records: 1}
	s := scheduler.New(e.st, e.q, cfg)
	var steps []scheduler.PruneResult
	for range 3 {
		r, err := s.Prune(ctx)
		if err != nil {
			t.Fatal(err)
		}
		steps = append(steps, r)
	}
	want := []scheduler.PruneResult{{Older: 4, Beyond: 3}, {Older: 1, Beyond: 2}, {}}
	if !slices.Equal(steps, want) {
		t.Errorf("prune steps %v; want %v (at most 4 rows per rule, 1 record a step)", steps, want)
	}
	for _, uid := range []string{"a", "b"} {
		if h, _ := e.st.History(ctx, uid, 100); len(h) != 5 || h[4].AttemptUID != uid+"-5" {
			t.Errorf("%s keeps %d attempts; want its 5 newest", uid, len(h))
		}
	}

	// Run prunes on its own, with the default retention (100 per record):
	// a record with 105 attempts is cut back while it runs.
	var list []store.Attempt
	for i := range 105 {
		at := e.clk.Now().Add(-time.Duration(105-i) * time.Minute)
		list = append(list, store.Attempt{AttemptUID: fmt.Sprintf("c-%03d", i), UID: "a", AttemptNo: 1, StartedAt: at, FinishedAt: at, Outcome: store.OutcomeFailure})
	}
	if err := e.st.InTx(ctx, func(tx *store.Tx) error { return tx.RecordAttempts(ctx, list) }); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	cfg = e.config()
	cfg.Interval = 10 * time.Millisecond
	go func() { done <- scheduler.New(e.st, e.q, cfg).Run(runCtx) }()
	for range 500 {
		if h, _ := e.st.History(ctx, "a", 200); len(h) == 100 {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling for Run's prune, not crossing a deadline
	}
	cancel()
	<-done
	if h, _ := e.st.History(ctx, "a", 200); len(h) != 100 {
		t.Errorf("after Run a keeps %d attempts; want 100", len(h))
	}
}
