package cli

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

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
	stop, err := startProfile(*cpuProfile)
	if err != nil {
		return err
	}
	res, err := bench.Run(ctx, bc)
	stop()
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
		row("end to end, "+bench.Thousands(res.Records)+" records (cycles/s)", fmt.Sprintf("%.0f", res.CyclesPerSec), "real scheduler + poller, batched")
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
		row("tick starting 1,000: "+bench.Thousands(res.LargeTableRows)+" rows stored (ms)", fmt.Sprintf("%.1f", res.TickMsLargeTable), fmt.Sprintf("ratio %.2f, target <= %.1f", res.TickCostRatio, bench.TargetTickCostRatio))
	}
	switch {
	case res.PollerRSSSkippedReason != "":
		row("poller peak RSS", "skipped", res.PollerRSSSkippedReason)
	case res.PollerPeakRSSMiBLarge > 0:
		row("poller peak RSS, "+bench.Thousands(res.PollerSmallBacklog)+" backlog (MiB)", fmt.Sprintf("%.1f", res.PollerPeakRSSMiBSmall), "")
		note := fmt.Sprintf("ratio %.2f, target <= %.1f: bounded by the batch, not the backlog", res.PollerRSSRatio, bench.TargetRSSRatio)
		if !res.RSSJudged() {
			note = fmt.Sprintf("ratio %.2f; target n/a at this size (judged from --backlog %s)", res.PollerRSSRatio, bench.Thousands(bench.TargetRSSMinBacklog))
		}
		row("poller peak RSS, "+bench.Thousands(res.PollerBacklog)+" backlog (MiB)", fmt.Sprintf("%.1f", res.PollerPeakRSSMiBLarge), note)
	}
	if u := res.Upstreams; u != nil {
		row("upstreams: 9 healthy, refreshes/s all up / one dead", fmt.Sprintf("%.0f / %.0f", u.HealthyRefreshesPerSec, u.HealthyWhileDeadPerSec), fmt.Sprintf("ratio %.2f", u.HealthyThroughputRatio))
		row("upstreams: attempts on the dead one while open", strconv.Itoa(u.AttemptsOnDeadWhileOpen), fmt.Sprintf("probes allowed %d (%d rounds), dead %.0fs", u.ProbesAllowed, u.ProbeRounds, u.DeadSec))
		row("upstreams: attempts started as it opened", strconv.Itoa(u.AttemptsOnDeadAsItOpened), fmt.Sprintf("ticks that read it closed; %d before it opened", u.AttemptsOnDeadBeforeOpened))
		row("upstreams: parked, then released and refreshed in (s)", fmt.Sprintf("%d, %.1f", u.ParkedAtRecovery, u.ReleaseSec), fmt.Sprintf("%.1f/s, release rate %.0f/s", u.ReleaseObservedPerSec, u.ReleaseRatePerSec))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return checkTargets(e, res, *check)
}

// checkTargets prints each target the run missed, and those its sizes are
// too small to judge; with --check a miss is an error (exit 1).
func checkTargets(e env, res bench.Result, check bool) error {
	misses := res.Misses()
	for _, m := range misses {
		fmt.Fprintln(e.stderr, "target missed:", m)
	}
	for _, n := range res.NotJudged() {
		fmt.Fprintln(e.stderr, "target not judged at this size:", n)
	}
	if check && len(misses) > 0 {
		return fmt.Errorf("--check: %d target(s) missed", len(misses))
	}
	return nil
}

