// Package worker is the Go library for writing bigtables workers: it pops
// jobs, runs a handler with a context whose deadline is the job's, and pushes
// the result. Workers in other languages speak the same protocol (package
// protocol); this is the reference.
//
//	err := worker.Run(ctx, worker.Options{Queue: q, Concurrency: 4},
//		func(ctx context.Context, job protocol.Job) error {
//			worker.Status(ctx, "downloading")
//			if err := refresh(ctx, job.InputURL); err != nil {
//				return err // retried by the record's policy
//			}
//			return nil // success
//		})
//
// Return Permanent(reason, err) for a failure retrying cannot fix: the record
// is disabled at once and reason is shown to the customer. Return
// Kinded(kind, retryAfter, err) to name the failure's kind (rate_limited,
// upstream_5xx, ...) and the delay the upstream asked for: the record's
// policy may route kinds (on_kind) and retry_after sets the delay.
//
// Jobs whose deadline has passed, or whose attempt was cancelled, are dropped
// without calling the handler. A final result is pushed at most once per
// attempt. On shutdown the jobs in hand finish; a job stopped early
// (Options.Abort, Options.ShutdownGrace) pushes nothing.
package worker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/bigtables/bigtables/internal/wait"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
)

// Handler refreshes one record. ctx ends at the job's deadline. A nil error
// reports success, any other error a retryable failure with the error's text
// as message, and a *PermanentError a failure that is not retryable.
type Handler func(ctx context.Context, job protocol.Job) error

// PermanentError is a failure that retrying cannot fix.
type PermanentError struct {
	// Reason is shown to the customer when the record is disabled, e.g.
	// "Provided URL is invalid: https://example.com/broken".
	Reason string
	Err    error
}

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return e.Reason
	}
	return e.Err.Error()
}

func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err as a failure that is not retryable, with a reason for
// the customer.
func Permanent(reason string, err error) error { return &PermanentError{Reason: reason, Err: err} }

// Options configure Run. Queue is required.
type Options struct {
	Queue *queue.Queue
	// Concurrency is how many jobs run at once. Default 1.
	Concurrency int
	// PopTimeout is how long one blocking pop waits (whole seconds); shutdown
	// is noticed between pops. Default 1s.
	PopTimeout time.Duration
	// CancelPoll is how often a running job checks whether its attempt was
	// superseded (see queue.Names.CancelKey); its context is then cancelled
	// with cause ErrSuperseded. Default 1s; negative disables the check (a
	// job already cancelled when popped is still skipped).
	CancelPoll time.Duration
	// ShutdownGrace bounds how long Run lets the jobs in hand run once its
	// context is cancelled; then they are stopped as by Abort. Zero: each
	// job runs to its end, at the latest its deadline.
	ShutdownGrace time.Duration
	// Abort, once done, stops the jobs in hand at once: their contexts are
	// cancelled with cause ErrStopped, and no result is pushed for a job so
	// stopped unless its handler still returned success (the attempt times
	// out at its deadline, as after a crash). Run also stops popping. Nil:
	// never (a second SIGTERM is the usual trigger).
	Abort context.Context
	// Stats, if set, counts what happened to the jobs; Run logs the totals
	// when it stops either way.
	Stats *Stats
	// Now is the clock that decides whether a job's deadline has passed.
	// Default time.Now.
	Now func() time.Time
	// Logger default slog.Default().
	Logger *slog.Logger
}

// Stats counts jobs by what became of them. Safe for concurrent use.
type Stats struct {
	// Pushed counts jobs whose result (success or failure) was pushed.
	Pushed atomic.Int64
	// Expired counts jobs skipped without work: their deadline had passed.
	Expired atomic.Int64
	// Cancelled counts jobs skipped without work: their attempt was
	// cancelled (superseded) before they were popped.
	Cancelled atomic.Int64
	// Superseded counts jobs stopped while running because their attempt was
	// cancelled; nothing is pushed for them.
	Superseded atomic.Int64
	// Stopped counts jobs stopped by a shutdown (Abort, ShutdownGrace);
	// nothing is pushed for them.
	Stopped atomic.Int64
	// TimedOut counts jobs whose handler failed because their deadline
	// passed; nothing is pushed for them (a result would be late), and the
	// attempt ends as a timeout.
	TimedOut atomic.Int64
	// Lost counts results that could not be pushed before their attempt
	// ended (or before an abort).
	Lost atomic.Int64
	// Duplicates counts results not pushed because a final result of their
	// attempt was pushed already (another worker was handed the same job).
	Duplicates atomic.Int64
	// Malformed counts popped values that are not valid jobs.
	Malformed atomic.Int64
}

