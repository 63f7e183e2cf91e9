package cli

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/bigtables/bigtables/bench"
)

func runBench(ctx context.Context, e env, args []string) error {
	var cfg Config
	var bc bench.Config
	var asJSON bool
	fs := flagSet(e, "bench", "bench [--records N] [--scale-rows N] [--backlog N] [--json] [--check]", &cfg)
	fs.IntVar(&bc.Records, "records", 100_000, "records cycled end to end")
	fs.IntVar(&bc.Workers, "workers", 8, "in-process trivial workers")
	fs.IntVar(&bc.SchedulerBatch, "scheduler-batch", 1000, "scheduler batch")
	fs.IntVar(&bc.PollerBatch, "poller-batch", 1000, "poller batch")
	fs.IntVar(&bc.ScaleRows, "scale-rows", 1_000_000, "rows stored in the large-table tick test")
	fs.IntVar(&bc.Backlog, "backlog", 1_000_000, "results the poller drains in the memory test")
	fs.BoolVar(&asJSON, "json", false, "print the figures as one JSON object")
	check := fs.Bool("check", false, "exit 1 when a figure misses its target (for CI tracking)")
	only := fs.String("only", "", "run only these steps, comma-separated: e2e, baseline, two, alone, latency, scale, memory, upstreams")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file (go tool pprof FILE)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if bc.Records < 100 || bc.ScaleRows < 10_000 || bc.Backlog < 1000 || bc.Workers < 1 {
		return usagef("--records must be at least 100, --scale-rows 10000, --backlog 1000, --workers 1")
	}
	if _, err := cfg.startProcess(e); err != nil { // also quiets the Redis client's own log
		return err
	}
	bc.AdminURL, bc.RedisURL, bc.Progress = cfg.DatabaseURL, cfg.RedisURL, e.stderr
	if *only != "" {
		bc.Only = strings.Split(*only, ",")
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	res, err := bench.Run(ctx, bc)
	if err != nil {
		return err
	}
	if asJSON {
		if err := writeJSON(e, res); err != nil {
			return err
		}
		return checkTargets(e, res, *check)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	row := func(name, value, note string) { fmt.Fprintf(tw, "%s\t%s\t  %s\t\n", name, value, note) }
	row("measure", "value", "")
	if res.CyclesPerSec > 0 {
		row("end to end, "+thousands(res.Records)+" records (cycles/s)", fmt.Sprintf("%.0f", res.CyclesPerSec), "real scheduler + poller, batched")
	}
	if res.BaselineCyclesPerSec > 0 {
		row("row-at-a-time baseline design (cycles/s)", fmt.Sprintf("%.0f", res.BaselineCyclesPerSec), "same records, same run")
	}
	if res.SpeedupVsBaseline > 0 {
		row("speed-up over the baseline design", fmt.Sprintf("%.1fx", res.SpeedupVsBaseline), fmt.Sprintf("target >= %.0fx", bench.TargetSpeedup))
	}
	if res.TwoEachCyclesPerSec > 0 {
		row("two schedulers + two pollers (cycles/s)", fmt.Sprintf("%.0f", res.TwoEachCyclesPerSec), fmt.Sprintf("each record exactly once: %v", res.TwoEachExactlyOnce))
	}
	if res.SchedulerStartsPerSec > 0 {
		row("scheduler alone (starts/s)", fmt.Sprintf("%.0f", res.SchedulerStartsPerSec), "")
		row("poller alone (applies/s)", fmt.Sprintf("%.0f", res.PollerAppliesPerSec), "")
	}
	if res.DueToPushedP99Ms > 0 {
		row("due -> job at a worker p50 / p99 (ms)", fmt.Sprintf("%.1f / %.1f", res.DueToPushedP50Ms, res.DueToPushedP99Ms), "steady load, scheduler interval 50 ms")
		row("result -> applied p50 / p99 (ms)", fmt.Sprintf("%.1f / %.1f", res.ResultToAppliedP50Ms, res.ResultToAppliedP99Ms), "")
	}
	if res.TickMsSmallTable > 0 {
		row("tick starting 1,000: 10,000 rows stored (ms)", fmt.Sprintf("%.1f", res.TickMsSmallTable), "")
		row("tick starting 1,000: "+thousands(res.LargeTableRows)+" rows stored (ms)", fmt.Sprintf("%.1f", res.TickMsLargeTable), fmt.Sprintf("ratio %.2f, target <= %.1f", res.TickCostRatio, bench.TargetTickCostRatio))
	}
	switch {
	case res.PollerRSSSkippedReason != "":
		row("poller peak RSS", "skipped", res.PollerRSSSkippedReason)
	case res.PollerPeakRSSMiBLarge > 0:
		row("poller peak RSS, "+thousands(res.PollerSmallBacklog)+" backlog (MiB)", fmt.Sprintf("%.1f", res.PollerPeakRSSMiBSmall), "")
		row("poller peak RSS, "+thousands(res.PollerBacklog)+" backlog (MiB)", fmt.Sprintf("%.1f", res.PollerPeakRSSMiBLarge), fmt.Sprintf("ratio %.2f, target <= %.1f: bounded by the batch, not the backlog", res.PollerRSSRatio, bench.TargetRSSRatio))
	}
	if u := res.Upstreams; u != nil {
		row("upstreams: 9 healthy, refreshes/s all up / one dead", fmt.Sprintf("%.0f / %.0f", u.HealthyRefreshesPerSec, u.HealthyWhileDeadPerSec), fmt.Sprintf("ratio %.2f", u.HealthyThroughputRatio))
		row("upstreams: attempts on the dead one while open", strconv.Itoa(u.AttemptsOnDeadWhileOpen), fmt.Sprintf("probes allowed %d (%d rounds), dead %.0fs", u.ProbesAllowed, u.ProbeRounds, u.DeadSec))
		row("upstreams: parked, then released and refreshed in (s)", fmt.Sprintf("%d, %.1f", u.ParkedAtRecovery, u.ReleaseSec), fmt.Sprintf("%.1f/s, release rate %.0f/s", u.ReleaseObservedPerSec, u.ReleaseRatePerSec))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return checkTargets(e, res, *check)
}

// checkTargets prints each target the run missed; with --check a miss is
// an error (exit 1).
func checkTargets(e env, res bench.Result, check bool) error {
	misses := res.Misses()
	for _, m := range misses {
		fmt.Fprintln(e.stderr, "target missed:", m)
	}
	if check && len(misses) > 0 {
		return fmt.Errorf("--check: %d target(s) missed", len(misses))
	}
	return nil
}

// thousands writes n with commas between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