// startProfile starts a Go CPU profile into path ("" does nothing) and
// returns the function that stops it.
func startProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func runBenchScale(ctx context.Context, e env, args []string) error {
	var cfg Config
	var sc bench.ScaleConfig
	var asJSON bool
	fs := flagSet(e, "bench-scale", "bench-scale [--stored N] [--burst N] [--partitions N] [--load auto|copy|generate] [--json]", &cfg)
	fs.IntVar(&sc.Stored, "stored", 10_000_000, "records stored")
	fs.IntVar(&sc.Burst, "burst", 1_000_000, "records due at the same instant, in each of the two bursts (at most a third of --stored)")
	fs.IntVar(&sc.Workers, "workers", 8, "in-process trivial workers")
	fs.IntVar(&sc.SchedulerBatch, "scheduler-batch", 1000, "scheduler batch")
	fs.IntVar(&sc.PollerBatch, "poller-batch", 1000, "poller batch")
	fs.IntVar(&sc.Partitions, "partitions", 0, "hash-partition the records table by uid into N partitions (0: a plain table)")
	fs.StringVar(&sc.Load, "load", "auto", "how to load: copy (COPY FROM STDIN), generate (INSERT ... SELECT generate_series), auto (time both on a sample, use the faster)")
	fs.BoolVar(&asJSON, "json", false, "print the figures as one JSON object")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file (go tool pprof FILE)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	res, printed, err := measure(e, cfg, sc.Validate(), *cpuProfile, asJSON, func() (bench.ScaleResult, error) {
		sc.AdminURL, sc.RedisURL, sc.Progress = cfg.DatabaseURL, cfg.RedisURL, e.stderr
		return bench.RunScale(ctx, sc)
	})
	if err != nil || printed {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	row := func(name, value, note string) { fmt.Fprintf(tw, "%s\t%s\t  %s\t\n", name, value, note) }
	table := "plain table"
	if res.Partitions > 1 {
		table = fmt.Sprintf("%d hash partitions by uid", res.Partitions)
	}
	row("measure", "value", bench.Thousands(res.Stored)+" records stored, "+table)
	if res.LoadSampleRows > 0 {
		row("load: COPY FROM STDIN (rows/s)", fmt.Sprintf("%.0f", res.LoadCopyRowsPerSec), bench.Thousands(res.LoadSampleRows)+"-row sample")
		row("load: INSERT ... SELECT generate_series (rows/s)", fmt.Sprintf("%.0f", res.LoadGenerateRowsPerSec), "same sample")
	}
	row("load "+bench.Thousands(res.Stored)+" records (s)", fmt.Sprintf("%.1f", res.LoadSec),
		fmt.Sprintf("%s, %.0f rows/s; then VACUUM ANALYZE %.1f s", res.LoadMethod, float64(res.Stored)/res.LoadSec, res.VacuumSec))
	row("tick starting 1,000: 10,000 rows stored (ms)", fmt.Sprintf("%.1f", res.TickMsSmall), "best of 6")
	row("tick starting 1,000: "+bench.Thousands(res.Stored)+" rows stored (ms)", fmt.Sprintf("%.1f", res.TickMsLarge),
		fmt.Sprintf("ratio %.2f, target <= %.1f", res.TickCostRatio, bench.TargetTickCostRatio))
	for _, b := range res.Bursts {
		who := fmt.Sprintf("%d scheduler(s) + %d poller(s)", b.Schedulers, b.Pollers)
		row(bench.Thousands(b.Records)+" due at once, "+who+": all started (s)", fmt.Sprintf("%.1f", b.StartedSec), "due -> every job at a worker")
		row("  all applied (s)", fmt.Sprintf("%.1f", b.AppliedSec), fmt.Sprintf("%.0f cycles/s; exactly once: %v", b.CyclesPerSec, b.ExactlyOnce))
		row("  due -> job at a worker p50 / p99 (ms)", fmt.Sprintf("%.0f / %.0f", b.DueToJobP50Ms, b.DueToJobP99Ms), "")
		row("  CPU: PostgreSQL backends / this process (s)", fmt.Sprintf("%.1f / %.1f", b.PostgresCPUSec, b.GoCPUSec),
			fmt.Sprintf("%.0f%% PostgreSQL", 100*b.PostgresCPUSec/max(b.PostgresCPUSec+b.GoCPUSec, 1e-9)))
	}
	for _, q := range res.Queries {
		row(q.Name+" (ms)", fmt.Sprintf("%.1f", q.Ms), "median of 5")
	}
	row("records: heap / TOAST+maps / indexes (bytes per record)", fmt.Sprintf("%.0f / %.0f / %.0f", res.TableBytesPerRecord, res.ToastBytesPerRecord, res.IndexBytesPerRecord), "after VACUUM ANALYZE")
	names := make([]string, 0, len(res.IndexBytes))
	for n := range res.IndexBytes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		row("  index "+n+" (bytes per record)", fmt.Sprintf("%.1f", res.IndexBytes[n]), "")
	}
	row("history: heap / indexes (bytes per attempt)", fmt.Sprintf("%.0f / %.0f", res.HistoryBytesPerAttempt, res.HistoryIndexPerAttempt), bench.Thousands(res.HistoryAttempts)+" attempts")
	row("database size at the end (MiB)", fmt.Sprintf("%.0f", res.DatabaseMiB), "dropped after the run")
	if err := tw.Flush(); err != nil {
		return err
	}
	if res.TickCostRatio > bench.TargetTickCostRatio {
		fmt.Fprintf(e.stderr, "target missed: tick cost ratio %.2f; target <= %.1f\n", res.TickCostRatio, bench.TargetTickCostRatio)
	}
	return nil
}

