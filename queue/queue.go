// Package queue owns every Redis key and command bigtables uses: pushing jobs,
// draining results into a per-poller processing list that a crash cannot
// lose, acknowledging them, leases and the adoption of dead pollers' batches,
// the watermark that says which results have all been applied, and the
// blocking pop workers use.
//
// Keys, all derived from the three configured queue names:
//
//	<input>                        jobs (list, RPUSH by the scheduler, LPOP by workers)
//	<output>                       results (list, RPUSH by workers)
//	<output>:processing:<poller>   results a poller drained and has not yet acknowledged
//	<output>:inflight              batches in processing lists (hash: poller id -> "L T token", see Batch)
//	<output>:acked                 last batch each poller acknowledged (hash: poller id -> token)
//	<output>:batches               batch token counter (string)
//	<output>:watermark             Redis time the output list was last seen empty (string, Unix µs)
//	<output>:pollers               leases (sorted set: poller id -> lease expiry, Redis time, Unix µs)
//	<output>:owners                process holding each poller id (hash: poller id -> instance token)
//	<dead>                         dead letters (list of protocol.DeadLetter JSON, capped)
//	<dead>:dropped                 dead letters dropped over the cap (counter)
//	<input>:cancelled:<attempt>    set while a superseded attempt's worker should stop (string "1", expires)
//	<output>:pushed:<attempt>      set once the Go worker library pushed the attempt's final result (the push's token, expires)
//	<input>:push:<token>           a tick's job push ran, and when; or "never" once settled as not pushed (string, expires; see PushJobsOnce, SettlePushes)
//
// Every time a script compares or stores is Redis's own (TIME, read inside
// the script), so processes whose clocks disagree still agree on leases and
// lateness; tests inject a clock instead (WithClock).
//
// In Redis Cluster the keys of one script must share a hash slot: give the
// queue names a common hash tag, e.g. "{bt}-input", "{bt}-output",
// "{bt}-output-dead".
package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bigtables/bigtables/internal/redact"
	"github.com/bigtables/bigtables/protocol"
	"github.com/redis/go-redis/v9"
)

// Names are the three lists of the wire protocol.
type Names struct {
	Input  string // jobs; default "bigtables-input"
	Output string // results; default "bigtables-output"
	Dead   string // dead letters; default "bigtables-output-dead"
}

// DefaultNames returns the protocol's default queue names.
func DefaultNames() Names {
	return Names{Input: protocol.DefaultInputQueue, Output: protocol.DefaultOutputQueue, Dead: protocol.DefaultDeadQueue}
}

// Validate refuses empty or clashing names.
func (n Names) Validate() error {
	if n.Input == "" || n.Output == "" || n.Dead == "" {
		return errors.New("queue names must not be empty")
	}
	if n.Input == n.Output || n.Input == n.Dead || n.Output == n.Dead {
		return fmt.Errorf("queue names must differ: input %q, output %q, dead %q", n.Input, n.Output, n.Dead)
	}
	return nil
}

func (n Names) processing(poller string) string { return n.Output + ":processing:" + poller }
func (n Names) pollers() string                 { return n.Output + ":pollers" }
func (n Names) owners() string                  { return n.Output + ":owners" }
func (n Names) inflight() string                { return n.Output + ":inflight" }
func (n Names) acked() string                   { return n.Output + ":acked" }
func (n Names) batches() string                 { return n.Output + ":batches" }
func (n Names) watermark() string               { return n.Output + ":watermark" }
func (n Names) dropped() string                 { return n.Dead + ":dropped" }

// CancelKey is the key that, while it exists, tells the worker running
// attemptUID to stop: the attempt was superseded (a person updated the
// record, or it timed out).
func (n Names) CancelKey(attemptUID string) string { return n.Input + ":cancelled:" + attemptUID }

// Queue runs the protocol's Redis commands.
type Queue struct {
	rdb   redis.UniversalClient
	names Names
	// clock, when set, replaces Redis's TIME in the scripts (tests).
	clock func() time.Time
}

// New returns a Queue on rdb with the given names.
func New(rdb redis.UniversalClient, names Names, opts ...Option) *Queue {
	q := &Queue{rdb: rdb, names: names}
	for _, o := range opts {
		o(q)
	}
	return q
}

