// Package scheduler starts refresh attempts. Each tick claims a batch of rows
// that are due or whose running attempt passed its deadline (FOR UPDATE SKIP
// LOCKED, so schedulers side by side never double-start), decides what to
// do with them in a pure plan (planTick: time out, start, park behind an
// open breaker, disable the unreadable), writes the
// plan, commits, and only then pushes the jobs in one idempotent round trip.
//
// What our own faults must not cost a record:
//   - the push carries a token, so a retried push (by go-redis after a lost
//     reply, or by the tick) lands once;
//   - if the push fails for good, or lands too late for a worker to use the
//     attempt, the starts are undone (guarded by attempt_uid) and their
//     attempts marked cancelled; a failed undo is retried, and if it still
//     fails the deadline covers it;
//   - an attempt past its deadline is timed out only once the pollers have
//     applied every result pushed before the deadline (the watermark), or
//     when MaxResultWait has passed since it;
//   - each start records its tick's push token; an attempt past its deadline
//     whose push never landed (a scheduler killed between its commit and
//     its push, Redis restarted without its data) is redriven, not timed
//     out;
//   - a row whose stored rules cannot be read is disabled with the reason
//     (counted as unreadable), so it cannot starve the rows behind it.
//
// The scheduler also prunes the attempt history by its retention, a
// bounded step at a time.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bigtables/bigtables/internal/wait"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
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
	// NewUID returns attempt uids and push tokens. Default
	// refresh.NewAttemptUID.
	NewUID func() string
	// Now is the loop's clock: when the history is pruned next and when the
	// held timeouts were last reported. Transitions use the store's clock.
	// Default time.Now.
	Now func() time.Time
	// Watermark returns a time before which every result pushed onto the
	// output list has been applied by a poller. Default: the queue's
	// Watermark.
	Watermark func(context.Context) (time.Time, error)
	// MaxResultWait bounds how long a timeout waits for the watermark: an
	// attempt whose deadline is older than this is timed out even while the
	// pollers are down or behind. Default 1h.
	MaxResultWait time.Duration
	// PushAttempts is how many times one tick's push is tried, always with
	// the same token so that its jobs land at most once, before its starts
	// are undone. Default 4.
	PushAttempts int
	// Retention says which attempts the history keeps; nil takes
	// DefaultRetention().
	Retention *Retention
	// Observer, if set, is told what every tick of Run did (metrics,
	// health).
	Observer Observer
}

// Observer is told what each tick of Run did: its result, how long it
// took and its error (nil on success). It must not block.
type Observer interface {
	ObserveTick(res TickResult, took time.Duration, err error)
}

// Retention bounds the attempt history (table bigtable_attempts).
type Retention struct {
	// KeepPerRecord keeps each record's newest attempts; 0 keeps all.
	KeepPerRecord int
	// MaxAge deletes attempts that finished longer ago; 0 keeps them.
	MaxAge time.Duration
	// Every is the pause between two prune steps. Default 1m.
	Every time.Duration
	// Batch is the most rows one step deletes for each rule. Default 1000.
	Batch int
	// Records is how many records one step checks against KeepPerRecord
	// (walking them in uid order). Default 500.
	Records int
}

// DefaultRetention keeps the last 100 attempts of each record, none older
// than 90 days.
func DefaultRetention() Retention {
	return Retention{KeepPerRecord: 100, MaxAge: 90 * 24 * time.Hour}
}

