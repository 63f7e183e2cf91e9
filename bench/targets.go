package bench

import "fmt"

// The targets a run's figures are held to; Result.Misses lists those missed
// and `bigtables bench --check` exits 1 on any.
const (
	// TargetSpeedup is the least end-to-end speed-up over the row-at-a-time
	// design, measured in the same run.
	TargetSpeedup = 20.0
	// TargetTickCostRatio is the most a tick starting 1,000 records may cost
	// with the large table stored, relative to 10,000 rows stored: a tick
	// costs the rows due, not the rows stored.
	TargetTickCostRatio = 1.5
	// TargetRSSRatio is the most the poller's peak RSS may grow from the
	// small backlog to the large one: memory is bounded by the batch.
	TargetRSSRatio = 1.5
	// TargetRSSMinBacklog is the least --backlog TargetRSSRatio is judged
	// at: the full run's 1,000,000 results against 50,000. A smaller
	// backlog is drained in a few batches, so its peak RSS is the runtime's
	// and the collector's timing (GOGC), not what the backlog costs: the
	// ratio is printed, marked not judged.
	TargetRSSMinBacklog = 1_000_000
)

// RSSJudged reports whether the run's backlog is one TargetRSSRatio is
// meant for.
func (r Result) RSSJudged() bool { return r.PollerBacklog >= TargetRSSMinBacklog }

// Misses lists, as sentences, the targets this run missed. A figure the
// run did not measure (a step left out, or skipped) is not judged.
func (r Result) Misses() []string {
	var m []string
	if r.SpeedupVsBaseline > 0 && r.SpeedupVsBaseline < TargetSpeedup {
		m = append(m, fmt.Sprintf("speed-up over the row-at-a-time design %.1fx; target >= %.0fx", r.SpeedupVsBaseline, TargetSpeedup))
	}
	if r.TwoEachCyclesPerSec > 0 && !r.TwoEachExactlyOnce {
		m = append(m, "two schedulers + two pollers did not start and apply each record exactly once")
	}
	if r.TickCostRatio > TargetTickCostRatio {
		m = append(m, fmt.Sprintf("tick cost ratio %.2f (%d vs 10,000 rows stored); target <= %.1f", r.TickCostRatio, r.LargeTableRows, TargetTickCostRatio))
	}
	if r.PollerRSSRatio > TargetRSSRatio && r.RSSJudged() {
		m = append(m, fmt.Sprintf("poller peak RSS ratio %.2f (backlog %d vs %d); target <= %.1f", r.PollerRSSRatio, r.PollerBacklog, r.PollerSmallBacklog, TargetRSSRatio))
	}
	return m
}

// NotJudged lists, as sentences, the targets this run's sizes are too
// small to judge (the figure is still measured and printed).
func (r Result) NotJudged() []string {
	var n []string
	if r.PollerRSSRatio > 0 && !r.RSSJudged() {
		n = append(n, fmt.Sprintf("poller peak RSS ratio (target <= %.1f): judged from --backlog %d; this run drained %d", TargetRSSRatio, TargetRSSMinBacklog, r.PollerBacklog))
	}
	return n
}