// Names returns the queue names.
func (q *Queue) Names() Names { return q.names }

// Connect opens a Redis client from a redis:// or rediss:// (TLS) URL, or
// a redis-sentinel:// or redis+cluster:// one (see SchemeSentinel), with
// AUTH from the URL, and checks that it answers. Errors never contain the
// password.
func Connect(ctx context.Context, rawURL string) (redis.UniversalClient, error) {
	opt, err := parseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse Redis URL %s: %w", redact.URL(rawURL), redact.Error(err, rawURL))
	}
	rdb := opt.newClient()
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("connect to Redis at %s: %w", redact.URL(rawURL), redact.Error(err, rawURL))
	}
	return rdb, nil
}

// PushJobs appends the jobs to the input list in one round trip.
func (q *Queue) PushJobs(ctx context.Context, jobs [][]byte) error {
	if len(jobs) == 0 {
		return nil
	}
	args := make([]any, len(jobs))
	for i, j := range jobs {
		args[i] = j
	}
	if err := q.rdb.RPush(ctx, q.names.Input, args...).Err(); err != nil {
		return fmt.Errorf("push %d jobs onto %s: %w", len(jobs), q.names.Input, err)
	}
	return nil
}

// PopJob waits up to timeout (whole seconds, at least 1) for a job and
// returns it, or nil when none came. Cancelling ctx does not interrupt the
// wait (go-redis), so callers loop with a short timeout and check ctx.
func (q *Queue) PopJob(ctx context.Context, timeout time.Duration) ([]byte, error) {
	res, err := q.rdb.BLPop(ctx, max(timeout, time.Second), q.names.Input).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pop job from %s: %w", q.names.Input, err)
	}
	return []byte(res[1]), nil
}

// PopJobs waits up to timeout (whole seconds, at least 1) for jobs and
// returns up to n of them in queue order, or none when none came: one
// BLMPOP (Redis 7), for workers that take jobs in batches. Cancelling ctx
// does not interrupt the wait, as for PopJob.
func (q *Queue) PopJobs(ctx context.Context, timeout time.Duration, n int) ([]string, error) {
	_, jobs, err := q.rdb.BLMPop(ctx, max(timeout, time.Second), "left", int64(max(n, 1)), q.names.Input).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pop jobs from %s: %w", q.names.Input, err)
	}
	return jobs, nil
}

// PushResult appends a worker's result to the output list.
func (q *Queue) PushResult(ctx context.Context, result []byte) error {
	if err := q.rdb.RPush(ctx, q.names.Output, result).Err(); err != nil {
		return fmt.Errorf("push result onto %s: %w", q.names.Output, err)
	}
	return nil
}

// Cancel marks attempts as superseded, so their workers can stop; each
// marker expires a minute after the attempt's deadline (at least a minute
// from now). attempts maps attempt uid to deadline.
func (q *Queue) Cancel(ctx context.Context, attempts map[string]time.Time) error {
	if len(attempts) == 0 {
		return nil
	}
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for uid, deadline := range attempts {
			ttl := max(time.Until(deadline), 0) + time.Minute
			p.Set(ctx, q.names.CancelKey(uid), "1", ttl.Round(time.Millisecond))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mark %d attempts cancelled: %w", len(attempts), err)
	}
	return nil
}

// Cancelled reports whether the attempt has been marked superseded.
func (q *Queue) Cancelled(ctx context.Context, attemptUID string) (bool, error) {
	n, err := q.rdb.Exists(ctx, q.names.CancelKey(attemptUID)).Result()
	if err != nil {
		return false, fmt.Errorf("check cancellation of %s: %w", attemptUID, err)
	}
	return n == 1, nil
}

// Lengths reports the length of the input, output and dead-letter lists.
func (q *Queue) Lengths(ctx context.Context) (input, output, dead int64, err error) {
	p := q.rdb.Pipeline()
	a, b, c := p.LLen(ctx, q.names.Input), p.LLen(ctx, q.names.Output), p.LLen(ctx, q.names.Dead)
	if _, err := p.Exec(ctx); err != nil {
		return 0, 0, 0, fmt.Errorf("read queue lengths: %w", err)
	}
	return a.Val(), b.Val(), c.Val(), nil
}
