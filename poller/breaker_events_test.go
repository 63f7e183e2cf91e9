package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// breakerEvents lists the events of upstream name.
func breakerEvents(t *testing.T, e env, name string) []store.Event {
	t.Helper()
	list, err := e.st.ListEvents(context.Background(), store.EventFilter{Upstream: name})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// breakerOf is upstream name's breaker ("" when it has no row).
func breakerOf(t *testing.T, e env, name string) upstream.BreakerState {
	t.Helper()
	list, err := e.st.Upstreams(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range list {
		if u.Name == name {
			return u.State.Breaker
		}
	}
	return ""
}

// Failures that open an upstream's breaker write a breaker_opened event in
// the batch's transaction: none when that transaction rolls back (and the
// breaker stays closed), exactly one, with what opened it, when it commits.
func TestBreakerOpenedEventOnlyWhenCommitted(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	cfg := upstream.DefaultConfig()
	cfg.Breaker.Consecutive, cfg.Breaker.FailureRate = 2, 0
	cfg.Breaker.CoolDown = refresh.Duration(time.Minute)
	if err := e.st.SetUpstream(ctx, "example.com", cfg); err != nil {
		t.Fatal(err)
	}
	att := start(t, e, refresh.DefaultPolicy(), "a", "b")
	push(t, e, result("a", att["a"], protocol.Failure, "GET: 503"), result("b", att["b"], protocol.Failure, "GET: 503"))
	onceKilled(t, e)
	if got := breakerEvents(t, e, "example.com"); len(got) != 0 {
		t.Fatalf("a rolled-back batch wrote breaker events: %+v", got)
	}
	if b := breakerOf(t, e, "example.com"); b != upstream.Closed {
		t.Fatalf("breaker %q after a rolled-back batch; want closed", b)
	}

	e.clock.add(16 * time.Second) // past the killed poller's lease (15 s)
	live := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	if _, err := e.q.RecoverExpired(ctx, live.ID()); err != nil {
		t.Fatal(err)
	}
	drainAll(t, e, live)
	if b := breakerOf(t, e, "example.com"); b != upstream.Open {
		t.Fatalf("breaker %q after 2 failures; want open", b)
	}
	got := breakerEvents(t, e, "example.com")
	if len(got) != 1 {
		t.Fatalf("breaker events %+v; want one", got)
	}
	ev := got[0]
	if ev.Type != store.EventBreakerOpened || ev.UID != "" || ev.From != "closed" || ev.To != "open" ||
		ev.Why != "2 failures in a row" || ev.CoolDown != time.Minute || !ev.NextProbeAt.Equal(ev.At.Add(time.Minute)) ||
		ev.State != store.EventPending {
		t.Fatalf("event %+v; want a pending breaker_opened, closed -> open after 2 failures, probes 1m later", ev)
	}
	if list, _ := e.st.ListEvents(ctx, store.EventFilter{Type: store.EventBreakerOpened}); len(list) != 1 || list[0].ID != ev.ID {
		t.Errorf("events --type breaker_opened: %+v; want the event", list)
	}
}

// A good probe of a half-open breaker closes it and writes breaker_closed
// in the batch's transaction, with the parked records now to be released.
func TestBreakerClosedEventOnGoodProbe(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	att := start(t, e, refresh.DefaultPolicy(), "probe")
	later := time.Now().Add(time.Hour)
	for _, uid := range []string{"p1", "p2"} {
		if _, err := e.st.Add(ctx, uid, store.Definition{InputURL: "http://example.com/" + uid, Policy: refresh.DefaultPolicy().JSON()}, &later); err != nil {
			t.Fatal(err)
		}
	}
	exec(t, e.db, `UPDATE bigtables SET parked_at = now() WHERE uid IN ('p1', 'p2')`)
	exec(t, e.db, `INSERT INTO upstreams (name, breaker, opens, probes_left, changed_at) VALUES ('example.com', 'half_open', 1, 0, now())
		ON CONFLICT (name) DO UPDATE SET breaker = 'half_open', opens = 1, probes_left = 0, changed_at = now()`)
	push(t, e, result("probe", att["probe"], protocol.Success, ""))
	drainAll(t, e, poller.New(e.st, e.q, poller.Config{Logger: quiet()}))
	if b := breakerOf(t, e, "example.com"); b != upstream.Closed {
		t.Fatalf("breaker %q after a good probe; want closed", b)
	}
	got := breakerEvents(t, e, "example.com")
	if len(got) != 1 || got[0].Type != store.EventBreakerClosed || got[0].UID != "" || got[0].From != "half_open" ||
		got[0].To != "closed" || got[0].Why != "a probe succeeded" || got[0].Parked != 2 || got[0].CoolDown != 0 {
		t.Fatalf("breaker events %+v; want one breaker_closed after a good probe, 2 records parked", got)
	}
}
