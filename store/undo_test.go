package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/jmoiron/sqlx"
)

// An undo locks its rows in uid order, as pollers do, so the two cannot
// deadlock: here a poller holds "a" and then wants "b", while the undo is
// given "b" before "a".
func TestUndoLocksInUidOrder(t *testing.T) {
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
	past := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	// b is written first, so whichever order an unordered statement takes
	// (the array's or the table's), it reaches b first.
	for _, uid := range []string{"b", "a"} {
		if _, err := s.Add(ctx, uid, def(), &past); err != nil {
			t.Fatal(err)
		}
		err := s.InTx(ctx, func(tx *store.Tx) error {
			rows, err := tx.Lock(ctx, []string{uid})
			if err != nil {
				return err
			}
			r := rows[uid]
			r.State, err = refresh.Rules{Policy: refresh.DefaultPolicy()}.Start(r.State, tx.Now(), "att-"+uid)
			if err != nil {
				return err
			}
			return tx.Save(ctx, []store.Row{r})
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
	waiting := func(n int) {
		t.Helper()
		for range 500 {
			var got int
			if err := db.GetContext(ctx, &got, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`); err != nil {
				t.Fatal(err)
			}
			if got >= n {
				return
			}
			time.Sleep(10 * time.Millisecond) // polling for a lock wait, not crossing a deadline
		}
		t.Fatalf("no transaction waits on a lock")
	}

	holding, proceed := make(chan struct{}), make(chan struct{})
	pollerErr := make(chan error, 1)
	go func() {
		pollerErr <- s.InTx(ctx, func(tx *store.Tx) error {
			if _, err := tx.Lock(ctx, []string{"a"}); err != nil {
				return err
			}
			close(holding)
			<-proceed
			_, err := tx.Lock(ctx, []string{"b"})
			return err
		})
	}()
	<-holding
	undoErr := make(chan error, 1)
	go func() {
		_, err := s.UndoStarts(ctx, []store.Started{
			{UID: "b", AttemptUID: "att-b", RefreshAt: past}, {UID: "a", AttemptUID: "att-a", RefreshAt: past}})
		undoErr <- err
	}()
	waiting(1) // the undo waits for a
	close(proceed)
	if err := <-pollerErr; err != nil {
		t.Errorf("poller: %v", err)
	}
	if err := <-undoErr; err != nil {
		t.Errorf("undo: %v", err)
	}
	for _, uid := range []string{"a", "b"} {
		if r, _ := s.Get(ctx, uid); r.Running() {
			t.Errorf("%s still runs after the undo", uid)
		}
	}
}
