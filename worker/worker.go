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
// is disabled at once and reason is shown to the customer.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

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
	// with cause ErrSuperseded. Default 1s; negative disables the check.
	CancelPoll time.Duration
	// Logger default slog.Default().
	Logger *slog.Logger
}

// ErrSuperseded is the cause of a handler's context cancellation when the
// attempt was superseded: a person updated the record, or it timed out. Its
// result would be ignored, so none is pushed.
var ErrSuperseded = errors.New("attempt superseded")

type reporterKey struct{}

type reporter struct {
	q   *queue.Queue
	job protocol.Job
}

// Status reports progress on the job the context belongs to; the message
// becomes the record's status_message. It returns an error outside a handler.
func Status(ctx context.Context, message string) error {
	r, ok := ctx.Value(reporterKey{}).(*reporter)
	if !ok {
		return errors.New("worker.Status: the context is not a handler's")
	}
	res := protocol.Result{BigTableUID: r.job.BigTableUID, AttemptUID: r.job.AttemptUID, Type: protocol.Status, Message: message}
	return r.q.PushResult(ctx, res.Encode())
}

// Run pops and handles jobs until ctx is cancelled, then stops popping, lets
// the jobs in hand finish (each is bounded by its own deadline), and returns
// nil. Redis errors are logged and retried with backoff.
func Run(ctx context.Context, opts Options, h Handler) error {
	if opts.Queue == nil {
		return errors.New("worker.Run: Options.Queue is required")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	opts = opts.withDefaults()
	log := opts.Logger
	log.Info("worker running", "concurrency", opts.Concurrency, "queue", opts.Queue.Names().Input)
	var wg sync.WaitGroup
	for range opts.Concurrency {
		wg.Go(func() { loop(ctx, opts, h, log) })
	}
	wg.Wait()
	log.Info("worker stopped")
	return nil
}

func (o Options) withDefaults() Options {
	if o.PopTimeout <= 0 {
		o.PopTimeout = time.Second
	}
	if o.CancelPoll == 0 {
		o.CancelPoll = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func loop(ctx context.Context, opts Options, h Handler, log *slog.Logger) {
	work := context.WithoutCancel(ctx)
	backoff := time.Duration(0)
	for ctx.Err() == nil {
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
			log.Error("job skipped: cannot decode it", "err", err, "job", protocol.Clip(string(raw), 200))
			continue
		}
		Handle(work, opts, job, h)
	}
}

// Handle runs h on one job and pushes its result. It is what Run does for
// each job; call it directly to drive jobs from elsewhere.
func Handle(ctx context.Context, opts Options, job protocol.Job, h Handler) {
	opts = opts.withDefaults()
	q, log := opts.Queue, opts.Logger
	if !time.Now().Before(job.DeadlineAt) {
		log.Warn("job skipped: its deadline has passed", "uid", job.BigTableUID, "attempt_uid", job.AttemptUID)
		return
	}
	dctx, cancelDeadline := context.WithDeadline(ctx, job.DeadlineAt)
	hctx, cancel := context.WithCancelCause(dctx)
	hctx = context.WithValue(hctx, reporterKey{}, &reporter{q: q, job: job})
	stopWatch := watchCancel(hctx, opts, job.AttemptUID, cancel)
	err := safeCall(hctx, h, job)
	stopWatch()
	superseded := errors.Is(context.Cause(hctx), ErrSuperseded)
	cancel(nil)
	cancelDeadline()
	if superseded {
		log.Info("job stopped: its attempt was superseded", "uid", job.BigTableUID, "attempt_uid", job.AttemptUID)
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
	}
	log.Debug("job done", "uid", job.BigTableUID, "attempt_no", job.AttemptNo, "type", res.Type, "message", res.Message)
	// Push until it lands or the attempt is over (a later result is stale).
	pushCtx, cancelPush := context.WithDeadline(ctx, job.DeadlineAt.Add(5*time.Second))
	defer cancelPush()
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		err := q.PushResult(pushCtx, res.Encode())
		if err == nil {
			return
		}
		if pushCtx.Err() != nil {
			log.Error("result lost: could not push it before the deadline; the attempt will time out",
				"uid", job.BigTableUID, "attempt_uid", job.AttemptUID, "err", err)
			return
		}
		log.Warn("push result failed; retrying", "err", err, "retry_in", delay)
		wait.Sleep(pushCtx, delay)
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
