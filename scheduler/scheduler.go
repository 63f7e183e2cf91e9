// Package scheduler starts refresh attempts. Each tick claims a batch of rows
// that are due or whose running attempt passed its deadline (FOR UPDATE SKIP
// LOCKED, so schedulers side by side never double-start), fails the timed-out
// attempts, starts the due rows, commits, and only then pushes the jobs in one
// round trip. If the push fails the starts are undone, so an outage of ours
// does not burn an attempt; if even the undo fails, the deadline covers it.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

// Config tunes a Scheduler. Zero values take the defaults.
type Config struct {
	// Interval is the pause between ticks when the last tick was not full.
	// Default 1s.
	Interval time.Duration
	// Batch is the most rows one tick starts (and, separately, the most it
	// times out). Default 1000.
	Batch int
	// MaxBackoff caps the pause after consecutive errors. Default 30s.
	MaxBackoff time.Duration
	// Logger receives a line per tick that did something at Info, and one per
	// transition at Debug. Default slog.Default().
	Logger *slog.Logger
	// Draw returns uniform random numbers in [0, 1) for randomized retry
	// strategies. Default math/rand/v2's Float64.
	Draw func() float64
}

func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.Batch <= 0 {
		c.Batch = 1000
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Draw == nil {
		c.Draw = rand.Float64
	}
	return c
}

// Scheduler starts attempts and times them out.
type Scheduler struct {
	store *store.Store
	queue *queue.Queue
	cfg   Config
	rules *refresh.RulesCache
	log   *slog.Logger
}

// New returns a Scheduler.
func New(st *store.Store, q *queue.Queue, cfg Config) *Scheduler {
	cfg = cfg.withDefaults()
	return &Scheduler{store: st, queue: q, cfg: cfg, rules: refresh.NewRulesCache(0), log: cfg.Logger}
}

// TickResult counts what one tick did.
type TickResult struct {
	Started  int // attempts started and pushed
	TimedOut int // running attempts failed with reason "timeout"
	Disabled int // records disabled by a timeout that was their final failure
	Undone   int // starts reverted because the push failed
	Skipped  int // rows whose stored schedule or policy cannot be read
	Claimed  int // rows claimed
}

// Tick runs one claim-start-commit-push cycle.
func (s *Scheduler) Tick(ctx context.Context) (TickResult, error) {
	var res TickResult
	var jobs [][]byte
	var starts []store.Started
	var timedOut map[string]time.Time
	err := s.store.InTx(ctx, func(tx *store.Tx) error {
		timedOut = map[string]time.Time{}
		rows, err := tx.ClaimDue(ctx, s.cfg.Batch, tx.Now())
		if err != nil {
			return err
		}
		res.Claimed = len(rows)
		now := tx.Now()
		changed := rows[:0]
		var finished []store.Attempt
		for _, row := range rows {
			rules, err := s.rules.Get(row.Schedule, row.Policy)
			if err != nil {
				res.Skipped++
				s.log.Error("record skipped: its stored rules cannot be read", "uid", row.UID, "err", err)
				continue
			}
			st := row.State
			if st.TimedOut(now) {
				old := st
				var step refresh.Step
				st, step, _ = rules.TimeOut(st, now, s.cfg.Draw())
				res.TimedOut++
				timedOut[old.AttemptUID] = old.DeadlineAt
				if st.Disabled {
					res.Disabled++
				}
				finished = append(finished, store.Attempt{
					AttemptUID: old.AttemptUID, UID: row.UID, AttemptNo: old.AttemptNo, StartedAt: old.StartedAt,
					FinishedAt: now, Outcome: store.OutcomeTimeout, Message: "timeout", Decision: string(step.Decision),
				})
				s.log.Debug("attempt timed out", "uid", row.UID, "attempt_no", old.AttemptNo,
					"decision", step.Decision, "refresh_at", st.RefreshAt, "disabled", st.Disabled)
			}
			if st.Due(now) {
				prev := st.RefreshAt
				st, err = rules.Start(st, now, refresh.NewAttemptUID())
				if err != nil {
					return fmt.Errorf("start %s: %w", row.UID, err) // Due was checked: a bug
				}
				jobs = append(jobs, protocol.Job{
					BigTableUID: row.UID, AttemptUID: st.AttemptUID, InputURL: row.InputURL,
					AttemptNo: st.AttemptNo, DeadlineAt: st.DeadlineAt,
				}.Encode())
				starts = append(starts, store.Started{UID: row.UID, AttemptUID: st.AttemptUID, RefreshAt: prev})
				s.log.Debug("attempt started", "uid", row.UID, "attempt_no", st.AttemptNo,
					"attempt_uid", st.AttemptUID, "deadline_at", st.DeadlineAt, "refresh_at", st.RefreshAt)
			}
			row.State = st
			changed = append(changed, row)
		}
		if err := tx.Save(ctx, changed); err != nil {
			return err
		}
		return tx.RecordAttempts(ctx, finished)
	})
	if err != nil {
		return TickResult{}, fmt.Errorf("tick: %w", err)
	}
	// Tell the workers of timed-out attempts to stop (best effort: their
	// results are stale anyway).
	if err := s.queue.Cancel(ctx, timedOut); err != nil {
		s.log.Warn("could not mark timed-out attempts cancelled", "err", err)
	}
	if err := s.queue.PushJobs(ctx, jobs); err != nil {
		undoCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		n, uerr := s.store.UndoStarts(undoCtx, starts)
		res.Undone = n
		if uerr != nil {
			return res, fmt.Errorf("tick: %w; undo starts: %v (their deadlines will time them out)", err, uerr)
		}
		return res, fmt.Errorf("tick: %w (%d starts undone)", err, n)
	}
	res.Started = len(jobs)
	return res, nil
}

// Run ticks until ctx is cancelled, then finishes the tick in hand and
// returns nil. A tick that filled its batch is followed at once by another;
// errors are logged and retried with exponential backoff.
func (s *Scheduler) Run(ctx context.Context) error {
	s.log.Info("scheduler running", "interval", s.cfg.Interval, "batch", s.cfg.Batch)
	backoff := time.Duration(0)
	for {
		if ctx.Err() != nil {
			s.log.Info("scheduler stopped")
			return nil
		}
		// The tick is not cancelled by shutdown: it finishes its batch.
		tickCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		res, err := s.Tick(tickCtx)
		cancel()
		wait := s.cfg.Interval
		switch {
		case err != nil:
			backoff = min(max(2*backoff, s.cfg.Interval), s.cfg.MaxBackoff)
			wait = backoff
			s.log.Error("scheduler tick failed; retrying", "err", err, "retry_in", backoff, "undone", res.Undone)
		default:
			if backoff > 0 {
				s.log.Info("scheduler recovered")
			}
			backoff = 0
			if res.Claimed > 0 {
				s.log.Info("tick", "started", res.Started, "timed_out", res.TimedOut, "disabled", res.Disabled, "skipped", res.Skipped)
			}
			if res.Claimed >= s.cfg.Batch {
				wait = 0 // more may be due: go on at once
			}
		}
		if wait > 0 {
			if err := sleep(ctx, wait); err != nil {
				continue
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return errors.New("cancelled")
	case <-t.C:
		return nil
	}
}