func (s *Stats) logAttrs() []any {
	return []any{"pushed", s.Pushed.Load(), "skipped_expired", s.Expired.Load(), "skipped_cancelled", s.Cancelled.Load(),
		"superseded", s.Superseded.Load(), "stopped", s.Stopped.Load(), "timed_out", s.TimedOut.Load(), "lost", s.Lost.Load(), "duplicates", s.Duplicates.Load(), "malformed", s.Malformed.Load()}
}

// ErrSuperseded is the cause of a handler's context cancellation when the
// attempt was superseded: a person updated the record, or it timed out. Its
// result would be ignored, so none is pushed.
var ErrSuperseded = errors.New("attempt superseded")

// ErrStopped is the cause of a handler's context cancellation when the
// worker shuts down without waiting for the job (Options.Abort,
// Options.ShutdownGrace). No failure is pushed for it: the worker's own
// shutdown must not count as the record's failure.
var ErrStopped = errors.New("worker stopped before the job ended")

type reporterKey struct{}

type reporter struct {
	q   *queue.Queue
	job protocol.Job
}

// Status reports progress on the job the context belongs to; the message
// becomes the record's status_message. It returns an error outside a handler.
// A status is pushed with a plain RPUSH, which go-redis may re-send after a
// lost reply: a duplicated status sets the same message again, harmlessly.
func Status(ctx context.Context, message string) error {
	r, ok := ctx.Value(reporterKey{}).(*reporter)
	if !ok {
		return errors.New("worker.Status: the context is not a handler's")
	}
	res := protocol.Result{BigTableUID: r.job.BigTableUID, AttemptUID: r.job.AttemptUID, Type: protocol.Status, Message: message}
	return r.q.PushResult(ctx, res.Encode())
}

