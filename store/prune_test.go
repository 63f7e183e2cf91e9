package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bigtables/bigtables/store"
)

// history records n attempts of uid, one a minute, the last one finishing at
// end.
func history(t testing.TB, s *store.Store, uid string, n int, end time.Time) {
	t.Helper()
	ctx := context.Background()
	var list []store.Attempt
	for i := range n {
		at := end.Add(-time.Duration(n-1-i) * time.Minute)
		list = append(list, store.Attempt{AttemptUID: fmt.Sprintf("%s-%05d", uid, i), UID: uid, AttemptNo: i + 1,
			StartedAt: at.Add(-time.Second), FinishedAt: at, Outcome: store.OutcomeFailure})
	}
	if err := s.InTx(ctx, func(tx *store.Tx) error { return tx.RecordAttempts(ctx, list) }); err != nil {
		t.Fatal(err)
	}
}

func historyLen(t *testing.T, s *store.Store, uid string) int {
	t.Helper()
	h, err := s.History(context.Background(), uid, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	return len(h)
}

func TestPruneAttemptsOlder(t *testing.T) {
	ctx := context.Background()
	clk := &clock{now: time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)}
	s := open(t).WithClock(clk.Now)
	for _, uid := range []string{"a", "b"} {
		if _, err := s.Add(ctx, uid, def(), nil); err != nil {
			t.Fatal(err)
		}
	}
	history(t, s, "a", 30, clk.Now())                 // 12:00 back to 11:31
	history(t, s, "b", 30, clk.Now().Add(-time.Hour)) // 11:00 back to 10:31
	// Older than 45 minutes: b's 30 and a's none (11:31 is 29 minutes ago).
	// At most 20 a step, oldest first.
	if n, err := s.PruneAttemptsOlder(ctx, 45*time.Minute, 20); err != nil || n != 20 {
		t.Fatalf("first step deleted %d, %v; want the limit of 20", n, err)
	}
	h, _ := s.History(ctx, "b", 100)
	if len(h) != 10 || h[len(h)-1].FinishedAt.Before(clk.Now().Add(-70*time.Minute)) {
		t.Errorf("b keeps %d attempts, oldest %v; want its 10 newest", len(h), h[len(h)-1].FinishedAt)
	}
	if n, err := s.PruneAttemptsOlder(ctx, 45*time.Minute, 20); err != nil || n != 10 {
		t.Fatalf("second step deleted %d, %v; want the 10 left", n, err)
	}
	if n, _ := s.PruneAttemptsOlder(ctx, 45*time.Minute, 20); n != 0 {
		t.Errorf("third step deleted %d; want none", n)
	}
	if got := historyLen(t, s, "a"); got != 30 {
		t.Errorf("a has %d attempts; want its 30, all younger than 45 minutes", got)
	}
	clk.Add(time.Hour) // now a's are 60-89 minutes old
	if n, _ := s.PruneAttemptsOlder(ctx, 45*time.Minute, 100); n != 30 {
		t.Errorf("after an hour deleted %d; want a's 30", n)
	}
}

func TestPruneAttemptsBeyond(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	end := time.Now().UTC().Truncate(time.Microsecond)
	sizes := map[string]int{"r1": 3, "r2": 12, "r3": 25, "r4": 7, "r5": 0}
	for _, uid := range []string{"r1", "r2", "r3", "r4", "r5"} {
		if _, err := s.Add(ctx, uid, def(), nil); err != nil {
			t.Fatal(err)
		}
		if sizes[uid] > 0 {
			history(t, s, uid, sizes[uid], end)
		}
	}
	// Keep 5 per record, 2 records and at most 10 rows a step.
	type step struct {
		deleted int
		next    string
	}
	var steps []step
	after := ""
	for range 10 {
		n, next, err := s.PruneAttemptsBeyond(ctx, 5, after, 2, 10)
		if err != nil {
			t.Fatal(err)
		}
		steps = append(steps, step{n, next})
		after = next
		if next == "" {
			break
		}
	}
	// r1, r2: 7 deleted, on to r2. r3, r4: 20 + 2 beyond, 10 a step, so r2
	// is the cursor twice more, then 2 and on to r4. r5: the end.
	want := []step{{7, "r2"}, {10, "r2"}, {10, "r2"}, {2, "r4"}, {0, ""}}
	if fmt.Sprint(steps) != fmt.Sprint(want) {
		t.Errorf("steps %v; want %v", steps, want)
	}
	for uid, n := range sizes {
		h, _ := s.History(ctx, uid, 100)
		if len(h) != min(n, 5) {
			t.Errorf("%s keeps %d attempts; want %d", uid, len(h), min(n, 5))
		}
		for i, a := range h {
			if want := fmt.Sprintf("%s-%05d", uid, n-1-i); a.AttemptUID != want {
				t.Errorf("%s keeps %s at %d; want its newest, %s", uid, a.AttemptUID, i, want)
			}
		}
	}
}
