package poller

import (
	"errors"
	"fmt"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// item is a decoded result and its place in the batch.
type item struct {
	idx int // index in the drained batch, to hand it back
	raw string
	res protocol.Result
}

// rejected is a result that cannot be applied, and why.
type rejected struct {
	raw, reason string
	typ         string // the result's type, or TypeInvalid when it did not decode
}

// staleResult is a result that changes nothing, and why.
type staleResult struct {
	res     protocol.Result
	current string // the record's running attempt
	why     error
}

// errOlderStatus means a progress report was drained before the status the
// record holds (a batch replayed or adopted after a newer one was applied).
var errOlderStatus = errors.New("a status drained later is already applied")

// batchPlan is what applying a batch's results to their locked rows
// decides; the transaction then writes it as it is.
type batchPlan struct {
	// save are the changed rows, each once, in the order first changed.
	save []store.Row
	// finished are the attempts the results ended, for the history.
	finished []store.Attempt
	// dead are the results that cannot be applied.
	dead []rejected
	// stale are the results that change nothing.
	stale []staleResult
	// applied counts the results that changed a record.
	applied int
	// handBack are the batch indexes of results whose record another
	// transaction holds: they go back to the output list for a later batch.
	handBack []int
	// appliedTypes counts the applied results by type (for the Observer).
	appliedTypes map[string]int
	// disabled counts the records a final failure disabled.
	disabled int
	// events are the transitions' events, written in the same transaction.
	events []store.Event
	// observed are the attempts the results ended, for their upstreams'
	// breakers (see upstreams.go).
	observed []observation
	// breakerEvents are the transitions of those breakers; their events
	// (store.BreakerEvents) join events.
	breakerEvents []upstream.Transition
}

// merge appends a later plan's decisions (a batch applied in parts).
func (p *batchPlan) merge(q batchPlan) {
	p.save = append(p.save, q.save...)
	p.finished = append(p.finished, q.finished...)
	p.dead = append(p.dead, q.dead...)
	p.stale = append(p.stale, q.stale...)
	p.applied += q.applied
	p.handBack = append(p.handBack, q.handBack...)
	for t, n := range q.appliedTypes {
		if p.appliedTypes == nil {
			p.appliedTypes = map[string]int{}
		}
		p.appliedTypes[t] += n
	}
	p.disabled += q.disabled
	p.events = append(p.events, q.events...)
	p.observed = append(p.observed, q.observed...)
	p.breakerEvents = append(p.breakerEvents, q.breakerEvents...)
}

// counts is what became of the plan's results, for the Observer.
func (p *batchPlan) counts() BatchCounts {
	c := BatchCounts{Results: map[ResultKind]int{}, Disabled: p.disabled}
	for t, n := range p.appliedTypes {
		c.Results[ResultKind{t, OutcomeApplied}] += n
	}
	for _, s := range p.stale {
		c.Results[ResultKind{string(s.res.Type), OutcomeStale}]++
	}
	for _, d := range p.dead {
		c.Results[ResultKind{d.typ, OutcomeDead}]++
	}
	c.BreakerTransitions = upstream.CountByState(p.breakerEvents)
	return c
}

// applyBatch decides, without any I/O, what the results do to the rows
// locked for them. rows are the locked rows by uid; busy the uids of records
// another transaction holds; now the database's clock (the now of every
// transition); rcv when the batch's results reached the output list; draw
// the source of the random numbers randomized retry strategies use. Results
// are applied in batch order, several to one record in turn.
func applyBatch(rows map[string]store.Row, busy map[string]bool, items []item, now time.Time, rcv refresh.Received,
	rules *refresh.RulesCache, draw func() float64) batchPlan {
	var plan batchPlan
	changed := map[string]int{} // uid -> index in plan.save
	for _, it := range items {
		r := it.res
		if busy[r.BigTableUID] {
			plan.handBack = append(plan.handBack, it.idx)
			continue
		}
		row, ok := rows[r.BigTableUID]
		if i, done := changed[r.BigTableUID]; done {
			row, ok = plan.save[i], true
		}
		if !ok {
			plan.dead = append(plan.dead, rejected{it.raw, fmt.Sprintf("unknown record: no big_table_uid %q", r.BigTableUID), string(r.Type)})
			continue
		}
		rl, err := rules.Get(row.Schedule, row.Policy)
		if err != nil {
			plan.dead = append(plan.dead, rejected{it.raw, fmt.Sprintf("record %q cannot apply results: %v", r.BigTableUID, err), string(r.Type)})
			continue
		}
		rl = rl.ForRecord(r.BigTableUID)
		old := row.State
		var outcome store.Outcome
		var step refresh.Step
		switch r.Type {
		case protocol.Success:
			row.State, err = rl.Succeed(row.State, now, rcv, r.AttemptUID)
			outcome = store.OutcomeSuccess
		case protocol.Failure:
			row.State, step, err = rl.Fail(row.State, now, rcv, r.AttemptUID, refresh.Failure{
				Message: r.Message, NotRetryable: r.NotRetryable(), Reason: r.UserFriendlyReason, Draw: draw(),
				Kind: r.Kind, RetryAfter: r.RetryAfter.Time(now),
			})
			outcome = store.OutcomeFailure
		case protocol.Status:
			err = row.State.Status(rcv, r.AttemptUID)
			if err == nil && rcv.By.Before(row.StatusAt) {
				err = errOlderStatus
			}
			if err == nil {
				row.StatusMessage, row.StatusAt = r.Message, rcv.By
			}
		}
		if errors.Is(err, refresh.ErrStale) || errors.Is(err, errOlderStatus) {
			plan.stale = append(plan.stale, staleResult{r, old.AttemptUID, err})
			continue
		}
		if err != nil { // no transition fails otherwise today; never lose the result
			plan.dead = append(plan.dead, rejected{it.raw, fmt.Sprintf("apply %s to %q: %v", r.Type, r.BigTableUID, err), string(r.Type)})
			continue
		}
		plan.applied++
		if plan.appliedTypes == nil {
			plan.appliedTypes = map[string]int{}
		}
		plan.appliedTypes[string(r.Type)]++
		if row.Disabled && !old.Disabled {
			plan.disabled++
		}
		plan.events = append(plan.events, store.TransitionEvents(r.BigTableUID, old, row.State, step.Decision, now)...)
		if outcome != "" {
			// Applied, so r.AttemptUID is old.AttemptUID.
			plan.finished = append(plan.finished, store.Ended(r.BigTableUID, old, now, outcome, r.Message, step.Decision))
			plan.observed = append(plan.observed, observe(row.Upstream, r, step.Decision))
		}
		if i, done := changed[r.BigTableUID]; done {
			plan.save[i] = row
		} else {
			changed[r.BigTableUID] = len(plan.save)
			plan.save = append(plan.save, row)
		}
	}
	return plan
}
