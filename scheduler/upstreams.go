package scheduler

import (
	"context"
	"time"

	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// upstreamPlan is what the upstreams' breakers and limits decided in a
// tick (docs/design.md, "Upstreams").
type upstreamPlan struct {
	// park are the due rows held back by an open breaker: parked, with no
	// attempt burned and their attempt_no and refresh_at kept.
	park []string
	// waiting counts the due rows a limit (in flight, rate) held back:
	// they stay due and are claimed again later.
	waiting int
	// breakerEvents are the breakers' transitions: the tick writes their
	// events (store.BreakerEvents) in its transaction and logs them.
	breakerEvents []upstream.Transition
	// released counts the parked rows released (probes, or after a close).
	released int
}

// lockUpstreams locks the upstreams whose breakers and limits the tick
// consults or changes: the waking ones, those of the claimed rows that
// may hold a start back (tx.GuardedUpstreams), and those of the rows whose
// running attempt may time out (a timeout counts as a failure). The
// upstreams of the other rows (closed, no limits) are left out: every due
// row of theirs starts and their state does not change, so locking them
// would only make every tick and poller batch of one busy upstream wait
// for each other.
func lockUpstreams(ctx context.Context, tx *store.Tx, rows []store.Row, waking []string) (map[string]*upstream.Upstream, error) {
	// tx.LockUpstreams drops the repeated names.
	seen := map[string]bool{}
	var due, lock []string
	for _, r := range rows {
		if !seen[r.Upstream] {
			seen[r.Upstream] = true
			due = append(due, r.Upstream)
		}
		if r.Running() {
			lock = append(lock, r.Upstream)
		}
	}
	guarded, err := tx.GuardedUpstreams(ctx, due)
	if err != nil {
		return nil, err
	}
	lock = append(append(lock, guarded...), waking...)
	return tx.LockUpstreams(ctx, lock)
}

// admit asks the row's upstream whether the due row starts now; if not,
// the row is parked (open breaker) or left due (a limit): docs/design.md,
// U5, U10, U11.
func (p *upstreamPlan) admit(ups map[string]*upstream.Upstream, row store.Row, now time.Time) bool {
	u := ups[row.Upstream]
	if u == nil {
		return true
	}
	v, tr := u.Admit(now)
	p.transition(tr)
	switch v {
	case upstream.Park:
		p.park = append(p.park, row.UID)
	case upstream.Wait:
		p.waiting++
	}
	return v == upstream.Start
}

// observe counts a timeout as a failure of the row's upstream
// (docs/design.md, U3).
func (p *upstreamPlan) observe(ups map[string]*upstream.Upstream, name string, now time.Time) {
	if u := ups[name]; u != nil {
		p.transition(u.Observe(upstream.Failed, now))
	}
}

func (p *upstreamPlan) transition(tr *upstream.Transition) {
	if tr != nil {
		p.breakerEvents = append(p.breakerEvents, *tr)
	}
}

// wake turns the open breakers whose cool-down is over half-open and
// releases their probes, and releases the next share of the parked rows of
// closed breakers, at most batch per upstream. The released rows are due at
// once and are claimed by the next tick (docs/design.md, U6, U8).
func (p *upstreamPlan) wake(ctx context.Context, tx *store.Tx, ups map[string]*upstream.Upstream, names []string, now time.Time, batch int) error {
	for _, name := range names {
		u := ups[name]
		if u == nil {
			continue
		}
		n, tr := u.Wake(now, batch)
		p.transition(tr)
		if n == 0 {
			continue
		}
		got, left, err := tx.Unpark(ctx, name, n)
		if err != nil {
			return err
		}
		u.Released(left)
		p.released += got
	}
	return nil
}

// logBreakers logs the breakers' events of a committed tick.
func (s *Scheduler) logBreakers(events []store.Event) {
	for _, e := range events {
		if e.Type.Breaker() {
			msg, args := e.BreakerLog()
			s.log.Warn(msg, args...)
		}
	}
}