// Run pops and handles jobs until ctx is cancelled, then stops popping, lets
// the jobs in hand finish (each is bounded by its own deadline, and all by
// Options.ShutdownGrace and Options.Abort), and returns nil. Jobs whose
// deadline has passed or whose attempt was cancelled are dropped without
// work. Redis errors are logged and retried with backoff.
func Run(ctx context.Context, opts Options, h Handler) error {
	if opts.Queue == nil {
		return errors.New("worker.Run: Options.Queue is required")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	opts = opts.withDefaults()
	log := opts.Logger
	abort, cancelAbort := context.WithCancel(opts.Abort)
	defer cancelAbort()
	opts.Abort = abort
	if opts.ShutdownGrace > 0 {
		stopGrace := context.AfterFunc(ctx, func() {
			t := time.NewTimer(opts.ShutdownGrace)
			defer t.Stop()
			select {
			case <-t.C:
				log.Warn("shutdown grace period over: stopping the jobs in hand; no result is pushed for them", "grace", opts.ShutdownGrace)
				cancelAbort()
			case <-abort.Done():
			}
		})
		defer stopGrace()
	}
	names := opts.Queue.Names()
	log.Info("worker running", "concurrency", opts.Concurrency, "input", names.Input, "output", names.Output)
	var wg sync.WaitGroup
	for range opts.Concurrency {
		wg.Go(func() { loop(ctx, opts, h, log) })
	}
	wg.Wait()
	log.Info("worker stopped", opts.Stats.logAttrs()...)
	return nil
}

func (o Options) withDefaults() Options {
	if o.PopTimeout <= 0 {
		o.PopTimeout = time.Second
	}
	if o.CancelPoll == 0 {
		o.CancelPoll = time.Second
	}
	if o.Abort == nil {
		o.Abort = context.Background()
	}
	if o.Stats == nil {
		o.Stats = new(Stats)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func loop(ctx context.Context, opts Options, h Handler, log *slog.Logger) {
	// A job in hand outlives ctx: it ends by itself, at its deadline, or
	// when opts.Abort is done.
	work := context.WithoutCancel(ctx)
	backoff := time.Duration(0)
	for ctx.Err() == nil && opts.Abort.Err() == nil {
		raw, err := opts.Queue.PopJob(work, opts.PopTimeout)
		if err != nil {
			backoff = min(max(2*backoff, 100*time.Millisecond), 10*time.Second)
			log.Error("pop job failed; retrying", "err", err, "retry_in", backoff)
			wait.Sleep(ctx, backoff)
			continue
		}
		backoff = 0
		if raw == nil {
			continue
		}
		job, err := protocol.DecodeJob(raw)
		if err != nil {
			opts.Stats.Malformed.Add(1)
			log.Error("job skipped: cannot decode it", "err", err, "job", protocol.Clip(string(raw), 200))
			continue
		}
		Handle(work, opts, job, h)
	}
}

// Handle runs h on one job and pushes its result. It is what Run does for
// each job; call it directly to drive jobs from elsewhere (Options.Abort
// applies, Options.ShutdownGrace is Run's). A job whose
// deadline has passed, or whose attempt was cancelled, is dropped without
// calling h: it can no longer count, and skipping it keeps the input list
// bounded by what can still run when workers lag.
func Handle(ctx context.Context, opts Options, job protocol.Job, h Handler) {
	opts = opts.withDefaults()
	q, log := opts.Queue, opts.Logger
	if skip(ctx, opts, job) {
		return
	}
	dctx, cancelDeadline := context.WithDeadline(ctx, job.DeadlineAt)
	hctx, cancel := context.WithCancelCause(dctx)
	stopAbort := context.AfterFunc(opts.Abort, func() { cancel(ErrStopped) })
	hctx = context.WithValue(hctx, reporterKey{}, &reporter{q: q, job: job})
	stopWatch := watchCancel(hctx, opts, job.AttemptUID, cancel)
	err := safeCall(hctx, h, job)
	stopWatch()
	stopAbort()
	cause := context.Cause(hctx)
	cancel(nil)
	cancelDeadline()
	switch {
	case errors.Is(cause, ErrSuperseded):
		opts.Stats.Superseded.Add(1)
		log.Info("job stopped: its attempt was superseded", "uid", job.BigTableUID, "attempt_uid", job.AttemptUID)
		return
	case errors.Is(cause, ErrStopped) && err != nil:
		// Its failure is ours, not the record's: push nothing, and the
		// attempt times out at its deadline as after a crash.
		opts.Stats.Stopped.Add(1)
		log.Warn("job stopped by the shutdown: no result pushed; the attempt times out at its deadline",
			"uid", job.BigTableUID, "attempt_uid", job.AttemptUID, "deadline_at", job.DeadlineAt)
		return
	case errors.Is(cause, context.DeadlineExceeded) && err != nil:
		// The deadline cut the work short: a result pushed now reaches the
		// output list after deadline_at and changes nothing (docs/protocol.md,
		// "Deadlines"). Push nothing; the attempt ends as a timeout.
		opts.Stats.TimedOut.Add(1)
		log.Info("job stopped at its deadline: no result pushed; the attempt times out",
			"uid", job.BigTableUID, "attempt_no", job.AttemptNo, "deadline_at", job.DeadlineAt, "err", err)
		return
	}
	res := protocol.Result{BigTableUID: job.BigTableUID, AttemptUID: job.AttemptUID, Type: protocol.Success}
	if err != nil {
		res.Type, res.Message = protocol.Failure, protocol.Clip(err.Error(), protocol.MaxTextLen)
		var perm *PermanentError
		if errors.As(err, &perm) {
			no := false
			res.Retryable, res.UserFriendlyReason = &no, perm.Reason
		}
		var kinded *KindError
		if errors.As(err, &kinded) {
			res.Kind, res.RetryAfter = protocolKind(kinded.Kind), kinded.RetryAfter
		}
	}
	log.Debug("job done", "uid", job.BigTableUID, "attempt_no", job.AttemptNo, "type", res.Type, "message", res.Message)
	push(ctx, opts, job, res)
}

// protocolKind makes a handler's kind one the protocol accepts (at most
// protocol.MaxKindLen bytes, no spaces or control characters), so a
// careless kind never sends the failure to the dead-letter list.
func protocolKind(kind string) string {
	kind = strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return '_'
		}
		return r
	}, kind)
	for len(kind) > protocol.MaxKindLen {
		_, size := utf8.DecodeLastRuneInString(kind)
		kind = kind[:len(kind)-size]
	}
	return kind
}