func runSoak(ctx context.Context, e env, args []string) error {
	var cfg Config
	var sc bench.SoakConfig
	var asJSON bool
	fs := flagSet(e, "soak", "soak [--duration D] [--step D] [--rate N] [--period MIN] [--table-options K=V,...] [--plot FILE.svg] [--json]", &cfg)
	fs.DurationVar(&sc.Duration, "duration", 30*time.Minute, "how long the steady load runs")
	fs.DurationVar(&sc.Step, "step", time.Minute, "one sample (a table row, a plot point) per step")
	fs.Float64Var(&sc.Rate, "rate", 0, "cycles per second to sustain (0: half the peak, measured first)")
	fs.IntVar(&sc.Period, "period", 1, "every record refreshes every N minutes (rate x period x 60 records are stored)")
	fs.IntVar(&sc.FailEvery, "fail-every", 50, "about one attempt in N is a retryable failure (negative: none)")
	fs.IntVar(&sc.Workers, "workers", 8, "in-process trivial workers")
	fs.StringVar(&sc.TableOptions, "table-options", "", "storage parameters for the records table, e.g. fillfactor=70,autovacuum_vacuum_scale_factor=0.02")
	fs.DurationVar(&sc.VacuumEvery, "vacuum-every", 0, "VACUUM both tables at this interval (0: autovacuum when the server has it on, else 1m; negative: never)")
	fs.DurationVar(&sc.HistoryAge, "history-age", 10*time.Minute, "the history's retention during the run (pruned every second)")
	fs.StringVar(&sc.Plot, "plot", "", "write an SVG plot of the samples to this file")
	fs.BoolVar(&asJSON, "json", false, "print the figures as one JSON object")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file (go tool pprof FILE)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	res, printed, err := measure(e, cfg, sc.Validate(), *cpuProfile, asJSON, func() (bench.SoakResult, error) {
		sc.AdminURL, sc.RedisURL, sc.Progress = cfg.DatabaseURL, cfg.RedisURL, e.stderr
		return bench.RunSoak(ctx, sc)
	})
	if err != nil || printed {
		return err
	}
	fmt.Fprintf(e.stdout, "%s records every %d min, target %.0f cycles/s", bench.Thousands(res.Records), res.Period, res.Rate)
	if res.PeakCyclesPerSec > 0 {
		fmt.Fprintf(e.stdout, " (half the measured peak %.0f)", res.PeakCyclesPerSec)
	}
	fmt.Fprintf(e.stdout, ", %s; autovacuum %s, vacuum: %s", res.Duration, res.Autovacuum, res.VacuumEvery)
	if res.TableOptions != "" {
		fmt.Fprintf(e.stdout, ", table options %s", res.TableOptions)
	}
	fmt.Fprintln(e.stdout)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "min\tcycles/s\tdue->job p50/p99 ms\tstart->applied p99 ms\ttable MiB\tindexes MiB\thistory MiB\tdead tuples\tHOT %\tvacuums\tRSS MiB\theap MiB\t")
	for _, s := range res.Samples {
		fmt.Fprintf(tw, "%.1f\t%.0f\t%.0f / %.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%.0f\t%d\t%.0f\t%.0f\t\n", s.Minute, s.CyclesPerSec, s.DueToJobP50Ms,
			s.DueToJobP99Ms, s.StartToAppliedP99Ms, s.TableMiB, s.IndexMiB, s.HistoryMiB, s.DeadTuples, s.HOTPercent, s.Vacuums, s.RSSMiB, s.HeapMiB)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "throughput drift, first vs last %d step(s): %.0f vs %.0f cycles/s = %.1f%% (target <= %.0f%%)\n",
		res.Window, res.FirstRate, res.LastRate, 100*res.Drift, 100*bench.TargetSoakDrift)
	if res.Plot != "" {
		fmt.Fprintf(e.stdout, "plot: %s\n", res.Plot)
	}
	if res.Drift > bench.TargetSoakDrift {
		fmt.Fprintf(e.stderr, "target missed: throughput drift %.1f%%; target <= %.0f%%\n", 100*res.Drift, 100*bench.TargetSoakDrift)
	}
	return nil
}

// measure is what bench-scale and soak share: it refuses an invalid
// configuration (invalid, from its Validate), sets up the long-running
// process, runs fn under an optional CPU profile, and prints the result as
// JSON when asked (printed reports that it did).
func measure[R any](e env, cfg Config, invalid error, cpuProfile string, asJSON bool, fn func() (R, error)) (res R, printed bool, err error) {
	if invalid != nil {
		return res, false, usagef("%v", invalid)
	}
	if _, err := cfg.startProcess(e); err != nil {
		return res, false, err
	}
	stop, err := startProfile(cpuProfile)
	if err != nil {
		return res, false, err
	}
	res, err = fn()
	stop()
	if err != nil || !asJSON {
		return res, false, err
	}
	return res, true, writeJSON(e, res)
}
