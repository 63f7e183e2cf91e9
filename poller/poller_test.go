package poller_test

import (
	"context"
	"encoding/json"
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
	"github.com/redis/go-redis/v9"
)

type env struct {
	st  *store.Store
	q   *queue.Queue
	rdb redis.UniversalClient
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func setup(t *testing.T) env {
	t.Helper()
	_, rdb, names := testsvc.Redis(t)
	return env{st: testsvc.Store(t), q: queue.New(rdb, names), rdb: rdb}
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

func drainAll(t *testing.T, p *poller.Poller) {
	t.Helper()
	for {
		n, err := p.Once(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
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
	drainAll(t, p)

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
	drainAll(t, p)
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
// nothing: another poller recovers the batch once the lease expires.
func TestKilledPollersBatchIsRecovered(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	att := start(t, e, refresh.DefaultPolicy(), "a", "b")
	push(t, e, result("a", att["a"], protocol.Success, ""), result("b", att["b"], protocol.Failure, "x"))

	if err := e.q.Heartbeat(ctx, "killed", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got, _, err := e.q.Drain(ctx, "killed", 100, 1<<20)
	if err != nil || len(got) != 2 {
		t.Fatalf("drain = %d, %v", len(got), err)
	}
	// ... and the process dies here, before applying.
	time.Sleep(100 * time.Millisecond)
	moved, err := e.q.RecoverExpired(ctx)
	if err != nil || moved != 2 {
		t.Fatalf("RecoverExpired = %d, %v; want 2", moved, err)
	}
	p := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	drainAll(t, p)
	if st := p.Stats(); st.Applied != 2 {
		t.Errorf("stats %+v; want both results applied", st)
	}
	// A live lease is never recovered.
	e.q.Heartbeat(ctx, "alive", time.Minute)
	push(t, e, "x")
	e.q.Drain(ctx, "alive", 100, 1<<20)
	if moved, _ := e.q.RecoverExpired(ctx); moved != 0 {
		t.Errorf("recovered %d results of a live poller", moved)
	}
}

// A poller that dies after its commit but before its acknowledgement replays
// the batch on restart (same id): every result is then stale, nothing is
// applied twice.
func TestReplayAfterCommitAppliesNothingTwice(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	att := start(t, e, refresh.DefaultPolicy(), "a")
	res := result("a", att["a"], protocol.Failure, "boom")
	push(t, e, res)
	p := poller.New(e.st, e.q, poller.Config{ID: "p1", Logger: quiet()})
	drainAll(t, p)
	after, _ := e.st.Get(ctx, "a")
	// Simulate the lost acknowledgement: the batch is back in p1's list.
	e.rdb.RPush(ctx, e.q.Names().Output+":processing:p1", res)
	p2 := poller.New(e.st, e.q, poller.Config{ID: "p1", Logger: quiet()})
	drainAll(t, p2)
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
	good := poller.New(e.st, e.q, poller.Config{ID: "p1", Logger: quiet()})
	drainAll(t, good)
	if st := good.Stats(); st.Applied != 1 {
		t.Errorf("after the database is back: %+v; want 1 applied", st)
	}
}

// A result after its attempt's deadline is stale: the attempt counts as
// timed out, which the scheduler applies (DESIGN.md rule 4).
func TestLateResultIsStale(t *testing.T) {
	e := setup(t)
	p := refresh.DefaultPolicy()
	p.Timeout = refresh.Duration(time.Second)
	att := start(t, e, p, "a")
	time.Sleep(1100 * time.Millisecond)
	push(t, e, result("a", att["a"], protocol.Success, "too late"))
	pl := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	drainAll(t, pl)
	if st := pl.Stats(); st.Stale != 1 || st.Applied != 0 {
		t.Errorf("stats %+v; want the late success stale", st)
	}
	row, _ := e.st.Get(context.Background(), "a")
	if row.AttemptUID != att["a"] || row.AttemptNo != 1 {
		t.Errorf("a late result changed the record: %+v", row.State)
	}
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
	drainAll(t, poller.New(e.st, e.q, poller.Config{Logger: quiet()}))
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
	drainAll(t, p)
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
		wg.Go(func() { drainAll(t, p) })
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
