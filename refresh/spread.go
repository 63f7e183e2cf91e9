package refresh

import (
	"hash/fnv"
	"time"
)

// SpreadOffset is record uid's offset within spread: a hash of the uid
// mapped onto [0, spread) at microsecond precision, so it is random-looking
// across records, the same for one record at every refresh and in every
// process, and needs no stored state. 0 when spread is 0 (docs/design.md,
// U12).
func SpreadOffset(uid string, spread time.Duration) time.Duration {
	us := spread.Microseconds()
	if us <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(uid))
	return time.Duration(h.Sum64()%uint64(us)) * time.Microsecond
}

// ForRecord returns the rules of record uid: its policy's spread turned
// into the record's stable offset (see SpreadOffset).
func (r Rules) ForRecord(uid string) Rules {
	r.Policy.offset = SpreadOffset(uid, time.Duration(r.Policy.Spread))
	return r
}

// Next is the first planned refresh strictly after t: the schedule's
// occurrences shifted by the record's offset. Zero when there is none.
func (r Rules) Next(t time.Time) time.Time {
	off := r.Policy.offset
	if off == 0 {
		return r.Schedule.Next(t)
	}
	n := r.Schedule.Next(t.Add(-off))
	if n.IsZero() {
		return n
	}
	return n.Add(off)
}
