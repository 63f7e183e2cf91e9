package poller_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/jmoiron/sqlx"
)

// within fails the test if fn has not returned after limit: it guards tests
// whose failure mode is waiting forever.
func within(t *testing.T, limit time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s: still waiting after %v", what, limit)
	}
}

// PostgreSQL text cannot hold NUL: a result carrying one in a uid is
// dead-lettered, in a text it is cleaned, and neither blocks its batch.
func TestPoisonedResultsNeverBlockABatch(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	att := start(t, e, refresh.DefaultPolicy(), "a", "b", "c", "d")
	no := false
	push(t, e,
		result("a\x00", att["a"], protocol.Success, ""),
		result("a", att["a"]+"\x00", protocol.Success, ""),
		string(protocol.Result{BigTableUID: "b", AttemptUID: att["b"], Type: protocol.Failure, Message: "boom\x00",
			Retryable: &no, UserFriendlyReason: "\x00bad"}.Encode()),
		result("c", att["c"], protocol.Status, "50\x00%"),
		result("d", att["d"], protocol.Success, ""),
	)
	p := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	drainAll(t, e, p)
	if st := p.Stats(); st.Applied != 3 || st.Dead != 2 {
		t.Errorf("stats %+v; want 3 applied, 2 dead", st)
	}
	for _, d := range deadLetters(t, e) {
		if !strings.Contains(d.Reason, "NUL character") {
			t.Errorf("dead letter reason %q; want the NUL named", d.Reason)
		}
	}
	b, _ := e.st.Get(ctx, "b")
	c, _ := e.st.Get(ctx, "c")
	d, _ := e.st.Get(ctx, "d")
	if !b.Disabled || b.DisabledReason != "\uFFFDbad" || c.StatusMessage != "50\uFFFD%" || d.Running() {
		t.Errorf("b %+v, c status %q, d running %v; want the cleaned texts applied", b.State, c.StatusMessage, d.Running())
	}
	if h, _ := e.st.History(ctx, "b", 1); len(h) != 1 || h[0].Message != "boom\uFFFD" {
		t.Errorf("history of b %+v", h)
	}
}

