package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

func events(t *testing.T, e env, uid string) []store.Event {
	t.Helper()
	list, err := e.st.ListEvents(context.Background(), store.EventFilter{UID: uid})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// A final failure whose transaction rolls back after the plan wrote its
// event leaves no event; applied again by a live poller, it leaves exactly
// one, with the disabled reason and the attempt count.
func TestFinalFailureEventOnlyWhenCommitted(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	p := refresh.DefaultPolicy()
	p.Retries = nil
	att := start(t, e, p, "rec")
	push(t, e, result("rec", att["rec"], protocol.Failure, "GET: 503"))
	onceKilled(t, e)
	if got := events(t, e, "rec"); len(got) != 0 {
		t.Fatalf("a rolled-back transition wrote events: %+v", got)
	}
	if row, _ := e.st.Get(ctx, "rec"); row.Disabled {
		t.Fatal("the rolled-back transition was written")
	}

	e.clock.add(16 * time.Second) // past the killed poller's lease (15 s)
	live := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	if _, err := e.q.RecoverExpired(ctx, live.ID()); err != nil {
		t.Fatal(err)
	}
	drainAll(t, e, live)
	got := events(t, e, "rec")
	if len(got) != 1 || got[0].Type != store.EventDisabled || got[0].Attempts != 1 ||
		got[0].Reason != "Cannot refresh BigTable after 1 attempt: GET: 503" || got[0].FailingSince.IsZero() || got[0].State != store.EventPending {
		t.Fatalf("events %+v; want one pending disabled event after 1 attempt", got)
	}
}

// A success after failures writes one recovered event; a success of a
// healthy record writes none.
func TestRecoveredEvent(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	p := refresh.DefaultPolicy()
	p.Retries = []refresh.Duration{0}
	att := start(t, e, p, "sick", "well")
	push(t, e, result("sick", att["sick"], protocol.Failure, "boom"), result("well", att["well"], protocol.Success, ""))
	live := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	drainAll(t, e, live)
	att = start(t, e, p) // the retry is due now
	row, _ := e.st.Get(ctx, "sick")
	if row.AttemptNo != 2 {
		t.Fatalf("sick: attempt %d; want the retry running", row.AttemptNo)
	}
	push(t, e, result("sick", row.AttemptUID, protocol.Success, ""))
	drainAll(t, e, live)
	if got := events(t, e, "well"); len(got) != 0 {
		t.Errorf("well: events %+v; want none", got)
	}
	got := events(t, e, "sick")
	if len(got) != 1 || got[0].Type != store.EventRecovered || got[0].Attempts != 1 {
		t.Fatalf("sick: events %+v; want one recovered after 1 failed attempt", got)
	}
}
