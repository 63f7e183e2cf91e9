package cli

import (
	"context"
	"net/http"
	"time"

	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/worker"
)

func runScheduler(ctx context.Context, e env, args []string) error {
	var cfg Config
	var sc scheduler.Config
	fs := flagSet(e, "scheduler", "scheduler [--interval D] [--batch N]", &cfg)
	fs.DurationVar(&sc.Interval, "interval", time.Second, "pause between ticks when nothing more is due")
	fs.IntVar(&sc.Batch, "batch", 1000, "most attempts started per tick")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if sc.Interval <= 0 || sc.Batch <= 0 || sc.Batch > 100_000 {
		return usagef("--interval must be positive and --batch from 1 to 100000")
	}
	log, err := cfg.startProcess(e)
	if err != nil {
		return err
	}
	sc.Logger = log
	return cfg.runProcess(ctx, e, log, true, func(st *store.Store, q *queue.Queue) error {
		return scheduler.New(st, q, sc).Run(ctx)
	})
}

func runPoller(ctx context.Context, e env, args []string) error {
	var cfg Config
	var pc poller.Config
	fs := flagSet(e, "poller", "poller [--batch N] [--max-result-bytes N] [--id ID]", &cfg)
	fs.IntVar(&pc.Batch, "batch", 1000, "most results applied per transaction (at most this many results, each up to --max-result-bytes, are held in memory)")
	fs.IntVar(&pc.MaxResultBytes, "max-result-bytes", protocol.DefaultMaxResultBytes, "larger results are dead-lettered")
	fs.StringVar(&pc.ID, "id", "", "poller id naming its processing list (default: host-pid-random)")
	fs.DurationVar(&pc.Lease, "lease", 15*time.Second, "a poller silent this long has its unacknowledged results recovered by the others")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if pc.Batch < 1 || pc.Batch > queue.MaxBatch {
		return usagef("--batch %d: expected 1 to %d", pc.Batch, queue.MaxBatch)
	}
	if pc.Lease < time.Second {
		return usagef("--lease %v: expected at least 1s", pc.Lease)
	}
	if pc.MaxResultBytes < 1024 {
		return usagef("--max-result-bytes %d: expected at least 1024", pc.MaxResultBytes)
	}
	log, err := cfg.startProcess(e)
	if err != nil {
		return err
	}
	pc.Logger = log
	return cfg.runProcess(ctx, e, log, true, func(st *store.Store, q *queue.Queue) error {
		return poller.New(st, q, pc).Run(ctx)
	})
}

func runWorker(ctx context.Context, e env, args []string) error {
	var cfg Config
	var concurrency int
	var command string
	fs := flagSet(e, "worker", "worker [--concurrency N] [--exec CMD]", &cfg)
	fs.IntVar(&concurrency, "concurrency", 4, "jobs run at once")
	fs.StringVar(&command, "exec", "", "run CMD (sh -c) per job, job JSON on stdin; exit 0 is success (default: HTTP GET input_url)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if concurrency < 1 || concurrency > 1000 {
		return usagef("--concurrency %d: expected 1 to 1000", concurrency)
	}
	log, err := cfg.startProcess(e)
	if err != nil {
		return err
	}
	h := worker.HTTPGet(&http.Client{})
	if command != "" {
		h = worker.Exec(command)
	}
	return cfg.runProcess(ctx, e, log, false, func(_ *store.Store, q *queue.Queue) error {
		return worker.Run(ctx, worker.Options{Queue: q, Concurrency: concurrency, Logger: log}, h)
	})
}