// Whatever the database refuses in a value (here a check constraint; a
// database in another encoding refuses characters it cannot represent),
// the batch is applied in halves down to the culprit, which is dead-lettered
// with the database's reason; the rest is applied.
func TestAValueTheDatabaseRefusesIsDeadLetteredAndTheRestApplied(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	uids := make([]string, 10)
	for i := range uids {
		uids[i] = fmt.Sprintf("r%d", i)
	}
	att := start(t, e, refresh.DefaultPolicy(), uids...)
	exec(t, e.db, `ALTER TABLE bigtable_attempts ADD CONSTRAINT no_poison CHECK (message NOT LIKE '%poison%')`)
	for _, uid := range uids {
		msg := "fine"
		if uid == "r4" {
			msg = "poison"
		}
		push(t, e, result(uid, att[uid], protocol.Success, msg))
	}
	p := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	within(t, 30*time.Second, "a batch the database refuses", func() {
		for range 3 { // the batch is done in one call; more calls find nothing
			if _, err := p.Once(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	})
	if st := p.Stats(); st.Applied != 9 || st.Dead != 1 || st.Batches != 1 {
		t.Errorf("stats %+v; want 9 applied and 1 dead in one batch", st)
	}
	dead := deadLetters(t, e)
	if len(dead) != 1 || !strings.Contains(dead[0].Reason, "no_poison") || !strings.Contains(dead[0].Reason, "23514") || !strings.Contains(dead[0].Raw, "poison") {
		t.Errorf("dead letters %+v; want the poisoned result with the database's reason", dead)
	}
	if r4, _ := e.st.Get(ctx, "r4"); !r4.Running() {
		t.Error("the refused result changed its record")
	}
	if r5, _ := e.st.Get(ctx, "r5"); r5.Running() {
		t.Error("a good result after the refused one was not applied")
	}
}

// A poller frozen inside its transaction (SIGSTOP, a VM pause) costs only its
// own batch: another poller skips the rows it holds, applies the rest at
// once and hands the skipped results back; the database ends the frozen
// transaction after TxTimeout, well inside the lease, and then the handed
// back and the frozen batch are both applied.
func TestAFrozenPollerCostsOnlyItsOwnBatch(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	att := start(t, e, refresh.DefaultPolicy(), "a", "b", "c")
	push(t, e, result("a", att["a"], protocol.Success, "frozen"))

	frozen := poller.New(e.st, e.q, poller.Config{Lease: 1500 * time.Millisecond, Logger: quiet()})
	entered, thaw := make(chan struct{}), make(chan struct{})
	var once sync.Once
	poller.SetHooks(frozen, func() { once.Do(func() { close(entered) }); <-thaw }, nil)
	frozenErr := make(chan error, 1)
	go func() { _, err := frozen.Once(ctx); frozenErr <- err }()
	<-entered // the frozen poller holds a's row, idle in its transaction

	push(t, e, result("a", att["a"], protocol.Status, "50%"), result("b", att["b"], protocol.Success, ""),
		result("c", att["c"], protocol.Success, ""))
	other := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	within(t, 10*time.Second, "the other poller, behind the frozen one's locks", func() {
		if _, err := other.Once(ctx); err != nil {
			t.Error(err)
		}
	})
	if st := other.Stats(); st.Applied != 2 || st.HandedBack != 1 {
		t.Errorf("other's stats %+v; want b and c applied, a's status handed back", st)
	}
	for _, uid := range []string{"b", "c"} {
		if r, _ := e.st.Get(ctx, uid); r.Running() {
			t.Errorf("%s still running behind the frozen poller", uid)
		}
	}

	// The database ends the frozen transaction (idle longer than TxTimeout).
	within(t, 10*time.Second, "the frozen transaction's end", func() {
		for {
			var n int
			e.db.Get(&n, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'`)
			if n == 0 {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	close(thaw)
	if err := <-frozenErr; err == nil {
		t.Fatal("the frozen poller committed after its transaction was ended")
	}
	drainAll(t, e, other)  // a's status, handed back
	drainAll(t, e, frozen) // the frozen poller's own batch, once it thaws
	a, _ := e.st.Get(ctx, "a")
	if a.Running() || a.StatusMessage != "50%" {
		t.Errorf("a: running %v status %q; want its success and status applied", a.Running(), a.StatusMessage)
	}
	if h, _ := e.st.History(ctx, "a", 10); len(h) != 1 || h[0].Message != "frozen" {
		t.Errorf("history of a %+v; want the frozen poller's success once", h)
	}
}

// A poller paused after its commit and past its lease finds its batch
// adopted: its acknowledgement does nothing, and it does not count the dead
// letters it did not write; the adopter replays the batch.
func TestPollerPausedPastItsLeaseDoesNotAcknowledgeTheAdoptedBatch(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	att := start(t, e, refresh.DefaultPolicy(), "a")
	push(t, e, result("a", att["a"], protocol.Success, ""), "garbage")

	paused := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	entered, resume := make(chan struct{}), make(chan struct{})
	poller.SetHooks(paused, nil, func() error { close(entered); <-resume; return nil })
	pausedErr := make(chan error, 1)
	go func() { _, err := paused.Once(ctx); pausedErr <- err }()
	<-entered

	e.clock.add(16 * time.Second)
	adopter := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	if n, err := e.q.RecoverExpired(ctx, adopter.ID()); err != nil || n != 2 {
		t.Fatalf("adopted %d, %v; want 2", n, err)
	}
	drainAll(t, e, adopter)
	close(resume)
	if err := <-pausedErr; err != nil {
		t.Fatal(err)
	}
	if st := paused.Stats(); st.LostAcks != 1 || st.Dead != 0 || st.Batches != 0 || st.Applied != 1 {
		t.Errorf("paused poller's stats %+v; want 1 applied, 1 lost ack, no dead letter counted", st)
	}
	if st := adopter.Stats(); st.Stale != 1 || st.Dead != 1 {
		t.Errorf("adopter's stats %+v; want the replay stale and the garbage dead", st)
	}
	if dead := deadLetters(t, e); len(dead) != 1 {
		t.Errorf("%d dead letters; want 1", len(dead))
	}
}

// Transactions say READ COMMITTED: a database whose default is repeatable
// read must not fail concurrent batches with serialization errors (40001).
func TestTransactionsAreReadCommittedWhateverTheDefault(t *testing.T) {
	e := setupWith(t, func(db *sqlx.DB) {
		var name string
		if err := db.Get(&name, "SELECT current_database()"); err != nil {
			t.Fatal(err)
		}
		exec(t, db, `ALTER DATABASE "`+name+`" SET default_transaction_isolation = 'repeatable read'`)
	})
	var level string
	if err := e.db.Get(&level, "SHOW default_transaction_isolation"); err != nil || level != "repeatable read" {
		t.Fatalf("default isolation %q, %v", level, err)
	}
	uids := make([]string, 100)
	for i := range uids {
		uids[i] = fmt.Sprintf("r%03d", i)
	}
	att := start(t, e, refresh.DefaultPolicy(), uids...)
	for _, uid := range uids {
		push(t, e, result(uid, att[uid], protocol.Status, "1"), result(uid, att[uid], protocol.Status, "2"),
			result(uid, att[uid], protocol.Success, ""))
	}
	p1 := poller.New(e.st, e.q, poller.Config{Batch: 5, Logger: quiet()})
	p2 := poller.New(e.st, e.q, poller.Config{Batch: 7, Logger: quiet()})
	var wg sync.WaitGroup
	for _, p := range []*poller.Poller{p1, p2} {
		wg.Go(func() { drainAll(t, e, p) })
	}
	wg.Wait()
	if s1, s2 := p1.Stats(), p2.Stats(); s1.Applied+s2.Applied+s1.Stale+s2.Stale != 300 {
		t.Errorf("stats %+v and %+v; want 300 results applied or stale", s1, s2)
	}
	for _, uid := range uids {
		if r, _ := e.st.Get(context.Background(), uid); r.Running() {
			t.Errorf("%s still running", uid)
		}
	}
}

// A batch replayed after its commit (its acknowledgement was lost, then its
// poller died) must not re-apply an older progress report over a newer one
// applied in the meantime.
func TestReplayedBatchDoesNotOverwriteANewerStatus(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	att := start(t, e, refresh.DefaultPolicy(), "a")
	push(t, e, result("a", att["a"], protocol.Status, "10%"))
	first := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	poller.SetHooks(first, nil, func() error { return errors.New("the acknowledgement's reply was lost") })
	if _, err := first.Once(ctx); err == nil {
		t.Fatal("acknowledged")
	}
	e.clock.add(time.Second)
	push(t, e, result("a", att["a"], protocol.Status, "50%"))
	second := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	drainAll(t, e, second)
	if r, _ := e.st.Get(ctx, "a"); r.StatusMessage != "50%" {
		t.Fatalf("status %q; want 50%%", r.StatusMessage)
	}
	e.clock.add(16 * time.Second) // the first poller died: its batch is adopted and replayed
	if n, _ := e.q.RecoverExpired(ctx, second.ID()); n != 1 {
		t.Fatalf("adopted %d; want 1", n)
	}
	drainAll(t, e, second)
	if r, _ := e.st.Get(ctx, "a"); r.StatusMessage != "50%" {
		t.Errorf("status %q after the replay; want 50%% (the newer one)", r.StatusMessage)
	}
	if st := second.Stats(); st.Stale != 1 {
		t.Errorf("stats %+v; want the replayed status stale", st)
	}
}

// Two processes with one poller id would acknowledge each other's batches:
// a poller whose id is held by a live lease refuses to start.
func TestPollerWithAnIDInUseRefusesToStart(t *testing.T) {
	e := setup(t)
	if _, err := e.q.Heartbeat(context.Background(), queue.Lease{ID: "dup", Instance: "another process", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := poller.New(e.st, e.q, poller.Config{ID: "dup", Logger: quiet()}).Run(ctx)
	if !errors.Is(err, queue.ErrIDInUse) || ctx.Err() != nil {
		t.Errorf("Run = %v; want a refusal (ErrIDInUse) at once", err)
	}
}

// The dead-letter list is capped: the oldest are dropped and counted.
func TestDeadLetterListIsCapped(t *testing.T) {
	e := setup(t)
	push(t, e, "g1", "g2", "g3", "g4", "g5")
	p := poller.New(e.st, e.q, poller.Config{DeadCap: 2, Logger: quiet()})
	drainAll(t, e, p)
	dead := deadLetters(t, e)
	if len(dead) != 2 || dead[0].Raw != "g4" || dead[1].Raw != "g5" {
		t.Errorf("dead letters %+v; want the newest two", dead)
	}
	if st := p.Stats(); st.Dead != 5 || st.DeadDropped != 3 {
		t.Errorf("stats %+v; want 5 dead, 3 dropped", st)
	}
	if n, _ := e.q.DeadDropped(context.Background()); n != 3 {
		t.Errorf("dropped counter %d; want 3", n)
	}
}
