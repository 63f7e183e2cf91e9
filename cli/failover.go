package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/bigtables/bigtables/chaos"
)

func runFailover(ctx context.Context, e env, args []string) error {
	var cfg Config
	var fc chaos.FailoverConfig
	var asJSON bool
	fs := flagSet(e, "failover", "failover [--records N] [--kills N] [--port P] [--json]", &cfg)
	fs.IntVar(&fc.Records, "records", 1000, "records refreshed every --every")
	fs.DurationVar(&fc.Every, "every", 2*time.Second, "the records' period")
	fs.DurationVar(&fc.Timeout, "timeout", 5*time.Second, "attempt timeout: how long a lost job or result takes to be noticed")
	fs.DurationVar(&fc.Warmup, "warmup", 8*time.Second, "load before the first kill")
	fs.DurationVar(&fc.Observe, "observe", 8*time.Second, "load after each kill")
	fs.IntVar(&fc.Kills, "kills", 2, "masters killed one after another (the killed one returns as a replica in between)")
	fs.DurationVar(&fc.Lag, "lag", 0, "cut the replica's link this long before each kill, so the master dies with writes it never replicated")
	fs.IntVar(&fc.Port, "port", 7111, "first of the 5 ports of the private master, replica and Sentinels")
	fs.StringVar(&fc.Script, "script", "", "the script that starts them (default: scripts/redis-sentinel.sh from here)")
	fs.IntVar(&fc.Workers, "workers", 16, "worker goroutines")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if fc.Records < 10 || fc.Kills < 1 || fc.Every < time.Second || fc.Timeout < time.Second || fc.Workers < 1 {
		return usagef("--records at least 10, --kills at least 1, --every and --timeout at least 1s, at least one worker")
	}
	if _, err := cfg.startProcess(e); err != nil { // also quiets the Redis client's own log
		return err
	}
	fc.AdminURL, fc.Progress = cfg.DatabaseURL, e.stderr
	rep, err := chaos.RunFailover(ctx, fc)
	if err != nil {
		return err
	}
	if asJSON {
		if err := writeJSON(e, rep); err != nil {
			return err
		}
	} else {
		w := e.stdout
		ms := func(d time.Duration) string { return fmt.Sprintf("%7.2f s", d.Seconds()) }
		lag := "the replica in sync"
		if fc.Lag > 0 {
			lag = fmt.Sprintf("the replica cut off %v before each kill", fc.Lag)
		}
		fmt.Fprintf(w, "failover run: %d records, %.0f refreshes/s offered, %s; %d attempts applied, %d stale results discarded\n\n",
			rep.Records, rep.OfferedRate, lag, rep.Applied, rep.Stale)
		for i, k := range rep.Kills {
			fmt.Fprintf(w, "kill %d: SIGKILL to master %s\n", i+1, k.Master)
			fmt.Fprintf(w, "  the Sentinels promoted %s after       %s\n", k.Promoted, ms(k.Failover))
			fmt.Fprintf(w, "  first result pushed after                      %s\n", ms(k.FirstPush))
			fmt.Fprintf(w, "  first attempt started after the kill applied  %s\n", ms(k.Resumed))
			fmt.Fprintf(w, "  successes/s in the 5 s before / after          %7.0f / %.0f\n", k.RateBefore, k.RateAfter)
		}
		fmt.Fprintf(w, "\nlost with the dead masters (acknowledged by them, never replicated):\n")
		fmt.Fprintf(w, "  %6d  jobs pushed by a scheduler, never popped: their attempts timed out\n", rep.JobsLost)
		fmt.Fprintf(w, "  %6d  results pushed by a worker, never applied: their attempts timed out\n", rep.ResultsLost)
		fmt.Fprintf(w, "  %6d  pops: the job came back and was served again (replacing a result lost with it)\n", rep.PoppedTwice)
		fmt.Fprintf(w, "other effects of the outage:\n")
		fmt.Fprintf(w, "  %6d  results delayed past their deadline: their attempts timed out\n", rep.Late)
		fmt.Fprintf(w, "  %6d  records whose timed-out attempt was re-driven by a successful retry\n", rep.ReDriven)
		printInvariants(w, rep.Invariants, 20)
	}
	if rep.Violations() > 0 {
		return fmt.Errorf("%d invariant violations", rep.Violations())
	}
	return nil
}
