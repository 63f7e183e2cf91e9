package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/workercheck"
)

func runWorkerCheck(ctx context.Context, e env, args []string) error {
	var cfg Config
	var grace time.Duration
	var verbose bool
	fs := flagSet(e, "worker-check", "worker-check [--grace 3s] [-v] -- CMD [ARGS...]", &cfg)
	fs.DurationVar(&grace, "grace", 3*time.Second, "how late after the deadline a result may come, and how long exiting after SIGTERM may take")
	fs.BoolVar(&verbose, "v", false, "print the worker's output too")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() == 0 {
		return usagef("give the worker's command after --, e.g. bigtables worker-check -- python3 worker.py")
	}
	rdb, err := queue.Connect(ctx, cfg.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	fmt.Fprintf(e.stderr, "checking %v (about 20 seconds)...\n", fs.Args())
	rep, err := workercheck.Run(ctx, workercheck.Config{Command: fs.Args(), RedisURL: cfg.RedisURL, Redis: rdb, Grace: grace})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tCHECK\tRESULT\tDETAIL")
	passed := 0
	for _, c := range rep.Checks {
		verdict := "FAIL"
		if c.OK {
			verdict, passed = "pass", passed+1
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Case, c.What, verdict, c.Detail)
	}
	tw.Flush()
	fmt.Fprintf(e.stdout, "%d passed, %d failed\n", passed, len(rep.Checks)-passed)
	if verbose || !rep.Passed() {
		fmt.Fprintf(e.stdout, "--- worker output:\n%s", rep.Output)
	}
	if !rep.Passed() {
		return errors.New("the worker does not keep the protocol")
	}
	return nil
}