// skip reports whether the job can no longer count, and says why.
func skip(ctx context.Context, opts Options, job protocol.Job) bool {
	log := opts.Logger
	if !opts.Now().Before(job.DeadlineAt) {
		opts.Stats.Expired.Add(1)
		log.Info("job skipped: its deadline has passed", "uid", job.BigTableUID, "attempt_uid", job.AttemptUID, "deadline_at", job.DeadlineAt)
		return true
	}
	cancelled, err := opts.Queue.Cancelled(ctx, job.AttemptUID)
	if err != nil {
		// Run it: a running job still notices its cancellation later.
		log.Debug("cannot check whether the job was cancelled; running it", "uid", job.BigTableUID, "err", err)
		return false
	}
	if cancelled {
		opts.Stats.Cancelled.Add(1)
		log.Info("job skipped: its attempt was cancelled", "uid", job.BigTableUID, "attempt_uid", job.AttemptUID)
		return true
	}
	return false
}

// push delivers a final result until it lands or the attempt is over (a
// later result is stale).
//
// The push is idempotent (queue.PushResultOnce: one final result per attempt,
// checked and pushed in one script), so go-redis re-sending it after a lost
// reply, or this loop retrying after an error whose outcome is unknown, can
// never deliver it twice; nor can two workers handed the same attempt
// deliver a success and a failure. Turning go-redis retries off instead
// would not be enough: after a lost reply the outcome is unknown, and this
// loop must retry to survive a Redis blip.
func push(ctx context.Context, opts Options, job protocol.Job, res protocol.Result) {
	log := opts.Logger
	pushCtx, cancelPush := context.WithDeadline(ctx, job.DeadlineAt.Add(5*time.Second))
	defer cancelPush()
	// The marker outlives every retry of this push.
	ttl := job.DeadlineAt.Sub(opts.Now()) + time.Minute
	token := rand.Text()
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		pushed, err := opts.Queue.PushResultOnce(pushCtx, job.AttemptUID, token, res.Encode(), ttl)
		if err == nil {
			if pushed {
				opts.Stats.Pushed.Add(1)
			} else {
				opts.Stats.Duplicates.Add(1)
				log.Info("result not pushed: a final result of this attempt was pushed already",
					"uid", job.BigTableUID, "attempt_uid", job.AttemptUID, "type", res.Type)
			}
			return
		}
		if pushCtx.Err() != nil || opts.Abort.Err() != nil {
			opts.Stats.Lost.Add(1)
			log.Error("result lost: could not push it before the deadline or the shutdown; the attempt will time out",
				"uid", job.BigTableUID, "attempt_uid", job.AttemptUID, "err", err)
			return
		}
		log.Warn("push result failed; retrying", "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-pushCtx.Done():
		case <-opts.Abort.Done():
		}
		t.Stop()
	}
}

// watchCancel polls the attempt's cancellation marker until stopped, and
// cancels the handler's context with ErrSuperseded when it appears.
func watchCancel(ctx context.Context, opts Options, attemptUID string, cancel context.CancelCauseFunc) (stop func()) {
	if opts.CancelPoll < 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(opts.CancelPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if gone, err := opts.Queue.Cancelled(ctx, attemptUID); err == nil && gone {
					cancel(ErrSuperseded)
					return
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// safeCall turns a handler panic into a failure.
func safeCall(ctx context.Context, h Handler, job protocol.Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h(ctx, job)
}
