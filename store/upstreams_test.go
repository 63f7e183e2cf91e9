package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
	"github.com/jmoiron/sqlx"
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
		n, left, err := tx.Unpark(ctx, "down.example", 10)
		if n != 1 || left {
			t.Errorf("unparked %d (left %v), want 1 and none left", n, left)
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

// parkAll adds records on down.example and parks them, as an open
// breaker would.
func parkAll(t *testing.T, st *store.Store, now time.Time, uids ...string) {
	t.Helper()
	ctx := context.Background()
	for _, uid := range uids {
		def := store.Definition{InputURL: "https://down.example/" + uid, Policy: refresh.DefaultPolicy().JSON()}
		if _, err := st.Add(ctx, uid, def, &now); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.InTx(ctx, func(tx *store.Tx) error {
		if _, err := tx.Lock(ctx, uids); err != nil {
			return err
		}
		return tx.Park(ctx, uids)
	}); err != nil {
		t.Fatal(err)
	}
	for _, uid := range uids {
		if r, _ := st.Get(ctx, uid); r.Phase() != refresh.PhaseParked {
			t.Fatalf("%s: phase %s, want parked", uid, r.Phase())
		}
	}
}

// What people do to a parked record: saving it (update) unparks it, due
// at once like any update, on its new upstream when the update names one;
// pausing it shows it paused, and a release passes over it; resuming it
// ends its parking (due, parked again by a tick while the breaker is
// open); deleting it leaves its upstream nothing to release.
func TestPeopleAndParkedRecords(t *testing.T) {
	ctx := context.Background()
	base := testsvc.Store(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	st := base.WithClock(func() time.Time { return now })
	parkAll(t, st, now.Add(-time.Minute), "saved", "moved", "paused", "deleted")
	now = now.Add(time.Minute)

	r, _, err := st.Update(ctx, "saved", func(*store.Definition) error { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Get(ctx, "saved"); got.Phase() != refresh.PhaseWaiting || !got.ParkedAt.IsZero() || !got.RefreshAt.Equal(now) ||
		got.Upstream != "down.example" || r.Phase() != refresh.PhaseWaiting {
		t.Errorf("saved: phase %s parked_at %v refresh_at %v upstream %q; want waiting, due now, on down.example",
			got.Phase(), got.ParkedAt, got.RefreshAt, got.Upstream)
	}
	if _, _, err := st.Update(ctx, "moved", func(d *store.Definition) error { d.Upstream = "mirror"; return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Get(ctx, "moved"); got.Phase() != refresh.PhaseWaiting || got.Upstream != "mirror" {
		t.Errorf("moved: phase %s upstream %q; want waiting on mirror", got.Phase(), got.Upstream)
	}

	if _, _, err := st.Pause(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Get(ctx, "paused"); got.Phase() != refresh.PhasePaused {
		t.Errorf("paused: phase %s, want paused", got.Phase())
	}
	if _, err := st.Delete(ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	var ups []store.UpstreamRow
	if err := st.InTx(ctx, func(tx *store.Tx) error { _, err := tx.LockUpstreams(ctx, []string{"down.example"}); return err }); err != nil {
		t.Fatal(err)
	}
	if ups, err = st.Upstreams(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ups) != 1 || ups[0].Parked != 1 {
		t.Fatalf("upstreams %+v; want down.example with 1 parked record (paused)", ups)
	}
	// A release (a probe) passes over the paused record: it could not
	// start, and would use up the probe.
	err = st.InTx(ctx, func(tx *store.Tx) error {
		n, left, err := tx.Unpark(ctx, "down.example", 10)
		if n != 0 || left {
			t.Errorf("release: %d released, left %v; want the paused record passed over, none left", n, left)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Resuming ends its parking: due at once; a tick parks it again if
	// the breaker is still open.
	now = now.Add(time.Minute)
	if _, err := st.Resume(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Get(ctx, "paused"); got.Phase() != refresh.PhaseWaiting || !got.ParkedAt.IsZero() || !got.Due(now) {
		t.Errorf("resumed: phase %s parked_at %v due %v; want waiting, not parked, due", got.Phase(), got.ParkedAt, got.Due(now))
	}
}

// Migration 011 on a database with records: each record's upstream is
// what upstream.Name gives for its input URL (the default new records
// get), and migrating again changes nothing.
func TestMigration011DerivesUpstreams(t *testing.T) {
	ctx := context.Background()
	url := testsvc.Database(t)
	db, err := sqlx.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	all, err := store.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	// The schema as it was before 011, with its bookkeeping.
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		if m.Version >= 11 {
			break
		}
		if _, err := db.ExecContext(ctx, m.SQL); err != nil {
			t.Fatalf("migration %s: %v", m.Name, err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	inputs := []string{
		"https://API.example.com/x?y=1", "http://user:pw@h.example:8080/x", "s3://bucket/key", "not a url",
		"http://h.example?q=1", "HTTP://Upper.Example#frag", "http://[::1]:8080/p", "ftp://files.example",
		"https://a.example/path/with/@sign",
	}
	for i, in := range inputs {
		if _, err := db.ExecContext(ctx, `INSERT INTO bigtables (uid, input_url, schedule, policy, refresh_at)
			VALUES ($1, $2, '', $3::jsonb, now())`, fmt.Sprintf("r%d", i), in, string(refresh.DefaultPolicy().JSON())); err != nil {
			t.Fatal(err)
		}
	}
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for run := range 2 {
		applied, err := st.Migrate(ctx)
		if err != nil {
			t.Fatalf("migrate (run %d): %v", run+1, err)
		}
		if want := len(all) - 10; run == 0 && len(applied) != want || run == 1 && len(applied) != 0 {
			t.Fatalf("migrate run %d applied %d versions", run+1, len(applied))
		}
		for i, in := range inputs {
			r, err := st.Get(ctx, fmt.Sprintf("r%d", i))
			if err != nil {
				t.Fatal(err)
			}
			if want := upstream.Name(in); r.Upstream != want {
				t.Errorf("run %d: %q: upstream %q, want %q (upstream.Name)", run+1, in, r.Upstream, want)
			}
		}
	}
}
