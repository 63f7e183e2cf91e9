package poller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
)

type env struct {
	st    *store.Store
	q     *queue.Queue
	rdb   redis.UniversalClient
	db    *sqlx.DB // for fixtures the store has no statement for
	clock *clock   // the queue scripts' clock
}

// clock is the settable clock of the queue's scripts (Redis's TIME in
// production): tests cross leases and deadlines by setting it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time)     { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }
func (c *clock) add(d time.Duration) { c.set(c.now().Add(d)) }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func setup(t *testing.T) env { return setupWith(t, nil) }

// setupWith runs prepare on the test's fresh database before the store opens it.
func setupWith(t *testing.T, prepare func(db *sqlx.DB)) env {
	t.Helper()
	_, rdb, names := testsvc.Redis(t)
	dbURL := testsvc.Database(t)
	if prepare != nil { // on a connection of its own: sessions keep the settings they started with
		db, err := sqlx.Open("postgres", dbURL)
		if err != nil {
			t.Fatal(err)
		}
		prepare(db)
		db.Close()
	}
	db, err := sqlx.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Now().UTC()}
	return env{st: st, q: queue.New(rdb, names, queue.WithClock(c.now)), rdb: rdb, db: db, clock: c}
}

func exec(t *testing.T, db *sqlx.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// start adds records and lets a scheduler start them; it returns the
// attempt uid of each.
func start(t *testing.T, e env, p refresh.Policy, uids ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	past := time.Now().Add(-time.Minute)
	for _, uid := range uids {
		def := store.Definition{InputURL: "http://example.com/" + uid, Policy: p.JSON()}
		if _, err := e.st.Add(ctx, uid, def, &past); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := scheduler.New(e.st, e.q, scheduler.Config{Logger: quiet()}).Tick(ctx); err != nil {
		t.Fatal(err)
	}
	e.rdb.Del(ctx, e.q.Names().Input)
	out := map[string]string{}
	for _, uid := range uids {
		r, _ := e.st.Get(ctx, uid)
		out[uid] = r.AttemptUID
	}
	return out
}

func push(t *testing.T, e env, values ...string) {
	t.Helper()
	for _, v := range values {
		if err := e.q.PushResult(context.Background(), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
}

func result(uid, attempt string, typ protocol.Type, msg string) string {
	return string(protocol.Result{BigTableUID: uid, AttemptUID: attempt, Type: typ, Message: msg}.Encode())
}

// drainAll runs the poller until nothing is left in the output list.
func drainAll(t *testing.T, e env, p *poller.Poller) {
	t.Helper()
	for {
		n, err := p.Once(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if left, _ := e.rdb.LLen(context.Background(), e.q.Names().Output).Result(); n == 0 && left == 0 {
			return
		}
	}
}

func deadLetters(t *testing.T, e env) []protocol.DeadLetter {
	t.Helper()
	raw, err := e.rdb.LRange(context.Background(), e.q.Names().Dead, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []protocol.DeadLetter
	for _, r := range raw {
		var d protocol.DeadLetter
		if err := json.Unmarshal([]byte(r), &d); err != nil {
			t.Fatalf("dead letter is not an envelope: %v", err)
		}
		out = append(out, d)
	}
	return out
}

func TestApplyResults(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	att := start(t, e, refresh.DefaultPolicy(), "ok", "fail", "perm", "status")
	no := false
	perm := protocol.Result{BigTableUID: "perm", AttemptUID: att["perm"], Type: protocol.Failure, Retryable: &no,
		UserFriendlyReason: "Provided URL is invalid: http://example.com/perm"}
	garbage := `{"big_table_uid": 7}`
	push(t, e,
		result("status", att["status"], protocol.Status, "halfway"),
		result("ok", att["ok"], protocol.Success, "done"),
		result("ok", att["ok"], protocol.Success, "done again"), // a duplicate: stale
		result("fail", att["fail"], protocol.Failure, "upstream 500"),
		string(perm.Encode()),
		result("fail", "c-not-the-attempt", protocol.Success, ""), // stale
		result("ghost", "c1", protocol.Success, ""),               // unknown record
		garbage,
		"not json at all",
	)
	p := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	drainAll(t, e, p)

	st := p.Stats()
	if st.Applied != 4 || st.Stale != 2 || st.Dead != 3 {
		t.Errorf("stats %+v; want 4 applied, 2 stale, 3 dead (9 pushed)", st)
	}
	ok, _ := e.st.Get(ctx, "ok")
	if ok.AttemptNo != 0 || ok.Running() || ok.Disabled {
		t.Errorf("ok: %+v", ok.State)
	}
	fail, _ := e.st.Get(ctx, "fail")
	if fail.AttemptNo != 1 || fail.Running() || fail.RefreshAt.IsZero() || fail.Disabled {
		t.Errorf("fail: %+v; want a retry planned", fail.State)
	}
	pr, _ := e.st.Get(ctx, "perm")
	if !pr.Disabled || pr.DisabledReason != "Provided URL is invalid: http://example.com/perm" || !pr.RefreshAt.IsZero() {
		t.Errorf("perm: %+v; want disabled with the worker's reason", pr.State)
	}
	sr, _ := e.st.Get(ctx, "status")
	if sr.StatusMessage != "halfway" || !sr.Running() {
		t.Errorf("status: message %q running %v; want halfway, still running", sr.StatusMessage, sr.Running())
	}
	dead := deadLetters(t, e)
	if len(dead) != 3 {
		t.Fatalf("%d dead letters; want 3", len(dead))
	}
	reasons := dead[0].Reason + " | " + dead[1].Reason + " | " + dead[2].Reason
	for _, want := range []string{"field big_table_uid is a JSON number", "not a JSON object", `unknown record: no big_table_uid "ghost"`} {
		if !strings.Contains(reasons, want) {
			t.Errorf("dead-letter reasons %q lack %q", reasons, want)
		}
	}
	for _, d := range dead {
		if d.Raw == "" || d.DeadAt.IsZero() {
			t.Errorf("dead letter lost its value or time: %+v", d)
		}
	}
	h, _ := e.st.History(ctx, "ok", 10)
	if len(h) != 1 || h[0].Outcome != store.OutcomeSuccess {
		t.Errorf("ok history %+v; want one success", h)
	}
	if pending, _ := e.q.Pending(ctx, p.ID()); len(pending) != 0 {
		t.Errorf("%d results left unacknowledged", len(pending))
	}
}

func TestOversizedResultNeverReachesThePoller(t *testing.T) {
	e := setup(t)
	att := start(t, e, refresh.DefaultPolicy(), "a")
	big := `{"big_table_uid":"a","refresh_attempt_uid":"` + att["a"] + `","type":"success","message":"` + strings.Repeat("x", 5000) + `"}`
	push(t, e, big)
	p := poller.New(e.st, e.q, poller.Config{MaxResultBytes: 2048, Logger: quiet()})
	drainAll(t, e, p)
	if st := p.Stats(); st.Dead != 1 || st.Applied != 0 {
		t.Errorf("stats %+v; want 1 dead", st)
	}
	dead := deadLetters(t, e)
	if len(dead) != 1 || dead[0].Raw != big || !strings.Contains(dead[0].Reason, "over the limit of 2048") {
		t.Errorf("dead letter %.200v; want the whole value with its reason", dead)
	}
	row, _ := e.st.Get(context.Background(), "a")
	if !row.Running() {
		t.Error("an oversized result changed the record")
	}
}

// A poller killed after draining (its batch is in its processing list) loses
// nothing: another poller adopts the batch once the lease expires.
func TestKilledPollersBatchIsRecovered(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	att := start(t, e, refresh.DefaultPolicy(), "a", "b")
	push(t, e, result("a", att["a"], protocol.Success, ""), result("b", att["b"], protocol.Failure, "x"))

	killed := poller.New(e.st, e.q, poller.Config{ID: "killed", Logger: quiet()})
	poller.SetHooks(killed, nil, func() error { return errors.New("killed before its acknowledgement") })
	if _, err := killed.Once(ctx); err == nil {
		t.Fatal("the killed poller acknowledged")
	}
	// ... and the process dies here. Its lease lives 15 s.
	p := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	if moved, err := e.q.RecoverExpired(ctx, p.ID()); err != nil || moved != 0 {
		t.Fatalf("RecoverExpired of a live lease = %d, %v; want 0", moved, err)
	}
	e.clock.add(16 * time.Second)
	if moved, err := e.q.RecoverExpired(ctx, p.ID()); err != nil || moved != 2 {
		t.Fatalf("RecoverExpired = %d, %v; want 2", moved, err)
	}
	drainAll(t, e, p)
	if st := p.Stats(); st.Stale != 2 {
		t.Errorf("stats %+v; want both results replayed, stale", st)
	}
	if st := killed.Stats(); st.Applied != 2 {
		t.Errorf("killed poller's stats %+v; want both applied (committed)", st)
	}
}

// A poller that dies after its commit but before its acknowledgement replays
// the batch on restart (same id): every result is then stale, nothing is
// applied twice.
func TestReplayAfterCommitAppliesNothingTwice(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	att := start(t, e, refresh.DefaultPolicy(), "a")
	push(t, e, result("a", att["a"], protocol.Failure, "boom"))
	p := poller.New(e.st, e.q, poller.Config{ID: "p1", Logger: quiet()})
	poller.SetHooks(p, nil, func() error { return errors.New("the acknowledgement's reply was lost") })
	if _, err := p.Once(ctx); err == nil {
		t.Fatal("acknowledged")
	}
	after, _ := e.st.Get(ctx, "a")
	e.clock.add(16 * time.Second) // p1 is dead: its lease lapses, its id is free
	p2 := poller.New(e.st, e.q, poller.Config{ID: "p1", Logger: quiet()})
	drainAll(t, e, p2)
	if st := p2.Stats(); st.Stale != 1 || st.Applied != 0 {
		t.Errorf("replay stats %+v; want 1 stale", st)
	}
	again, _ := e.st.Get(ctx, "a")
	if again.State != after.State {
		t.Errorf("replay changed the record: %+v -> %+v", after.State, again.State)
	}
	h, _ := e.st.History(ctx, "a", 10)
	if len(h) != 1 {
		t.Errorf("history has %d attempts; want 1", len(h))
	}
}

func TestDatabaseDownKeepsTheBatch(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	att := start(t, e, refresh.DefaultPolicy(), "a")
	push(t, e, result("a", att["a"], protocol.Success, ""))
	// A store whose pool is closed fails every statement.
	broken, err := store.Open(ctx, testsvc.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	broken.Close()
	p := poller.New(broken, e.q, poller.Config{ID: "p1", Logger: quiet()})
	if _, err := p.Once(ctx); err == nil {
		t.Fatal("Once succeeded without a database")
	}
	if pending, _ := e.q.Pending(ctx, "p1"); len(pending) != 1 {
		t.Fatalf("%d results pending after a failed batch; want 1 kept", len(pending))
	}
	e.clock.add(16 * time.Second) // the broken poller is gone; a new one takes its id
	good := poller.New(e.st, e.q, poller.Config{ID: "p1", Logger: quiet()})
	drainAll(t, e, good)
	if st := good.Stats(); st.Applied != 1 {
		t.Errorf("after the database is back: %+v; want 1 applied", st)
	}
}

// deadlineAgo moves the running attempt's deadline of uid to ago before the
// database's now, as if the attempt had run that long: the store has no
// statement for it, and sleeping past a deadline is what tests must not do.
func deadlineAgo(t *testing.T, e env, uid string, ago time.Duration) time.Time {
	t.Helper()
	var deadline time.Time
	err := e.db.Get(&deadline, `UPDATE bigtables SET deadline_at = now() - $2 * interval '1 microsecond',
		started_at = now() - $2 * interval '1 microsecond' - interval '1 hour' WHERE uid = $1 RETURNING deadline_at`, uid, ago.Microseconds())
	if err != nil {
		t.Fatal(err)
	}
	return deadline.UTC()
}

// Lateness is judged by when a result reached the output list, by the
// queue's clock, not by when a poller applies it: a success pushed before
// its deadline whose poller was killed, recovered after the lease and
// applied after the deadline is a success; one pushed after the deadline is
// stale.
func TestLatenessIsJudgedByWhenTheResultReachedRedis(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	p := refresh.DefaultPolicy()
	p.Timeout = refresh.Duration(time.Hour)
	att := start(t, e, p, "early", "late")
	deadline := deadlineAgo(t, e, "early", time.Minute)
	deadlineAgo(t, e, "late", time.Minute)
	live := poller.New(e.st, e.q, poller.Config{Logger: quiet()})

	// "early": pushed 20 s before its deadline, drained by a poller that is
	// killed before it commits.
	e.clock.set(deadline.Add(-30 * time.Second))
	drainAll(t, e, live) // the output list is empty at deadline - 30s
	push(t, e, result("early", att["early"], protocol.Success, "in time"))
	e.clock.set(deadline.Add(-20 * time.Second))
	onceKilled(t, e)
	// The lease lapses after the deadline; the live poller adopts the batch.
	e.clock.set(deadline.Add(10 * time.Second))
	if n, err := e.q.RecoverExpired(ctx, live.ID()); err != nil || n != 1 {
		t.Fatalf("adopted %d, %v; want 1", n, err)
	}
	drainAll(t, e, live)
	if st := live.Stats(); st.Applied != 1 || st.Stale != 0 {
		t.Errorf("stats %+v; want the success applied, on time", st)
	}
	if h, _ := e.st.History(ctx, "early", 10); len(h) != 1 || h[0].Outcome != store.OutcomeSuccess {
		t.Errorf("history of early %+v; want one success", h)
	}

	// "late": pushed after the deadline (the list was seen empty after it).
	push(t, e, result("late", att["late"], protocol.Success, "too late"))
	e.clock.set(deadline.Add(20 * time.Second))
	drainAll(t, e, live)
	if st := live.Stats(); st.Stale != 1 {
		t.Errorf("stats %+v; want the late success stale", st)
	}
	row, _ := e.st.Get(ctx, "late")
	if row.AttemptUID != att["late"] || row.AttemptNo != 1 {
		t.Errorf("a late result changed the record: %+v", row.State)
	}
}

var errKilled = errors.New("killed")

// onceKilled runs one batch of a poller that dies inside its transaction,
// after applying the batch and before the commit: the transaction rolls
// back and the batch stays leased to the dead poller.
func onceKilled(t *testing.T, e env) {
	t.Helper()
	killed := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	poller.SetHooks(killed, func() { panic(errKilled) }, nil)
	defer func() {
		if r := recover(); r != errKilled {
			t.Fatalf("recovered %v", r)
		}
	}()
	killed.Once(context.Background())
}

// TestEveryStrategyFamilyEndToEnd runs one failure of a record of each
// strategy family through the real scheduler, Redis and poller, and checks
// the retry delay the database ends up with.
func TestEveryStrategyFamilyEndToEnd(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	tests := []struct {
		uid, strategy string
		lo, hi        time.Duration // lo <= refresh_at - failure time <= hi
	}{
		{"list", "list delays=7m,1h", 7 * time.Minute, 7 * time.Minute},
		{"exponential", "exponential initial=3m multiplier=3 max=1h max_attempts=5", 3 * time.Minute, 3 * time.Minute},
		{"linear", "linear initial=4m max_attempts=5", 4 * time.Minute, 4 * time.Minute},
		{"fibonacci", "fibonacci unit=2m max_attempts=5", 2 * time.Minute, 2 * time.Minute},
		{"progressive", "progressive", 5 * time.Minute, 5 * time.Minute},
		{"jitter", "exponential initial=10m max_attempts=5 jitter=equal", 5 * time.Minute, 10 * time.Minute},
		{"fix", "fix ms=90000 max_retry=2", 90 * time.Second, 90 * time.Second},
		{"random-range", "random-range min_ms=60000 max_ms=120000 max_retry=2", time.Minute, 2 * time.Minute},
		{"random", "random base_ms=60000 pct=0.5 max_retry=2", 30 * time.Second, 90 * time.Second},
		{"random-exp-backoff", "random-exp-backoff base_ms=3000 max_retry=2", 3 * time.Second, 3 * time.Second},
		{"rand-cycle", "rand-cycle cycle_ms=45000,90000 max_retry=2", 45 * time.Second, 45 * time.Second},
	}
	past := time.Now().Add(-time.Minute)
	for _, tt := range tests {
		st, err := refresh.ParseStrategy(tt.strategy)
		if err != nil {
			t.Fatal(err)
		}
		p := refresh.DefaultPolicy()
		p.SetStrategy(st)
		def := store.Definition{InputURL: "http://example.com/" + tt.uid, Policy: p.JSON()}
		if _, err := e.st.Add(ctx, tt.uid, def, &past); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := scheduler.New(e.st, e.q, scheduler.Config{Logger: quiet()}).Tick(ctx); err != nil || res.Started != len(tests) {
		t.Fatalf("tick = %+v, %v", res, err)
	}
	for _, tt := range tests {
		r, _ := e.st.Get(ctx, tt.uid)
		push(t, e, result(tt.uid, r.AttemptUID, protocol.Failure, "boom"))
	}
	drainAll(t, e, poller.New(e.st, e.q, poller.Config{Logger: quiet()}))
	for _, tt := range tests {
		r, _ := e.st.Get(ctx, tt.uid)
		h, _ := e.st.History(ctx, tt.uid, 1)
		if len(h) != 1 {
			t.Fatalf("%s: no history", tt.uid)
		}
		delay := r.RefreshAt.Sub(h[0].FinishedAt)
		if delay < tt.lo || delay > tt.hi || (delay-r.LastDelay).Abs() >= time.Millisecond {
			t.Errorf("%s: retry %v after the failure (last_delay %v); want %v to %v", tt.uid, delay, r.LastDelay, tt.lo, tt.hi)
		}
	}
}

// A 100 MB value on the output list is dead-lettered inside Redis, whole,
// with its reason, and never reaches the poller's memory.
func TestHundredMegabyteResult(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the 100 MB value in -short mode")
	}
	e := setup(t)
	att := start(t, e, refresh.DefaultPolicy(), "a")
	huge := strings.Repeat("x", 100<<20)
	push(t, e, huge, result("a", att["a"], protocol.Success, ""))
	p := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	drainAll(t, e, p)
	if st := p.Stats(); st.Dead != 1 || st.Applied != 1 {
		t.Errorf("stats %+v; want the huge value dead and the next result applied", st)
	}
	raw, err := e.rdb.LIndex(context.Background(), e.q.Names().Dead, 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	var d protocol.DeadLetter
	if err := json.Unmarshal([]byte(raw), &d); err != nil || len(d.Raw) != 100<<20 || !strings.Contains(d.Reason, "104857600 bytes, over the limit of 65536") {
		t.Errorf("dead letter: reason %q, %d bytes kept, %v", d.Reason, len(d.Raw), err)
	}
}

// Two pollers draining the same results side by side apply each exactly once.
func TestTwoPollersApplyEachResultOnce(t *testing.T) {
	e := setup(t)
	uids := make([]string, 200)
	for i := range uids {
		uids[i] = fmt.Sprintf("r%03d", i)
	}
	att := start(t, e, refresh.DefaultPolicy(), uids...)
	for _, uid := range uids {
		push(t, e, result(uid, att[uid], protocol.Success, ""), result(uid, att[uid], protocol.Success, "again"))
	}
	p1 := poller.New(e.st, e.q, poller.Config{Batch: 7, Logger: quiet()})
	p2 := poller.New(e.st, e.q, poller.Config{Batch: 11, Logger: quiet()})
	var wg sync.WaitGroup
	for _, p := range []*poller.Poller{p1, p2} {
		wg.Go(func() { drainAll(t, e, p) })
	}
	wg.Wait()
	s1, s2 := p1.Stats(), p2.Stats()
	if s1.Applied+s2.Applied != 200 || s1.Stale+s2.Stale != 200 {
		t.Errorf("applied %d+%d, stale %d+%d; want 200 applied and 200 stale in all", s1.Applied, s2.Applied, s1.Stale, s2.Stale)
	}
	var n int
	for _, uid := range uids {
		h, _ := e.st.History(context.Background(), uid, 10)
		n += len(h)
	}
	if n != 200 {
		t.Errorf("%d attempts recorded; want 200", n)
	}
}

// syncBuffer is a bytes buffer a logger may write to from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestLogsEachEndedAttempt: at Debug, the poller logs every attempt a result
// ended with its outcome, the failure branch taken and the next refresh_at,
// the fields `make run` tells a newcomer to look at (scripts/demo.sh).
func TestLogsEachEndedAttempt(t *testing.T) {
	e := setup(t)
	no := false
	att := start(t, e, refresh.DefaultPolicy(), "ok", "fail", "perm")
	perm := protocol.Result{BigTableUID: "perm", AttemptUID: att["perm"], Type: protocol.Failure, Retryable: &no,
		UserFriendlyReason: "Provided URL is invalid"}
	push(t, e,
		result("ok", att["ok"], protocol.Success, ""),
		result("fail", att["fail"], protocol.Failure, "upstream 500"),
		string(perm.Encode()))
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	drainAll(t, e, poller.New(e.st, e.q, poller.Config{Logger: log}))

	lines := map[string]string{}
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, `msg="attempt ended"`) {
			for _, uid := range []string{"ok", "fail", "perm"} {
				if strings.Contains(l, " uid="+uid+" ") {
					lines[uid] = l
				}
			}
		}
	}
	for uid, want := range map[string][]string{
		"ok":   {"outcome=success", "refresh_at="},
		"fail": {"outcome=failure", "decision=retry", "refresh_at="},
		"perm": {"outcome=failure", "decision=not_retryable", "disabled=true", `reason="Provided URL is invalid"`},
	} {
		l, ok := lines[uid]
		if !ok {
			t.Errorf("no \"attempt ended\" line for %s in:\n%s", uid, buf.String())
			continue
		}
		for _, w := range want {
			if !strings.Contains(l, w) {
				t.Errorf("%s: %q lacks %q", uid, l, w)
			}
		}
	}
}
