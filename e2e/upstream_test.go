package e2e_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
	"github.com/bigtables/bigtables/worker"
)

// loop is a scheduler, a poller and the reference HTTP worker in-process,
// on a test clock: time is crossed by moving the clock, never by sleeping.
type loop struct {
	t     *testing.T
	st    *store.Store
	q     *queue.Queue
	sched *scheduler.Scheduler
	poll  *poller.Poller
	mu    sync.Mutex
	now   time.Time
	jobs  []protocol.Job // every job the worker ran
}

func (l *loop) clock() time.Time    { l.mu.Lock(); defer l.mu.Unlock(); return l.now }
func (l *loop) add(d time.Duration) { l.mu.Lock(); l.now = l.now.Add(d); l.mu.Unlock() }

func newLoop(t *testing.T) *loop {
	ctx := context.Background()
	_, rdb, names := testsvc.Redis(t)
	st, err := store.Open(ctx, testsvc.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	l := &loop{t: t, q: queue.New(rdb, names), now: time.Now().UTC().Truncate(time.Microsecond)}
	l.st = st.WithClock(l.clock)
	quiet := slog.New(slog.DiscardHandler)
	l.sched = scheduler.New(l.st, l.q, scheduler.Config{Logger: quiet, Now: l.clock,
		Watermark: func(context.Context) (time.Time, error) { return l.clock(), nil }})
	l.poll = poller.New(l.st, l.q, poller.Config{Logger: quiet})
	return l
}

// round ticks once, runs every job pushed with the reference HTTP handler
// and applies the results; it returns the tick's result.
func (l *loop) round() scheduler.TickResult {
	l.t.Helper()
	ctx := context.Background()
	res, err := l.sched.Tick(ctx)
	if err != nil {
		l.t.Fatal(err)
	}
	opts := worker.Options{Queue: l.q, CancelPoll: -1, Logger: slog.New(slog.DiscardHandler)}
	for {
		raw, err := l.q.PopJobs(ctx, 0, 100)
		if err != nil {
			l.t.Fatal(err)
		}
		if len(raw) == 0 {
			break
		}
		for _, r := range raw {
			job, err := protocol.DecodeJob([]byte(r))
			if err != nil {
				l.t.Fatal(err)
			}
			l.jobs = append(l.jobs, job)
			worker.Handle(ctx, opts, job, worker.HTTPGet(nil))
		}
	}
	for {
		n, err := l.poll.Once(ctx)
		if err != nil {
			l.t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	return res
}

func (l *loop) upstream(name string) store.UpstreamRow {
	l.t.Helper()
	list, err := l.st.Upstreams(context.Background())
	if err != nil {
		l.t.Fatal(err)
	}
	for _, u := range list {
		if u.Name == name {
			return u
		}
	}
	l.t.Fatalf("upstream %q has no row", name)
	return store.UpstreamRow{}
}

// jobsTo counts the attempts started on an upstream so far.
func (l *loop) jobsTo(name string) int {
	n := 0
	for _, j := range l.jobs {
		if upstream.Name(j.InputURL) == name {
			n++
		}
	}
	return n
}

// TestBreakerDeadAndHealthyUpstreams runs records of a dead HTTP upstream
// and of a healthy one: the dead one's breaker opens, its due records are
// parked without burning attempts while the healthy one's go on, probes
// reopen it with a longer cool-down, and once it answers again its parked
// records are released at its rate and all succeed.
func TestBreakerDeadAndHealthyUpstreams(t *testing.T) {
	ctx := context.Background()
	l := newLoop(t)
	var dead atomic.Bool
	dead.Store(true)
	deadSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if dead.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	}))
	defer deadSrv.Close()
	okSrv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer okSrv.Close()
	deadName, okName := upstream.Name(deadSrv.URL), upstream.Name(okSrv.URL)

	cfg := upstream.DefaultConfig()
	cfg.Rate, cfg.Burst = 2, 10
	cfg.Breaker.CoolDown, cfg.Breaker.MaxCoolDown = refresh.Duration(15*time.Minute), refresh.Duration(time.Hour)
	cfg.Breaker.Consecutive, cfg.Breaker.FailureRate, cfg.Breaker.Probes = 3, 0, 1
	if err := l.st.SetUpstream(ctx, deadName, cfg); err != nil {
		t.Fatal(err)
	}
	p := refresh.DefaultPolicy()
	p.Retries = []refresh.Duration{0, 0, 0} // due again at once after a failure
	p.Timeout = refresh.Duration(time.Minute)
	p.Align = false
	const n = 6
	at := l.clock()
	for i := range n {
		for _, u := range []struct{ srv, prefix string }{{deadSrv.URL, "dead"}, {okSrv.URL, "ok"}} {
			uid := u.prefix + string(rune('a'+i))
			def := store.Definition{InputURL: u.srv + "/" + uid, Schedule: "DTSTART:20240101T000000Z\nRRULE:FREQ=MINUTELY;INTERVAL=10", Policy: p.JSON()}
			if _, err := l.st.Add(ctx, uid, def, &at); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Round 1: the dead upstream's 6 attempts fail; the 3rd opens it.
	l.round()
	if u := l.upstream(deadName); u.State.Breaker != upstream.Open || u.State.Opens != 1 {
		t.Fatalf("after 6 failures: breaker %s, opens %d; want open, 1", u.State.Breaker, u.State.Opens)
	}
	if got := l.jobsTo(deadName); got != n {
		t.Fatalf("attempts on the dead upstream: %d, want %d", got, n)
	}

	// While open: its due records are parked, nothing is burned, and the
	// healthy upstream's records keep running.
	before := map[string]store.Row{}
	for i := range n {
		uid := "dead" + string(rune('a'+i))
		before[uid] = l.get(uid)
	}
	res := l.round()
	if res.BreakerParked != n {
		t.Fatalf("tick parked %d records, want %d", res.BreakerParked, n)
	}
	for uid, old := range before {
		r := l.get(uid)
		if r.Phase() != refresh.PhaseParked || r.AttemptNo != old.AttemptNo || !r.RefreshAt.Equal(old.RefreshAt) {
			t.Fatalf("%s: phase %s attempt_no %d refresh_at %v; want parked, %d, %v (kept)",
				uid, r.Phase(), r.AttemptNo, r.RefreshAt, old.AttemptNo, old.RefreshAt)
		}
	}
	okBefore := l.jobsTo(okName)
	l.add(11 * time.Minute) // the healthy records fall due again; the breaker stays open
	l.round()
	if got := l.jobsTo(okName); got != okBefore+n {
		t.Fatalf("the healthy upstream ran %d attempts while the other was open, want %d", got, okBefore+n)
	}
	if got := l.jobsTo(deadName); got != n {
		t.Fatalf("attempts on the dead upstream while open: %d, want %d (none)", got, n)
	}
	l.add(4 * time.Minute)
	l.round() // cool-down over: half-open, one probe released
	if u := l.upstream(deadName); u.State.Breaker != upstream.HalfOpen {
		t.Fatalf("after the cool-down: breaker %s, want half_open", u.State.Breaker)
	}
	l.round() // the probe runs and fails: open again, cool-down doubled
	if got := l.jobsTo(deadName); got != n+1 {
		t.Fatalf("attempts on the dead upstream after one probe: %d, want %d", got, n+1)
	}
	u := l.upstream(deadName)
	if u.State.Breaker != upstream.Open || u.State.Opens != 2 || !u.State.NextProbe.Equal(l.clock().Add(30*time.Minute)) {
		t.Fatalf("after a failed probe: breaker %s, opens %d, next probe %v; want open, 2, %v",
			u.State.Breaker, u.State.Opens, u.State.NextProbe, l.clock().Add(30*time.Minute))
	}

	// The upstream comes back: the next probe closes the breaker and the
	// parked records are released at its rate (2/s), not all at once.
	dead.Store(false)
	l.add(30 * time.Minute)
	l.round() // half-open, probe released
	l.round() // probe succeeds: closed, release begins
	if u := l.upstream(deadName); u.State.Breaker != upstream.Closed || !u.State.Releasing {
		t.Fatalf("after a good probe: breaker %s, releasing %v; want closed, true", u.State.Breaker, u.State.Releasing)
	}
	start := l.jobsTo(deadName)
	for s := 1; s <= 10; s++ {
		l.add(time.Second)
		l.round()
		if got, most := l.jobsTo(deadName)-start, 2*s+1; got > most {
			t.Fatalf("%ds after the close: %d parked records released and started, more than the rate allows (%d)", s, got, most)
		}
	}
	for i := range n {
		r := l.get("dead" + string(rune('a'+i)))
		if r.Phase() != refresh.PhaseWaiting || r.AttemptNo != 0 || r.Disabled {
			t.Fatalf("%s after the release: phase %s attempt_no %d disabled %v; want waiting, 0, false", r.UID, r.Phase(), r.AttemptNo, r.Disabled)
		}
	}
	if got := l.jobsTo(deadName); got != n+2+n-1 {
		t.Fatalf("attempts on the dead upstream in all: %d, want %d (6 failures, 2 probes, 5 released)", got, n+2+n-1)
	}
}

func (l *loop) get(uid string) store.Row {
	l.t.Helper()
	r, err := l.st.Get(context.Background(), uid)
	if err != nil {
		l.t.Fatal(err)
	}
	return r
}
