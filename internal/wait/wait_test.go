package wait

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a cancelled context = %v", err)
	}
	if err := Sleep(context.Background(), time.Microsecond); err != nil {
		t.Errorf("Sleep = %v", err)
	}
}

func TestRetryBacksOffUntilItWorks(t *testing.T) {
	var waits []time.Duration
	b := Backoff{First: time.Second, Max: 5 * time.Second, Sleep: func(_ context.Context, d time.Duration) error {
		waits = append(waits, d)
		return nil
	}}
	tries, logged := 0, 0
	err := b.Retry(context.Background(), func(context.Context) error {
		if tries++; tries < 6 {
			return errors.New("connection refused")
		}
		return nil
	}, nil, func(n int, err error, wait time.Duration) {
		if logged++; n != logged || err == nil || wait <= 0 {
			t.Errorf("failed(%d, %v, %v) at log line %d", n, err, wait, logged)
		}
	})
	if err != nil || tries != 6 || logged != 5 {
		t.Fatalf("Retry = %v after %d tries, %d log lines", err, tries, logged)
	}
	if want := []time.Duration{1e9, 2e9, 4e9, 5e9, 5e9}; !slices.Equal(waits, want) {
		t.Errorf("waits %v; want %v", waits, want)
	}
}

func TestRetryStopsOnPermanentErrorsAndCancel(t *testing.T) {
	bad := errors.New("bad URL")
	b := Backoff{First: time.Second, Sleep: func(context.Context, time.Duration) error { return nil }}
	tries := 0
	err := b.Retry(context.Background(), func(context.Context) error { tries++; return bad },
		func(err error) bool { return errors.Is(err, bad) }, nil)
	if !errors.Is(err, bad) || tries != 1 {
		t.Errorf("permanent error: %v after %d tries", err, tries)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Sleep = func(ctx context.Context, d time.Duration) error { cancel(); return Sleep(ctx, d) }
	err = b.Retry(ctx, func(context.Context) error { return errors.New("refused") }, nil, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
