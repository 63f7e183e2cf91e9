package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bigtables/bigtables/store"
	"github.com/lib/pq"
)

// LockOrSkip never waits: rows another transaction holds are reported busy,
// unknown uids are in neither list.
func TestLockOrSkip(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	for _, uid := range []string{"a", "b", "c"} {
		if _, err := s.Add(ctx, uid, def(), nil); err != nil {
			t.Fatal(err)
		}
	}
	held, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- s.InTx(ctx, func(tx *store.Tx) error {
			_, err := tx.Lock(ctx, []string{"b"})
			close(held)
			<-release
			return err
		})
	}()
	<-held
	err := s.InTx(ctx, func(tx *store.Tx) error {
		rows, busy, err := tx.LockOrSkip(ctx, []string{"c", "ghost", "b", "a"})
		if err != nil {
			return err
		}
		if len(rows) != 2 || rows["a"].UID != "a" || rows["c"].UID != "c" || !slices.Equal(busy, []string{"b"}) {
			t.Errorf("LockOrSkip = %v rows, busy %v; want a and c, b busy", len(rows), busy)
		}
		return nil
	})
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// InTxWith bounds lock waits: a transaction behind a holder fails with
// 55P03 instead of waiting, and such an error is not blamed on the values.
func TestInTxWithBoundsLockWaits(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	if _, err := s.Add(ctx, "a", def(), nil); err != nil {
		t.Fatal(err)
	}
	held, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- s.InTx(ctx, func(tx *store.Tx) error {
			_, err := tx.Lock(ctx, []string{"a"})
			close(held)
			<-release
			return err
		})
	}()
	<-held
	err := s.InTxWith(ctx, store.TxOptions{LockTimeout: 50 * time.Millisecond, IdleTimeout: time.Second, StatementTimeout: time.Second},
		func(tx *store.Tx) error {
			_, err := tx.Lock(ctx, []string{"a"})
			return err
		})
	close(release)
	<-done
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) || pqErr.Code != "55P03" || store.Refused(err) {
		t.Errorf("waiting behind a holder: %v; want lock_not_available (55P03), not a refusal", err)
	}
	if !store.Refused(&pq.Error{Code: "22021"}) || !store.Refused(&pq.Error{Code: "23514"}) || store.Refused(&pq.Error{Code: "40001"}) ||
		store.Refused(errors.New("connection reset")) {
		t.Error("Refused classifies SQLSTATE classes wrongly")
	}
}

// Every transaction runs without JIT compilation, whatever the server's
// setting: a planner estimate over jit_above_cost would compile the claim
// for longer than it runs.
func TestTransactionsRunWithoutJIT(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	for _, opt := range []store.TxOptions{{}, {LockTimeout: time.Second, StatementTimeout: time.Second}} {
		err := s.InTxWith(ctx, opt, func(tx *store.Tx) error {
			v, err := tx.Setting(ctx, "jit")
			if err == nil && v != "off" {
				t.Errorf("jit = %q in a transaction with %+v; want off", v, opt)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