func (c Config) withDefaults(q *queue.Queue) Config {
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
	if c.NewUID == nil {
		c.NewUID = refresh.NewAttemptUID
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Watermark == nil {
		c.Watermark = q.Watermark
	}
	if c.MaxResultWait <= 0 {
		c.MaxResultWait = time.Hour
	}
	if c.PushAttempts <= 0 {
		c.PushAttempts = 4
	}
	r := DefaultRetention()
	if c.Retention != nil {
		r = *c.Retention
	}
	if r.Every <= 0 {
		r.Every = time.Minute
	}
	if r.Batch <= 0 {
		r.Batch = 1000
	}
	if r.Records <= 0 {
		r.Records = 500
	}
	c.Retention = &r
	return c
}

// Scheduler starts attempts and times them out.
type Scheduler struct {
	store *store.Store
	queue *queue.Queue
	cfg   Config
	rules *refresh.RulesCache
	log   *slog.Logger
	// undo reverts starts; a field so that tests can make it fail.
	undo func(context.Context, []store.Started) (int, error)
	// settlePushes tells landed pushes from lost ones (queue.SettlePushes);
	// a field so that tests can make it fail.
	settlePushes func(context.Context, []string) (map[string]time.Time, error)

	pruneMu    sync.Mutex
	pruneAfter string // where the per-record prune walk goes on
	heldMu     sync.Mutex
	heldLogged time.Time // when held timeouts were last logged
}

// New returns a Scheduler.
func New(st *store.Store, q *queue.Queue, cfg Config) *Scheduler {
	cfg = cfg.withDefaults(q)
	return &Scheduler{store: st, queue: q, cfg: cfg, rules: refresh.NewRulesCache(0), log: cfg.Logger, undo: st.UndoStarts,
		settlePushes: q.SettlePushes}
}

// TickResult counts what one tick did.
type TickResult struct {
	Started  int // attempts started whose jobs were pushed in time
	TimedOut int // running attempts failed with reason "timeout"
	Disabled int // records disabled by a timeout that was their final failure
	Undone   int // starts reverted because the push failed or landed too late
	Redriven int // attempts past their deadline whose jobs were never pushed: undone and started again, not timed out
	Late     int // starts whose jobs landed with less than half their timeout left (undone)
	// Unreadable counts rows disabled because their stored schedule or
	// policy cannot be read (not parked: that is BreakerParked).
	Unreadable int
	Held       int // attempts past their deadline not timed out yet: their results may still be waiting
	// BreakerParked counts due rows parked by their upstream's open
	// breaker, Waiting those a limit of their upstream held back, Released
	// the parked rows released (probes, or after a close).
	BreakerParked, Waiting, Released int
	// BreakerTransitions counts the breakers' transitions the tick made
	// (opened on timeouts, half-open after a cool-down), by the state they
	// went to.
	BreakerTransitions map[upstream.BreakerState]int
	// HeldWhy says why timeouts are held, when Held > 0.
	HeldWhy string
	Claimed int // rows claimed
}

// Tick runs one claim-plan-save-commit-push cycle.
func (s *Scheduler) Tick(ctx context.Context) (TickResult, error) {
	// The watermark is read before the claim: an older watermark only
	// holds more.
	watermark, werr := s.cfg.Watermark(ctx)
	if werr != nil {
		watermark = time.Time{}
	}
	var res TickResult
	var plan tickPlan
	var upTo, tickNow time.Time
	var settleErr error
	token := s.cfg.NewUID() // every start of the tick records it: its push's token
	err := s.store.InTx(ctx, func(tx *store.Tx) error {
		now := tx.Now()
		tickNow = now
		upTo = timeoutUpTo(now, watermark, s.cfg.MaxResultWait)
		rows, err := tx.ClaimDue(ctx, s.cfg.Batch, upTo)
		if err != nil {
			return err
		}
		waking, err := tx.WakingUpstreams(ctx, s.cfg.Batch)
		if err != nil {
			return err
		}
		ups, err := lockUpstreams(ctx, tx, rows, waking)
		if err != nil {
			return err
		}
		// Which of the expired attempts' jobs were ever pushed: asked
		// before planning, so that the plan stays pure.
		var pushes map[string]time.Time
		pushes, settleErr = s.settle(ctx, rows, now, upTo)
		plan, err = planTick(rows, now, planOptions{
			rules: s.rules.Get, draw: s.cfg.Draw, newUID: s.cfg.NewUID, timeoutUpTo: upTo,
			pushToken: token, pushes: pushes, unknownPushUpTo: now.Add(-s.cfg.MaxResultWait),
			upstreams: ups,
		})
		if err != nil {
			return err
		}
		if err := plan.wake(ctx, tx, ups, waking, now, s.cfg.Batch); err != nil {
			return err
		}
		if err := tx.SaveUpstreams(ctx, ups); err != nil {
			return err
		}
		res.Claimed = len(rows)
		if upTo.Before(now) {
			n, err := tx.CountExpiredAfter(ctx, upTo, s.cfg.Batch)
			if err != nil {
				return err
			}
			plan.held += n
		}
		if err := tx.Save(ctx, plan.save); err != nil {
			return err
		}
		// Parked after the save: a row can be both (a timed-out attempt
		// whose retry is due at once, parked by an open breaker), and Save
		// finds rows by the ctid they were locked with, which Park changes.
		if err := tx.Park(ctx, plan.park); err != nil {
			return err
		}
		// The breakers' transitions are events of this transaction: they
		// commit or roll back with it (README, "Events and webhooks").
		breakers, err := tx.BreakerEvents(ctx, plan.breakerEvents)
		if err != nil {
			return err
		}
		plan.events = append(plan.events, breakers...)
		if err := tx.WriteEvents(ctx, plan.events); err != nil {
			return err
		}
		return tx.RecordAttempts(ctx, plan.ended)
	})
	if err != nil {
		return TickResult{}, fmt.Errorf("tick: %w", err)
	}
	res.TimedOut, res.Disabled, res.Unreadable, res.Held = plan.timedOut, plan.disabled, len(plan.unreadable), plan.held
	res.Redriven = len(plan.redriven)
	for _, r := range plan.redriven {
		s.log.Debug("start redriven: its job was never pushed", "uid", r.uid, "attempt_uid", r.attemptUID, "attempt_no", r.attemptNo)
	}
	if settleErr != nil {
		s.log.Warn("cannot ask Redis which jobs were pushed; holding those timeouts", "err", settleErr)
	}
	if res.Redriven > 0 {
		s.log.Warn("attempts whose jobs were never pushed started again instead of timing out",
			"redriven", res.Redriven, "first_uid", plan.redriven[0].uid, "first_attempt_uid", plan.redriven[0].attemptUID)
	}
	res.BreakerParked, res.Waiting, res.Released = len(plan.park), plan.waiting, plan.released
	s.logBreakers(plan.events)
	res.BreakerTransitions = upstream.CountByState(plan.breakerEvents)
	for _, p := range plan.unreadable {
		s.log.Error("record disabled: its stored schedule or policy cannot be read", "uid", p.uid, "reason", p.reason)
	}
	for _, a := range plan.ended {
		s.log.Debug("attempt ended", "uid", a.UID, "attempt_no", a.AttemptNo, "outcome", a.Outcome, "decision", a.Decision)
	}
	if res.Held > 0 {
		res.HeldWhy = heldWhy(watermark, werr, s.cfg.MaxResultWait)
		if settleErr != nil {
			res.HeldWhy = fmt.Sprintf("whether their jobs were pushed cannot be asked (%v); timing out only attempts past their deadline by %v; %s",
				settleErr, s.cfg.MaxResultWait, res.HeldWhy)
		}
		s.logHeld(res, tickNow, upTo)
	}

	// Push first: nothing else may delay the jobs.
	pushErr := s.pushStarts(ctx, token, plan.starts, &res, plan.cancel)
	// Then tell the workers of ended attempts (timed out, unreadable, undone)
	// to stop: best effort, their results are stale anyway.
	if err := s.queue.Cancel(ctx, plan.cancel); err != nil {
		s.log.Warn("could not mark ended attempts cancelled", "attempts", len(plan.cancel), "err", err)
	}
	return res, pushErr
}

// pushStarts pushes the jobs of the starts, retrying with one token, and
// undoes the starts whose jobs did not land, or landed too late for a
// worker to use them; the undone attempts are added to cancel.
func (s *Scheduler) pushStarts(ctx context.Context, token string, starts []start, res *TickResult, cancel map[string]time.Time) error {
	if len(starts) == 0 {
		return nil
	}
	jobs := make([][]byte, len(starts))
	for i, st := range starts {
		jobs[i] = st.job.Encode()
		s.log.Debug("attempt started", "uid", st.job.BigTableUID, "attempt_no", st.job.AttemptNo,
			"attempt_uid", st.job.AttemptUID, "deadline_at", st.job.DeadlineAt)
	}
	landed, pushErr := s.push(ctx, token, pushTokenTTL(starts, s.cfg.MaxResultWait), jobs)
	undo := starts
	if pushErr == nil {
		undo = lateStarts(starts, landed)
		res.Late = len(undo)
		if len(undo) > 0 {
			s.log.Warn("jobs landed too late for their workers to use them; undoing those starts",
				"late", len(undo), "landed", landed, "first_deadline", undo[0].job.DeadlineAt)
		}
	}
	res.Started = len(starts) - len(undo)
	if len(undo) == 0 {
		return nil
	}
	n, undoErr := s.undoStarts(ctx, undo)
	res.Undone = n
	if undoErr == nil {
		// Their jobs may have landed (late, or before a lost reply): Go
		// workers skip or stop them.
		for _, st := range undo {
			cancel[st.job.AttemptUID] = st.job.DeadlineAt
		}
	}
	switch {
	case pushErr != nil && undoErr != nil:
		return fmt.Errorf("tick: %w; undo starts: %v (their deadlines will time them out)", pushErr, undoErr)
	case pushErr != nil:
		return fmt.Errorf("tick: %w (%d starts undone)", pushErr, n)
	case undoErr != nil:
		return fmt.Errorf("tick: undo %d late starts: %w (their deadlines will time them out)", len(undo), undoErr)
	}
	return nil
}

// push pushes the jobs, trying up to PushAttempts times with the tick's
// token (remembered for ttl), and returns when they landed (Redis' clock).
// A token settled as never pushed (another scheduler redrove the starts)
// is not retried.
func (s *Scheduler) push(ctx context.Context, token string, ttl time.Duration, jobs [][]byte) (time.Time, error) {
	delay := 100 * time.Millisecond
	for i := 1; ; i++ {
		landed, _, err := s.queue.PushJobsOnceFor(ctx, token, jobs, ttl)
		if err == nil {
			return landed, nil
		}
		if i >= s.cfg.PushAttempts || ctx.Err() != nil || errors.Is(err, queue.ErrPushRefused) {
			return time.Time{}, err
		}
		s.log.Warn("push failed; retrying with the same token", "jobs", len(jobs), "try", i, "err", err)
		if wait.Sleep(ctx, delay) != nil {
			return time.Time{}, err
		}
		delay = min(2*delay, time.Second)
	}
}

// undoAttempts bounds the tries of one undo.
const undoAttempts = 3

// undoStarts reverts the starts, retrying a failed undo a few times.
func (s *Scheduler) undoStarts(ctx context.Context, starts []start) (int, error) {
	list := make([]store.Started, len(starts))
	for i, st := range starts {
		list[i] = store.Started{UID: st.job.BigTableUID, AttemptUID: st.job.AttemptUID, RefreshAt: st.prevRefreshAt}
	}
	// The undo must run even when the tick is being cancelled.
	base := context.WithoutCancel(ctx)
	delay := 200 * time.Millisecond
	for i := 1; ; i++ {
		undoCtx, cancel := context.WithTimeout(base, 10*time.Second)
		n, err := s.undo(undoCtx, list)
		cancel()
		if err == nil || i >= undoAttempts {
			return n, err
		}
		s.log.Warn("undo of starts failed; retrying", "starts", len(list), "try", i, "err", err)
		wait.Sleep(base, delay)
		delay *= 2
	}
}

func heldWhy(watermark time.Time, werr error, maxWait time.Duration) string {
	switch {
	case werr != nil:
		return fmt.Sprintf("the pollers' watermark cannot be read (%v); timing out only attempts past their deadline by %v", werr, maxWait)
	case watermark.IsZero():
		return fmt.Sprintf("no poller has reported a drained output list yet; timing out only attempts past their deadline by %v", maxWait)
	default:
		return fmt.Sprintf("the pollers have applied the results pushed before %s only (down or behind); timing out only attempts whose deadline is before it, or past by %v",
			watermark.UTC().Format(time.RFC3339Nano), maxWait)
	}
}

// heldWarnAfter is how far behind the tick's time the timeouts may be held
// before it is a warning. Holding an attempt whose deadline passed a moment
// ago is the normal case (its result may be in the output list, waiting for
// the pollers' next drain): Debug. Held this long, the pollers are down or
// behind: Warn.
const heldWarnAfter = 10 * time.Second

// logHeld reports held timeouts at most every 30 seconds: at Debug while
// the timeouts are held less than heldWarnAfter behind now (the tick's
// time), at Warn beyond.
func (s *Scheduler) logHeld(res TickResult, now, upTo time.Time) {
	if behind := now.Sub(upTo); behind < heldWarnAfter {
		s.log.Debug("timeouts held until the pollers' next drain", "held", res.Held, "timing_out_up_to", upTo)
		return
	}
	s.heldMu.Lock()
	clock := s.cfg.Now()
	due := clock.Sub(s.heldLogged) >= 30*time.Second
	if due {
		s.heldLogged = clock
	}
	s.heldMu.Unlock()
	if due {
		s.log.Warn("timeouts held: their results may still be waiting for a poller", "held", res.Held,
			"timing_out_up_to", upTo, "why", res.HeldWhy)
	}
}

// PruneResult counts what one prune step deleted.
type PruneResult struct {
	Older  int // attempts older than the retention's MaxAge
	Beyond int // attempts beyond a record's KeepPerRecord newest
}

// Prune runs one bounded step of the history's retention: up to
// Retention.Batch attempts older than MaxAge, and up to Batch attempts
// beyond KeepPerRecord of the next Retention.Records records.
func (s *Scheduler) Prune(ctx context.Context) (PruneResult, error) {
	r := s.cfg.Retention
	var res PruneResult
	var err error
	if r.MaxAge > 0 {
		if res.Older, err = s.store.PruneAttemptsOlder(ctx, r.MaxAge, r.Batch); err != nil {
			return res, err
		}
	}
	if r.KeepPerRecord > 0 {
		s.pruneMu.Lock()
		defer s.pruneMu.Unlock()
		var next string
		if res.Beyond, next, err = s.store.PruneAttemptsBeyond(ctx, r.KeepPerRecord, s.pruneAfter, r.Records, r.Batch); err != nil {
			return res, err
		}
		s.pruneAfter = next
	}
	return res, nil
}

// Run ticks until ctx is cancelled, then finishes the tick in hand and
// returns nil. A tick that filled its batch is followed at once by another;
// errors are logged and retried with exponential backoff. Between ticks it
// prunes the history every Retention.Every.
func (s *Scheduler) Run(ctx context.Context) error {
	s.log.Info("scheduler running", "interval", s.cfg.Interval, "batch", s.cfg.Batch,
		"max_result_wait", s.cfg.MaxResultWait, "keep_per_record", s.cfg.Retention.KeepPerRecord, "max_age", s.cfg.Retention.MaxAge)
	backoff := time.Duration(0)
	nextPrune := s.cfg.Now()
	for {
		if ctx.Err() != nil {
			s.log.Info("scheduler stopped")
			return nil
		}
		// The tick is not cancelled by shutdown: it finishes its batch.
		tickCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		tickStart := s.cfg.Now()
		res, err := s.Tick(tickCtx)
		cancel()
		if s.cfg.Observer != nil {
			s.cfg.Observer.ObserveTick(res, s.cfg.Now().Sub(tickStart), err)
		}
		pause := s.cfg.Interval
		switch {
		case err != nil:
			backoff = min(max(2*backoff, s.cfg.Interval), s.cfg.MaxBackoff)
			pause = backoff
			s.log.Error("scheduler tick failed; retrying", "err", err, "retry_in", backoff, "undone", res.Undone)
		default:
			if backoff > 0 {
				s.log.Info("scheduler recovered")
			}
			backoff = 0
			if res.Claimed > 0 || res.Late > 0 {
				s.log.Info("tick", "started", res.Started, "timed_out", res.TimedOut, "redriven", res.Redriven, "disabled", res.Disabled,
					"unreadable", res.Unreadable, "late_undone", res.Late, "held", res.Held,
					"breaker_parked", res.BreakerParked, "waiting", res.Waiting, "released", res.Released)
			}
			if res.Claimed >= s.cfg.Batch {
				pause = 0 // more may be due: go on at once
			}
		}
		if now := s.cfg.Now(); !now.Before(nextPrune) {
			nextPrune = now.Add(s.cfg.Retention.Every)
			pruneCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			start := time.Now()
			pr, err := s.Prune(pruneCtx)
			cancel()
			if err != nil {
				s.log.Warn("history prune step failed", "err", err)
			} else if pr.Older+pr.Beyond > 0 {
				s.log.Info("history pruned", "older", pr.Older, "beyond", pr.Beyond, "took", time.Since(start))
			}
		}
		if pause > 0 {
			if err := wait.Sleep(ctx, pause); err != nil {
				continue
			}
		}
	}
}
