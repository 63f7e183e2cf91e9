package store_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/jmoiron/sqlx"
)

func open(t *testing.T) *store.Store { return testsvc.Store(t) }

func def() store.Definition {
	return store.Definition{InputURL: "http://example.com/x", Policy: refresh.DefaultPolicy().JSON()}
}

func TestMigrateIdempotentAndConcurrent(t *testing.T) {
	ctx := context.Background()
	url := testsvc.Database(t)
	var wg sync.WaitGroup
	applied := make([]int, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := store.Open(ctx, url)
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			m, err := s.Migrate(ctx)
			applied[i], errs[i] = len(m), err
		}()
	}
	wg.Wait()
	all, _ := store.Migrations()
	total := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatalf("migrate %d: %v", i, errs[i])
		}
		total += applied[i]
	}
	if total != len(all) {
		t.Errorf("4 concurrent migrations applied %d versions in all; want %d (each once)", total, len(all))
	}
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if m, err := s.Migrate(ctx); err != nil || len(m) != 0 {
		t.Errorf("second migrate applied %d, %v; want 0, nil", len(m), err)
	}
}

func TestAddGetUpdate(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	r, err := s.Add(ctx, "bt1", def(), nil)
	if err != nil {
		t.Fatal(err)
	}
	now, _ := s.Now(ctx)
	if r.RefreshAt.IsZero() || r.RefreshAt.After(now) || r.AttemptNo != 0 || r.Disabled {
		t.Errorf("added row %+v", r)
	}
	if _, err := s.Add(ctx, "bt1", def(), nil); !errors.Is(err, store.ErrExists) {
		t.Errorf("second Add: %v; want ErrExists", err)
	}
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get unknown: %v; want ErrNotFound", err)
	}

	// Start an attempt by hand, then a person saves the record.
	err = s.InTx(ctx, func(tx *store.Tx) error {
		rows, err := tx.Lock(ctx, []string{"bt1"})
		if err != nil {
			return err
		}
		row := rows["bt1"]
		rules := refresh.Rules{Policy: refresh.DefaultPolicy()}
		row.State, err = rules.Start(row.State, tx.Now(), "attempt-1")
		if err != nil {
			return err
		}
		return tx.Save(ctx, []store.Row{row})
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := s.Get(ctx, "bt1")
	if got.AttemptUID != "attempt-1" || got.AttemptNo != 1 || got.DeadlineAt.IsZero() || !got.RefreshAt.IsZero() {
		t.Fatalf("after start %+v", got)
	}

	boom := errors.New("bad edit")
	if _, _, err := s.Update(ctx, "bt1", func(d *store.Definition) error { d.InputURL = "http://changed/"; return boom }, nil); !errors.Is(err, boom) {
		t.Fatalf("Update with failing edit: %v", err)
	}
	if again, _ := s.Get(ctx, "bt1"); again.InputURL != "http://example.com/x" || again.AttemptUID != "attempt-1" {
		t.Errorf("a failed edit wrote something: %+v", again)
	}

	up, _, err := s.Update(ctx, "bt1", func(d *store.Definition) error { d.InputURL = "http://changed/"; return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if up.InputURL != "http://changed/" || up.AttemptUID != "" || up.AttemptNo != 0 || up.RefreshAt.IsZero() {
		t.Errorf("after update %+v", up)
	}
	h, err := s.History(ctx, "bt1", 10)
	if err != nil || len(h) != 1 || h[0].Outcome != store.OutcomeCancelled || h[0].AttemptUID != "attempt-1" {
		t.Errorf("history %+v, %v; want the cancelled attempt", h, err)
	}
	if _, _, err := s.Update(ctx, "nope", func(*store.Definition) error { return nil }, nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Update unknown: %v", err)
	}
}

func TestClaimDueSkipsLockedRows(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	past := time.Now().Add(-time.Hour)
	future := time.Now().Add(time.Hour)
	for _, uid := range []string{"a", "b", "c"} {
		if _, err := s.Add(ctx, uid, def(), &past); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Add(ctx, "later", def(), &future); err != nil {
		t.Fatal(err)
	}

	// Transaction 1 claims two rows and holds them; transaction 2 must get
	// only the third.
	claimed1 := make(chan []store.Row)
	release := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- s.InTx(ctx, func(tx *store.Tx) error {
			rows, err := tx.ClaimDue(ctx, 2, tx.Now())
			claimed1 <- rows
			<-release
			return err
		})
	}()
	first := <-claimed1
	var second []store.Row
	err := s.InTx(ctx, func(tx *store.Tx) error {
		var err error
		second, err = tx.ClaimDue(ctx, 10, tx.Now())
		return err
	})
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 || len(second) != 1 {
		t.Fatalf("claims got %d and %d rows; want 2 and 1", len(first), len(second))
	}
	seen := map[string]bool{}
	for _, r := range append(first, second...) {
		if seen[r.UID] || r.UID == "later" {
			t.Errorf("row %s claimed twice or not due", r.UID)
		}
		seen[r.UID] = true
	}
}

func TestSaveAndUndo(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	past := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	if _, err := s.Add(ctx, "a", def(), &past); err != nil {
		t.Fatal(err)
	}
	var started store.Row
	err := s.InTx(ctx, func(tx *store.Tx) error {
		rows, err := tx.ClaimDue(ctx, 10, tx.Now())
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
		started = rows[0]
		started.State, err = refresh.Rules{Policy: refresh.DefaultPolicy()}.Start(started.State, tx.Now(), "att")
		if err != nil {
			return err
		}
		return tx.Save(ctx, []store.Row{started})
	})
	if err != nil {
		t.Fatal(err)
	}
	// An undo for another attempt changes nothing; the right one reverts.
	if n, err := s.UndoStarts(ctx, []store.Started{{UID: "a", AttemptUID: "other", RefreshAt: past}}); err != nil || n != 0 {
		t.Errorf("undo of a stale attempt = %d, %v; want 0", n, err)
	}
	if n, err := s.UndoStarts(ctx, []store.Started{{UID: "a", AttemptUID: "att", RefreshAt: past}}); err != nil || n != 1 {
		t.Errorf("undo = %d, %v; want 1", n, err)
	}
	got, _ := s.Get(ctx, "a")
	if got.AttemptUID != "" || got.AttemptNo != 0 || !got.RefreshAt.Equal(past) || !got.DeadlineAt.IsZero() {
		t.Errorf("after undo %+v; want the row as before the start (refresh_at %v)", got.State, past)
	}
	// Save refuses a batch naming a row twice, and a row not locked in the
	// transaction (read by Get).
	err = s.InTx(ctx, func(tx *store.Tx) error {
		rows, err := tx.Lock(ctx, []string{"a"})
		if err != nil {
			return err
		}
		return tx.Save(ctx, []store.Row{rows["a"], rows["a"]})
	})
	if err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("Save of a duplicate uid: %v; want a refusal", err)
	}
	err = s.InTx(ctx, func(tx *store.Tx) error { return tx.Save(ctx, []store.Row{got}) })
	if err == nil || !strings.Contains(err.Error(), "not read under a lock") {
		t.Errorf("Save of a row read without a lock: %v; want a refusal", err)
	}
}

// The history has no foreign key (migration 004); deleting records deletes
// their history all the same, and only theirs.
func TestDeletingARecordDeletesItsHistory(t *testing.T) {
	ctx := context.Background()
	dbURL := testsvc.Database(t)
	s, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"a", "b"} {
		if _, err := s.Add(ctx, uid, def(), nil); err != nil {
			t.Fatal(err)
		}
		err := s.InTx(ctx, func(tx *store.Tx) error {
			return tx.RecordAttempts(ctx, []store.Attempt{{AttemptUID: "att-" + uid, UID: uid, AttemptNo: 1,
				FinishedAt: tx.Now(), Outcome: store.OutcomeSuccess}})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	db, err := sqlx.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "DELETE FROM bigtables WHERE uid = 'a'"); err != nil {
		t.Fatal(err)
	}
	if h, err := s.History(ctx, "a", 10); err != nil || len(h) != 0 {
		t.Errorf("history of the deleted record: %d attempts, %v; want none", len(h), err)
	}
	if h, err := s.History(ctx, "b", 10); err != nil || len(h) != 1 {
		t.Errorf("history of the kept record: %d attempts, %v; want 1", len(h), err)
	}
}

// A fresh server has no database of the name the URL gives: the scratch
// database is then created from the maintenance database "postgres".
func TestScratchDatabaseOnAFreshServer(t *testing.T) {
	ctx := context.Background()
	u, err := url.Parse(testsvc.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/bt_missing_" + testsvc.RandomID()
	dbURL, drop, err := store.ScratchDatabase(ctx, u.String(), "bt_test")
	if err != nil {
		t.Fatalf("ScratchDatabase with a missing database in the URL: %v", err)
	}
	defer drop()
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatalf("open the scratch database: %v", err)
	}
	st.Close()
}

// Save writes every state field, whether a batch has the field set on every
// row, on none (the column's array is sent as NULL) or on some.
func TestSaveRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	uids := []string{"a", "b", "c"}
	for _, uid := range uids {
		if _, err := s.Add(ctx, uid, def(), nil); err != nil {
			t.Fatal(err)
		}
	}
	at := func(min int) time.Time { return time.Date(2026, 3, 4, 5, min, 7, 123456000, time.UTC) }
	full := func(i int) (refresh.State, string) {
		return refresh.State{RefreshAt: at(i), AttemptUID: "att-" + uids[i], AttemptNo: 3 + i, StartedAt: at(10 + i),
			DeadlineAt: at(20 + i), FailingSince: at(30 + i), LastDelay: time.Duration(i+1) * time.Second,
			Disabled: true, DisabledReason: "reason " + uids[i]}, "status " + uids[i]
	}
	zero := func(int) (refresh.State, string) { return refresh.State{}, "" }
	disabled := func(int) (refresh.State, string) { return refresh.State{Disabled: true}, "" }
	mixed := func(i int) (refresh.State, string) {
		if i == 1 {
			return full(i)
		}
		return zero(i)
	}
	for _, step := range []struct {
		name  string
		batch func(int) (refresh.State, string)
	}{{"full", full}, {"zero", zero}, {"full again", full}, {"mixed", mixed}, {"disabled without reasons", disabled}} {
		name, batch := step.name, step.batch
		err := s.InTx(ctx, func(tx *store.Tx) error {
			rows, err := tx.Lock(ctx, uids)
			if err != nil {
				return err
			}
			var save []store.Row
			for i, uid := range uids {
				r := rows[uid]
				r.State, r.StatusMessage = batch(i)
				r.StatusAt = time.Time{}
				if r.StatusMessage != "" {
					r.StatusAt = at(40 + i)
				}
				save = append(save, r)
			}
			return tx.Save(ctx, save)
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// Every way of reading a row reads it alike: Get, List, Lock and,
		// for rows due or expired, ClaimDue (the transaction rolls back).
		listed, err := s.List(ctx, store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var locked map[string]store.Row
		claimed := map[string]store.Row{}
		s.InTx(ctx, func(tx *store.Tx) error {
			if locked, err = tx.Lock(ctx, uids); err != nil {
				t.Fatal(err)
			}
			rows, err := tx.ClaimDue(ctx, 10, tx.Now())
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				claimed[r.UID] = r
			}
			return errors.New("roll back")
		})
		for i, uid := range uids {
			got, err := s.Get(ctx, uid)
			if err != nil {
				t.Fatal(err)
			}
			want, status := batch(i)
			if got.State != want || got.StatusMessage != status || (status != "") != !got.StatusAt.IsZero() ||
				(status != "" && !got.StatusAt.Equal(at(40+i))) {
				t.Errorf("%s: %s read back %+v %q\nwant %+v %q", name, uid, got.State, got.StatusMessage, want, status)
			}
			if listed[i].UID != uid || listed[i].State != got.State || listed[i].StatusMessage != got.StatusMessage ||
				!listed[i].UpdatedAt.Equal(got.UpdatedAt) || !listed[i].CreatedAt.Equal(got.CreatedAt) {
				t.Errorf("%s: List read %s as %+v; Get as %+v", name, uid, listed[i], got)
			}
			if l := locked[uid]; l.State != got.State || l.StatusMessage != got.StatusMessage || l.Definition.InputURL != got.InputURL {
				t.Errorf("%s: Lock read %s as %+v; Get as %+v", name, uid, l, got)
			}
			if c, ok := claimed[uid]; ok && (c.State != got.State || c.StatusMessage != got.StatusMessage) {
				t.Errorf("%s: ClaimDue read %s as %+v; Get as %+v", name, uid, c, got)
			}
		}
		if st, _ := batch(1); st.DeadlineAt.Before(time.Now()) && !st.DeadlineAt.IsZero() && len(claimed) == 0 {
			t.Errorf("%s: ClaimDue claimed nothing; the check of its reads did not run", name)
		}
	}
}
