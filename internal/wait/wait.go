// Package wait holds the waiting every loop of bigtables shares: a sleep
// that ends when its context does, and the backoff the processes use to
// reach PostgreSQL and Redis at start. It imports only the standard
// library.
package wait

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done; then it returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Backoff retries an operation with waits that double from First up to Max.
type Backoff struct {
	First, Max time.Duration
	// Sleep waits between tries; nil means the package's Sleep. Tests pass
	// one that does not wait.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Retry calls try until it returns nil, a permanent error (for which
// permanent returns true; permanent may be nil) or ctx is done. After each
// failure that will be retried it calls failed with the number of the try,
// its error and the wait before the next one, so the caller can log it. It
// returns nil, the permanent error, or ctx's error.
func (b Backoff) Retry(ctx context.Context, try func(context.Context) error, permanent func(error) bool,
	failed func(n int, err error, wait time.Duration)) error {
	sleep := b.Sleep
	if sleep == nil {
		sleep = Sleep
	}
	d := max(b.First, time.Millisecond)
	for n := 1; ; n++ {
		err := try(ctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case permanent != nil && permanent(err):
			return err
		}
		if failed != nil {
			failed(n, err, d)
		}
		if err := sleep(ctx, d); err != nil {
			return err
		}
		d = min(2*d, max(b.Max, b.First))
	}
}
