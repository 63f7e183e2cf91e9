package refresh

import "time"

// Park holds a due record back because its upstream's breaker is open
// (docs/design.md, U5): no attempt starts or is burned, attempt_no and
// refresh_at are kept, and the record is not due until Unpark.
func Park(s State) State {
	s.Parked = true
	return s
}

// Unpark releases a record parked at parkedAt, at now (docs/design.md, U5,
// U9): it is due again at once, with its attempt_no and refresh_at, and the
// time it spent parked is added to failing_since, so give_up_after (and the
// strategies that grow with the time failing) count the record's own
// failures, not the upstream's outage. A healthy record (no failing_since)
// keeps none. store.Tx.Unpark does the same in SQL.
func Unpark(s State, parkedAt, now time.Time) State {
	s.Parked = false
	if !s.FailingSince.IsZero() && now.After(parkedAt) {
		s.FailingSince = s.FailingSince.Add(now.Sub(parkedAt))
	}
	return s
}
