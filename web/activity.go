package web

import (
	"context"
	"time"

	"github.com/bigtables/bigtables/store"
)

// settleAfter is when a minute of the attempt history stops changing: an
// attempt's finished_at is the start time of the transaction that records
// it, and the store's transactions commit within 2 minutes, so no row
// lands in a minute that ended more than 3 minutes ago.
const settleAfter = 3 * time.Minute

// activityCache keeps the settled minutes of the last hour's chart, so a
// view reads only the attempts of the last few minutes (and the running
// ones) instead of the whole hour's.
type activityCache struct {
	// mins holds, per settled minute, the attempts that finished in
	// [the hour's start, to): finished counts by outcome, and started by
	// started_at.
	mins map[time.Time]store.MinuteCounts
	to   time.Time
}

// activity returns the attempts per minute of the hour ending at now.
func (s *Server) activity(ctx context.Context, now time.Time) ([]store.MinuteCounts, error) {
	end := now.UTC().Truncate(time.Minute).Add(time.Minute)
	from := end.Add(-time.Hour)
	settle := now.UTC().Add(-settleAfter).Truncate(time.Minute)
	s.actMu.Lock()
	defer s.actMu.Unlock()
	c := &s.act
	if c.mins == nil || c.to.Before(from) || c.to.After(settle) { // first view, a long pause, or the clock went back
		c.mins, c.to = map[time.Time]store.MinuteCounts{}, from
	}
	if c.to.Before(settle) {
		mins, err := s.opt.Store.ActivityIn(ctx, store.ActivityRange{From: from, FinishedFrom: c.to, End: settle})
		if err != nil {
			return nil, err
		}
		for _, m := range mins {
			c.mins[m.Minute] = addCounts(c.mins[m.Minute], m)
		}
		c.to = settle
	}
	for t := range c.mins {
		if t.Before(from) {
			delete(c.mins, t)
		}
	}
	fresh, err := s.opt.Store.ActivityIn(ctx, store.ActivityRange{From: from, FinishedFrom: settle, End: end, Running: true})
	if err != nil {
		return nil, err
	}
	for i, m := range fresh {
		fresh[i] = addCounts(m, c.mins[m.Minute])
	}
	return fresh, nil
}

func addCounts(a, b store.MinuteCounts) store.MinuteCounts {
	a.Started += b.Started
	a.Succeeded += b.Succeeded
	a.Failed += b.Failed
	a.TimedOut += b.TimedOut
	a.Cancelled += b.Cancelled
	return a
}
