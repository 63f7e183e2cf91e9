package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// TestParkKeepsStateAndUnparkDiscountsTimeParked: a parked record keeps
// attempt_no and refresh_at, leaves the due set, and comes back with its
// failing_since moved by the time parked, so give_up_after counts only its
// own failing time.
func TestParkKeepsStateAndUnparkDiscountsTimeParked(t *testing.T) {
	ctx := context.Background()
	base := testsvc.Store(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	st := base.WithClock(func() time.Time { return now })
	p := refresh.DefaultPolicy()
	if _, err := st.Add(ctx, "r", store.Definition{InputURL: "https://down.example/r", Policy: p.JSON()}, &now); err != nil {
		t.Fatal(err)
	}
	// Start and fail it once, as the scheduler and a poller would.
	rules := refresh.Rules{Policy: p}
	inTx := func(fn func(tx *store.Tx) error) {
		t.Helper()
		if err := st.InTx(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	inTx(func(tx *store.Tx) error {
		rows, err := tx.Lock(ctx, []string{"r"})
		if err != nil {
			return err
		}
		r := rows["r"]
		if r.State, err = rules.Start(r.State, now, "a1"); err != nil {
			return err
		}
		if r.State, _, err = rules.Fail(r.State, now, refresh.ReceivedAt(now), "a1", refresh.Failure{Message: "503"}); err != nil {
			return err
		}
		return tx.Save(ctx, []store.Row{r})
	})
	before, _ := st.Get(ctx, "r")
	inTx(func(tx *store.Tx) error { return tx.Park(ctx, []string{"r"}) })
	parked, _ := st.Get(ctx, "r")
	if parked.Phase() != refresh.PhaseParked || parked.AttemptNo != before.AttemptNo || !parked.RefreshAt.Equal(before.RefreshAt) {
		t.Fatalf("parked: phase %s attempt_no %d refresh_at %v; want parked, %d, %v", parked.Phase(), parked.AttemptNo, parked.RefreshAt, before.AttemptNo, before.RefreshAt)
	}
	inTx(func(tx *store.Tx) error {
		rows, err := tx.ClaimDue(ctx, 10, now)
		if len(rows) != 0 {
			t.Errorf("a parked record was claimed: %+v", rows)
		}
		return err
	})
	// Operators see it: counted (metrics), and parked in the dashboard's pages.
	if n, err := st.CountParked(ctx); err != nil || n != 1 {
		t.Errorf("CountParked %d %v; want 1", n, err)
	}
	page, _, err := st.Page(ctx, store.PageQuery{Phase: refresh.PhaseParked})
	if err != nil || len(page) != 1 || page[0].Phase() != refresh.PhaseParked || !page[0].ParkedAt.Equal(now) || page[0].Upstream != "down.example" {
		t.Errorf("page of parked records %+v %v; want r, parked at %v, upstream down.example", page, err, now)
	}
	now = now.Add(3 * time.Hour)
	inTx(func(tx *store.Tx) error {
		n, err := tx.Unpark(ctx, "down.example", 10)
		if n != 1 {
			t.Errorf("unparked %d, want 1", n)
		}
		return err
	})
	back, _ := st.Get(ctx, "r")
	if n, err := st.CountParked(ctx); err != nil || n != 0 {
		t.Errorf("CountParked after the release %d %v; want 0", n, err)
	}
	if back.Parked || back.AttemptNo != before.AttemptNo || !back.RefreshAt.Equal(before.RefreshAt) {
		t.Fatalf("released: %+v", back.State)
	}
	if want := before.FailingSince.Add(3 * time.Hour); !back.FailingSince.Equal(want) {
		t.Fatalf("failing_since %v after 3h parked, want %v (moved by the time parked)", back.FailingSince, want)
	}
}

func TestUpstreamRowsRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := testsvc.Store(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	err := st.InTx(ctx, func(tx *store.Tx) error {
		ups, err := tx.LockUpstreams(ctx, []string{"b", "a", "b", ""})
		if err != nil {
			return err
		}
		if len(ups) != 2 {
			t.Errorf("locked %d upstreams, want 2 (a, b)", len(ups))
		}
		ups["a"].State = upstream.State{Breaker: upstream.Open, Failures: 5, Opens: 2, NextProbe: now, Tokens: 1.5, TokensAt: now, Releasing: true}
		return tx.SaveUpstreams(ctx, ups)
	})
	if err != nil {
		t.Fatal(err)
	}
	list, err := st.Upstreams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := list[0].State
	if list[0].Name != "a" || got.Breaker != upstream.Open || got.Failures != 5 || got.Opens != 2 || !got.NextProbe.Equal(now) || got.Tokens != 1.5 || !got.Releasing {
		t.Fatalf("round trip: %+v", list[0])
	}
	var waking []string
	st.InTx(ctx, func(tx *store.Tx) error { waking, err = tx.WakingUpstreams(ctx, 10); return err })
	if len(waking) != 1 || waking[0] != "a" {
		t.Fatalf("waking %v, want [a]", waking)
	}
}
