package store_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

func eventTypes(t *testing.T, s *store.Store, f store.EventFilter) []store.EventType {
	t.Helper()
	list, err := s.ListEvents(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.EventType
	for _, e := range list {
		out = append(out, e.Type)
	}
	return out
}

// A person's actions write their events in their own transactions: pause
// and resume (only when they change something), the update of a disabled
// record (reenabled, with the reason it had), and delete.
func TestPersonsActionsWriteEvents(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	if _, err := s.Add(ctx, "r", def(), nil); err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { _, _, err := s.Pause(ctx, "r"); return err },
		func() error { _, _, err := s.Pause(ctx, "r"); return err }, // already paused: no event
		func() error { _, err := s.Resume(ctx, "r"); return err },
		func() error { _, err := s.Resume(ctx, "r"); return err }, // not paused: no event
		func() error { // enabled: no event
			_, _, err := s.Update(ctx, "r", func(*store.Definition) error { return nil }, nil)
			return err
		},
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	// Disable it as a final failure would, then let a person update it.
	err := s.InTx(ctx, func(tx *store.Tx) error {
		rows, err := tx.Lock(ctx, []string{"r"})
		if err != nil {
			return err
		}
		r := rows["r"]
		r.Disabled, r.DisabledReason, r.AttemptNo = true, "thumbnail creation failed", 7
		return tx.Save(ctx, []store.Row{r})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Update(ctx, "r", func(*store.Definition) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	// An edit that fails writes nothing, not even its event.
	refused := errors.New("refused")
	if _, _, err := s.Update(ctx, "r", func(*store.Definition) error { return refused }, nil); !errors.Is(err, refused) {
		t.Fatalf("update = %v", err)
	}
	if _, err := s.Delete(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, "r"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete = %v", err)
	}
	got := eventTypes(t, s, store.EventFilter{UID: "r"})
	want := []store.EventType{store.EventPaused, store.EventResumed, store.EventReenabled, store.EventDeleted}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v; want %v", got, want)
	}
	list, _ := s.ListEvents(ctx, store.EventFilter{Type: store.EventReenabled})
	if len(list) != 1 || list[0].Reason != "thumbnail creation failed" || list[0].Attempts != 7 || list[0].State != store.EventPending {
		t.Errorf("reenabled %+v; want the old reason and attempts, pending", list)
	}
}

// WriteEvents writes with the transaction: a transaction that fails after
// it leaves no event. An unknown type is refused.
func TestWriteEventsRollsBackWithItsTransaction(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	boom := errors.New("after the plan")
	err := s.InTx(ctx, func(tx *store.Tx) error {
		if err := tx.WriteEvents(ctx, []store.Event{{Type: store.EventDisabled, UID: "x", Reason: "r"}}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if got := eventTypes(t, s, store.EventFilter{}); len(got) != 0 {
		t.Fatalf("events %v after a rollback; want none", got)
	}
	if err := s.WriteEvent(ctx, store.Event{Type: "exploded"}); err == nil {
		t.Error("an unknown event type was written")
	}
	if err := s.WriteEvent(ctx, store.Event{Type: store.EventBreakerOpened, Upstream: "thumbnailer", Message: "5 failures in 1m"}); err != nil {
		t.Fatal(err)
	}
	list, _ := s.ListEvents(ctx, store.EventFilter{})
	if len(list) != 1 || list[0].Upstream != "thumbnailer" || list[0].UID != "" || list[0].At.IsZero() {
		t.Errorf("events %+v; want the breaker event", list)
	}
}

// Claims never hand one event to two notifiers while its lease runs; a
// notifier that dies holding events leaves them to the others once the
// lease is over; a mark under a claim that was taken over changes nothing.
func TestClaimLeaseMarkRequeuePrune(t *testing.T) {
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := open(t).WithClock(clk.Now)
	ctx := context.Background()
	for _, uid := range []string{"a", "b", "c"} {
		if err := s.WriteEvent(ctx, store.Event{Type: store.EventPaused, UID: uid}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := s.ClaimEvents(ctx, "n1", 2, time.Minute)
	if err != nil || len(first) != 2 || first[0].UID != "a" || first[1].UID != "b" {
		t.Fatalf("claim = %+v, %v; want a and b", first, err)
	}
	second, err := s.ClaimEvents(ctx, "n2", 10, time.Minute)
	if err != nil || len(second) != 1 || second[0].UID != "c" {
		t.Fatalf("second claim = %+v, %v; want c only", second, err)
	}
	if ok, err := s.MarkEvent(ctx, second[0].ID, "n2", store.Delivery{State: store.EventDelivered, DeliveredTo: []string{"w"}}); !ok || err != nil {
		t.Fatalf("mark = %v, %v", ok, err)
	}
	// n1 dies; its lease runs out.
	clk.Add(time.Minute - time.Microsecond)
	if got, _ := s.ClaimEvents(ctx, "n3", 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed %+v while the lease runs", got)
	}
	clk.Add(time.Microsecond)
	third, err := s.ClaimEvents(ctx, "n3", 10, time.Minute)
	if err != nil || len(third) != 2 {
		t.Fatalf("claim after the lease = %+v, %v; want a and b", third, err)
	}
	if ok, _ := s.MarkEvent(ctx, first[0].ID, "n1", store.Delivery{State: store.EventDelivered}); ok {
		t.Error("a mark under a lost claim was applied")
	}
	if ok, _ := s.MarkEvent(ctx, third[0].ID, "n3", store.Delivery{State: store.EventPending, RetryAt: clk.Now().Add(time.Hour), Error: "503"}); !ok {
		t.Error("retry mark refused")
	}
	if ok, _ := s.MarkEvent(ctx, third[1].ID, "n3", store.Delivery{State: store.EventDead, Error: "gave up"}); !ok {
		t.Error("dead mark refused")
	}
	dead, _ := s.ListEvents(ctx, store.EventFilter{State: store.EventDead})
	if len(dead) != 1 || dead[0].UID != "b" || dead[0].LastError != "gave up" || dead[0].Tries != 1 {
		t.Fatalf("dead %+v", dead)
	}
	if err := s.RequeueEvent(ctx, dead[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.RequeueEvent(ctx, dead[0].ID); !errors.Is(err, store.ErrNoDeadEvent) {
		t.Errorf("second requeue = %v", err)
	}
	if got, _ := s.ClaimEvents(ctx, "n4", 10, time.Minute); len(got) != 1 || got[0].UID != "b" || got[0].Tries != 0 {
		t.Fatalf("claim after requeue = %+v; want b, tries reset", got)
	}
	// Prune: only delivered or dead events past the age go.
	clk.Add(31 * 24 * time.Hour)
	if n, err := s.PruneEventsOlder(ctx, 30*24*time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want the delivered one (the others are pending)", n, err)
	}
	if got := eventTypes(t, s, store.EventFilter{}); len(got) != 2 {
		t.Errorf("left %v; want the two pending", got)
	}
}

// TransitionEvents names the transition: disabled, or gave_up for
// give_up_after, with the reason and attempts; recovered for the first
// success after failures; nothing for other steps.
func TestTransitionEvents(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	since := now.Add(-8 * 24 * time.Hour)
	failing := refresh.State{AttemptUID: "a", AttemptNo: 4, FailingSince: since}
	gone := failing
	gone.AttemptUID, gone.Disabled, gone.DisabledReason = "", true, "gave up after 1 week"
	retrying := failing
	retrying.AttemptUID, retrying.RefreshAt = "", now.Add(time.Minute)
	tests := []struct {
		name     string
		old, cur refresh.State
		d        refresh.Decision
		want     []store.Event
	}{
		{"gave up", failing, gone, refresh.GaveUp, []store.Event{{Type: store.EventGaveUp, UID: "u", At: now,
			Reason: "gave up after 1 week", Attempts: 4, FailingSince: since}}},
		{"exhausted", failing, gone, refresh.Exhausted, []store.Event{{Type: store.EventDisabled, UID: "u", At: now,
			Reason: "gave up after 1 week", Attempts: 4, FailingSince: since}}},
		{"recovered", failing, refresh.State{RefreshAt: now.Add(time.Hour)}, "", []store.Event{{Type: store.EventRecovered, UID: "u", At: now,
			Attempts: 3, FailingSince: since}}},
		{"a retry", failing, retrying, refresh.Retry, nil},
		{"a healthy success", refresh.State{AttemptUID: "a", AttemptNo: 1}, refresh.State{}, "", nil},
		{"already disabled", gone, gone, "", nil},
	}
	for _, tt := range tests {
		if got := store.TransitionEvents("u", tt.old, tt.cur, tt.d, now); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %+v; want %+v", tt.name, got, tt.want)
		}
	}
}
