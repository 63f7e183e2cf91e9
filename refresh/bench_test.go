package refresh

import (
	"testing"
	"time"
)

// BenchmarkCycle is one start and one failure of a typical record: the pure
// work the scheduler and poller do per row.
func BenchmarkCycle(b *testing.B) {
	r := Rules{twiceADay, DefaultPolicy()}
	now := at("06:00")
	b.ReportAllocs()
	for b.Loop() {
		s, _ := r.Start(State{RefreshAt: now}, now, "c1")
		if _, _, err := r.Fail(s, now.Add(time.Minute), ReceivedAt(now.Add(time.Minute)), "c1", Failure{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRulesCacheHit is the per-row lookup of parsed rules.
func BenchmarkRulesCacheHit(b *testing.B) {
	c := NewRulesCache(0)
	sched, pol := twiceADay.String(), DefaultPolicy().JSON()
	c.Get(sched, pol)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Get(sched, pol); err != nil {
			b.Fatal(err)
		}
	}
}
