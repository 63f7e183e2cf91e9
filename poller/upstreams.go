package poller

import (
	"context"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// observation is an attempt a result ended, as its upstream's breaker
// counts it.
type observation struct {
	upstream string
	outcome  upstream.Outcome
}

// observe classifies an applied success or failure: a failure that was
// final because of the record itself (the worker said not retryable, or
// the policy's on_kind makes its kind final) frees its place without
// counting against the upstream (docs/design.md, U3).
func observe(name string, r protocol.Result, d refresh.Decision) observation {
	switch {
	case r.Type == protocol.Success:
		return observation{name, upstream.Succeeded}
	case r.NotRetryable() || d == refresh.NotRetryable:
		return observation{name, upstream.Uncounted}
	}
	return observation{name, upstream.Failed}
}

// observeAll applies the observations, in batch order, to the locked
// upstreams and returns the breakers' transitions.
func observeAll(ups map[string]*upstream.Upstream, obs []observation, now time.Time) []upstream.Transition {
	var out []upstream.Transition
	for _, o := range obs {
		if u := ups[o.upstream]; u != nil {
			if tr := u.Observe(o.outcome, now); tr != nil {
				out = append(out, *tr)
			}
		}
	}
	return out
}

// applyUpstreams updates the breakers of the batch's upstreams in the
// transaction that applies the results: locked after the records' rows, in
// name order, so every poller and scheduler sees one state (docs/design.md,
// U2). The breakers' transitions join the plan's events, written in the
// same transaction.
func (p *Poller) applyUpstreams(ctx context.Context, tx *store.Tx, plan *batchPlan) error {
	if len(plan.observed) == 0 {
		return nil
	}
	names := make([]string, len(plan.observed))
	for i, o := range plan.observed {
		names[i] = o.upstream
	}
	ups, err := tx.LockUpstreams(ctx, names)
	if err != nil {
		return err
	}
	plan.breakerEvents = observeAll(ups, plan.observed, tx.Now())
	if err := tx.SaveUpstreams(ctx, ups); err != nil {
		return err
	}
	events, err := tx.BreakerEvents(ctx, plan.breakerEvents)
	if err != nil {
		return err
	}
	// Written here, not with the records' events: the upstreams are
	// applied last, so their rows are held only until the commit.
	if err := tx.WriteEvents(ctx, events); err != nil {
		return err
	}
	plan.events = append(plan.events, events...)
	return nil
}
