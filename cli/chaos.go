package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/bigtables/bigtables/chaos"
)

func runChaos(ctx context.Context, e env, args []string) error {
	var cfg Config
	var cc chaos.Config
	var asJSON bool
	fs := flagSet(e, "chaos", "chaos [--records N] [--faults D] [--seed N] [--json]", &cfg)
	fs.IntVar(&cc.Records, "records", 2000, "records with second-scale policies")
	fs.DurationVar(&cc.Faults, "faults", 60*time.Second, "how long faults are injected before the system settles")
	fs.IntVar(&cc.Schedulers, "schedulers", 2, "scheduler processes")
	fs.IntVar(&cc.Pollers, "pollers", 2, "poller processes")
	fs.IntVar(&cc.Workers, "workers", 16, "misbehaving worker goroutines")
	fs.Uint64Var(&cc.Seed, "seed", 0, "random seed (default: the time; the report prints it)")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if cc.Records < 10 || cc.Faults < 5*time.Second || cc.Schedulers < 1 || cc.Pollers < 1 || cc.Workers < 1 {
		return usagef("--records at least 10, --faults at least 5s, at least one scheduler, poller and worker")
	}
	if _, err := cfg.startProcess(e); err != nil { // also quiets the Redis client's own log
		return err
	}
	cc.AdminURL, cc.Progress = cfg.DatabaseURL, e.stderr
	rep, err := chaos.Run(ctx, cc)
	if err != nil {
		return err
	}
	if asJSON {
		if err := writeJSON(e, rep); err != nil {
			return err
		}
	} else {
		w := e.stdout
		fmt.Fprintf(w, "fault run, seed %d: %d records, %d attempts\n\nfaults injected:\n", rep.Seed, rep.Records, rep.Attempts)
		for _, k := range sortedKeys(rep.Faults) {
			fmt.Fprintf(w, "  %6d  %s\n", rep.Faults[k], k)
		}
		fmt.Fprintln(w, "results pushed by the workers:")
		for _, k := range sortedKeys(rep.Pushed) {
			fmt.Fprintf(w, "  %6d  %s\n", rep.Pushed[k], k)
		}
		printInvariants(w, rep.Invariants, 0) // the run already cut each list to 20
		if rep.Refusal != "" {
			fmt.Fprintf(w, "a refused duplicate poller said: %s\n", rep.Refusal)
		}
		fmt.Fprintf(w, "results for undone starts (stale): %d\n", rep.UndoneStarts)
		fmt.Fprintf(w, "attempts lost with Redis's data (restarted empty): %d\n", rep.LostWithRedis)
		fmt.Fprintf(w, "attempts burned by our faults: %d\n", rep.Burned)
		fmt.Fprintf(w, "violations: %d\n", rep.Violations())
	}
	if rep.Violations() > 0 {
		return fmt.Errorf("%d invariant violations (rerun with --seed %d)", rep.Violations(), rep.Seed)
	}
	return nil
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// printInvariants prints each checked invariant with its verdict and its
// violations, at most limit of them (0: all), for chaos and failover.
func printInvariants(w io.Writer, invs []chaos.Invariant, limit int) {
	fmt.Fprintln(w, "invariants:")
	for _, inv := range invs {
		verdict := "ok"
		if len(inv.Violations) > 0 {
			verdict = fmt.Sprintf("%d VIOLATIONS", len(inv.Violations))
		}
		fmt.Fprintf(w, "  %-4s %s (%d checked)\n", verdict, inv.Name, inv.Checked)
		for i, v := range inv.Violations {
			if limit > 0 && i == limit {
				fmt.Fprintf(w, "         ... and %d more\n", len(inv.Violations)-limit)
				break
			}
			fmt.Fprintf(w, "         - %s\n", v)
		}
	}
}
