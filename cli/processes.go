package cli

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
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
	var httpAddr string
	fs := flagSet(e, "scheduler", "scheduler [--interval D] [--batch N] [--http ADDR]", &cfg)
	httpFlag(e, fs, &httpAddr)
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
		m, stop, err := serveOps(ctx, httpAddr, log, st, q, "scheduler")
		if err != nil {
			return err
		}
		defer stop()
		if m != nil {
			sc.Observer = m
		}
		return scheduler.New(st, q, sc).Run(ctx)
	})
}

func runPoller(ctx context.Context, e env, args []string) error {
	var cfg Config
	var pc poller.Config
	var httpAddr string
	fs := flagSet(e, "poller", "poller [--batch N] [--max-result-bytes N] [--id ID] [--http ADDR]", &cfg)
	httpFlag(e, fs, &httpAddr)
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
		m, stop, err := serveOps(ctx, httpAddr, log, st, q, "poller")
		if err != nil {
			return err
		}
		defer stop()
		if m != nil {
			pc.Observer = m
		}
		return poller.New(st, q, pc).Run(ctx)
	})
}

func runWorker(ctx context.Context, e env, args []string) error {
	var cfg Config
	var concurrency int
	var command string
	var grace time.Duration
	var httpAddr string
	fs := flagSet(e, "worker", "worker [--concurrency N] [--exec CMD] [--shutdown-grace D] [--http ADDR]", &cfg)
	httpFlag(e, fs, &httpAddr)
	fs.IntVar(&concurrency, "concurrency", 4, "jobs run at once")
	fs.StringVar(&command, "exec", "", "run CMD (sh -c) per job in a process group of its own, job JSON on stdin; exit 0 is success (default: HTTP GET input_url)")
	fs.DurationVar(&grace, "shutdown-grace", 0, "on SIGINT/SIGTERM, stop the jobs in hand after D, pushing nothing for them (0: let them finish; a second signal, a second or more after the first, stops them at once)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if concurrency < 1 || concurrency > 1000 {
		return usagef("--concurrency %d: expected 1 to 1000", concurrency)
	}
	if grace < 0 {
		return usagef("--shutdown-grace %v: expected 0 (no limit) or more", grace)
	}
	log, err := cfg.startProcess(e)
	if err != nil {
		return err
	}
	h := worker.HTTPGet(&http.Client{})
	if command != "" {
		h = worker.Exec(command)
	}
	abort, stopAbort := abortOnSecondSignal(log)
	defer stopAbort()
	return cfg.runProcess(ctx, e, log, false, func(_ *store.Store, q *queue.Queue) error {
		m, stop, err := serveOps(ctx, httpAddr, log, nil, q)
		if err != nil {
			return err
		}
		defer stop()
		stats := &worker.Stats{}
		if m != nil {
			m.ObserveWorker(stats)
		}
		return worker.Run(ctx, worker.Options{Queue: q, Concurrency: concurrency, ShutdownGrace: grace, Abort: abort, Logger: log, Stats: stats}, h)
	})
}

// abortOnSecondSignal returns a context cancelled by a second SIGINT or
// SIGTERM: the first one (which also cancels the command's context) starts
// the graceful stop. Signals within a second of the first count as the same
// one: a Ctrl-C reaches every process of the terminal's foreground group,
// and a wrapper script that forwards its own SIGTERM to the worker then
// delivers two at once.
func abortOnSecondSignal(log *slog.Logger) (context.Context, func()) {
	abort, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		var first time.Time
		for {
			select {
			case <-abort.Done():
				return
			case s := <-sig:
				switch {
				case first.IsZero():
					first = time.Now()
					log.Info("stopping: finishing the jobs in hand (a second signal stops them)", "signal", s.String())
				case time.Since(first) < time.Second:
					log.Debug("signal ignored: it came with the first one", "signal", s.String())
				default:
					log.Warn("second signal: stopping the jobs in hand; no result is pushed for them", "signal", s.String())
					cancel()
					return
				}
			}
		}
	}()
	// Further signals stay caught until the worker returns: one that killed
	// it would cut its last result push or log line.
	return abort, func() { signal.Stop(sig); cancel() }
}
