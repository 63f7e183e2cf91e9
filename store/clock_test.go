package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// With an injected clock every statement that used PostgreSQL's now() uses
// it instead: a record added "now" is due at the clock's time, claims,
// saves, undos and counts judge by it.
func TestInjectedClockReplacesNow(t *testing.T) {
	ctx := context.Background()
	clk := &clock{now: time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC)}
	s := open(t).WithClock(clk.Now)
	want := clk.Now().Truncate(time.Microsecond)
	r, err := s.Add(ctx, "a", def(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.RefreshAt.Equal(want) || !r.CreatedAt.Equal(want) || !r.UpdatedAt.Equal(want) {
		t.Errorf("added at refresh_at %v, created %v, updated %v; want the clock's %v", r.RefreshAt, r.CreatedAt, r.UpdatedAt, want)
	}
	if now, _ := s.Now(ctx); !now.Equal(want) {
		t.Errorf("Now = %v; want %v", now, want)
	}
	// A record due in the database's far future is due by the clock.
	later := want.Add(time.Minute)
	if _, err := s.Add(ctx, "b", def(), &later); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Count(ctx); err != nil || c.Due != 1 {
		t.Errorf("count = %+v, %v; want 1 due by the clock", c, err)
	}
	clk.Add(2 * time.Minute)
	var deadline time.Time
	err = s.InTx(ctx, func(tx *store.Tx) error {
		if !tx.Now().Equal(clk.Now().Truncate(time.Microsecond)) {
			t.Errorf("tx.Now = %v; want the clock's %v", tx.Now(), clk.Now())
		}
		rows, err := tx.ClaimDue(ctx, 10, tx.Now())
		if err != nil {
			return err
		}
		if len(rows) != 2 {
			t.Fatalf("claimed %d rows; want both, due by the clock", len(rows))
		}
		for i := range rows {
			rows[i].State, err = refresh.Rules{Policy: refresh.DefaultPolicy()}.Start(rows[i].State, tx.Now(), "att-"+rows[i].UID)
			if err != nil {
				return err
			}
		}
		deadline = rows[0].DeadlineAt
		return tx.Save(ctx, rows)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, "a"); !got.UpdatedAt.Equal(clk.Now().Truncate(time.Microsecond)) {
		t.Errorf("saved at %v; want the clock's %v", got.UpdatedAt, clk.Now())
	}
	// Crossing the deadline takes no sleep: the clock moves past it.
	claimExpired := func() int {
		var n int
		s.InTx(ctx, func(tx *store.Tx) error {
			rows, err := tx.ClaimDue(ctx, 10, tx.Now())
			n = len(rows)
			return err
		})
		return n
	}
	if n := claimExpired(); n != 0 {
		t.Errorf("%d rows claimed before the deadline", n)
	}
	clk.now = deadline
	if n := claimExpired(); n != 2 {
		t.Errorf("%d rows claimed at the deadline; want 2", n)
	}
	clk.Add(time.Second)
	if n, err := s.UndoStarts(ctx, []store.Started{{UID: "a", AttemptUID: "att-a", RefreshAt: want}}); err != nil || n != 1 {
		t.Fatalf("undo = %d, %v", n, err)
	}
	if got, _ := s.Get(ctx, "a"); !got.UpdatedAt.Equal(clk.Now().Truncate(time.Microsecond)) {
		t.Errorf("undone at %v; want the clock's %v", got.UpdatedAt, clk.Now())
	}
}

// ClaimDue times out only up to the given time: an attempt past its
// deadline but after it is neither returned nor locked, and
// CountExpiredAfter reports it.
func TestClaimDueHoldsTimeoutsAfterTheCutoff(t *testing.T) {
	ctx := context.Background()
	clk := &clock{now: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := open(t).WithClock(clk.Now)
	for _, uid := range []string{"early", "late"} {
		if _, err := s.Add(ctx, uid, def(), nil); err != nil {
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
		clk.Add(time.Minute)
	}
	early, _ := s.Get(ctx, "early")
	clk.Add(2 * time.Hour) // both deadlines (1 h) passed
	err := s.InTx(ctx, func(tx *store.Tx) error {
		rows, err := tx.ClaimDue(ctx, 10, early.DeadlineAt)
		if err != nil {
			return err
		}
		if len(rows) != 1 || rows[0].UID != "early" {
			t.Errorf("claimed %d rows (%v); want only the attempt whose deadline is at the cutoff", len(rows), rows)
		}
		n, err := tx.CountExpiredAfter(ctx, early.DeadlineAt, 10)
		if err != nil {
			return err
		}
		if n != 1 {
			t.Errorf("held = %d; want 1", n)
		}
		// The held row is not locked: another transaction takes it at once.
		return s.InTx(ctx, func(tx2 *store.Tx) error {
			rows, err := tx2.ClaimDue(ctx, 10, tx2.Now())
			if len(rows) != 1 || rows[0].UID != "late" {
				t.Errorf("second claim got %v; want the held row, unlocked", rows)
			}
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}
