// Package queue owns every Redis key and command bigtables uses: pushing jobs,
// draining results into a per-poller processing list that a crash cannot
// lose, acknowledging them, recovering the lists of dead pollers, and the
// blocking pop workers use.
//
// Keys, all derived from the three configured queue names:
//
//	<input>                        jobs (list, RPUSH by the scheduler, LPOP by workers)
//	<output>                       results (list, RPUSH by workers)
//	<output>:processing:<poller>   results a poller drained and has not yet acknowledged
//	<output>:pollers               live pollers (sorted set: poller id -> lease expiry, Unix ms)
//	<dead>                         dead letters (list of protocol.DeadLetter JSON)
//	<input>:cancelled:<attempt>    set while a superseded attempt's worker should stop (string "1", expires)
//	<output>:pushed:<attempt>      set once the Go worker library pushed the attempt's final result (the push's token, expires)
//
// In Redis Cluster the keys of one script must share a hash slot: give the
// queue names a common hash tag, e.g. "{bt}-input", "{bt}-output",
// "{bt}-output-dead".
package queue

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

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

// CancelKey is the key that, while it exists, tells the worker running
// attemptUID to stop: the attempt was superseded (a person updated the
// record, or it timed out).
func (n Names) CancelKey(attemptUID string) string { return n.Input + ":cancelled:" + attemptUID }

// Queue runs the protocol's Redis commands.
type Queue struct {
	rdb   redis.UniversalClient
	names Names
}

// New returns a Queue on rdb with the given names.
func New(rdb redis.UniversalClient, names Names) *Queue {
	return &Queue{rdb: rdb, names: names}
}

// Names returns the queue names.
func (q *Queue) Names() Names { return q.names }

// Connect opens a Redis client from a redis:// or rediss:// (TLS) URL, with
// AUTH from the URL, and checks that it answers. Errors never contain the
// password.
func Connect(ctx context.Context, rawURL string) (redis.UniversalClient, error) {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse Redis URL %s: %w", Redact(rawURL), redactErr(err, rawURL))
	}
	opt.DialTimeout = 5 * time.Second
	opt.ReadTimeout = 5 * time.Second // blocking pops extend it by their own timeout
	opt.WriteTimeout = 5 * time.Second
	rdb := redis.NewClient(opt)
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("connect to Redis at %s: %w", Redact(rawURL), redactErr(err, rawURL))
	}
	return rdb, nil
}

// Redact returns the URL with any password replaced by "xxxxx".
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }

func redactErr(err error, rawURL string) error {
	u, perr := url.Parse(rawURL)
	if perr != nil || u.User == nil {
		return err
	}
	pw, ok := u.User.Password()
	if !ok || pw == "" {
		return err
	}
	msg := err.Error()
	for _, s := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw)} {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return redactedError{msg: msg, err: err}
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

// MaxBatch bounds a drain: the script unpacks the batch into one RPUSH, and
// Lua's stack holds about 8000 values.
const MaxBatch = 5000

// drainScript moves up to ARGV[1] results from the head of the output list to
// the poller's processing list, atomically, and returns the processing list.
// If the processing list is not empty it moves nothing and returns it as it
// is: go-redis retries a script whose reply was lost, and a second run must
// not move a second batch behind the first one's back. Results longer than
// ARGV[2] bytes go straight to the dead-letter list, wrapped with their
// reason, so a huge value never travels to the poller.
//
// KEYS[1] output list, KEYS[2] processing list, KEYS[3] dead-letter list
// ARGV[1] batch size, ARGV[2] max result bytes, ARGV[3] now (RFC 3339)
// Returns {results..., oversized count} (the count is the last element).
var drainScript = redis.NewScript(`
local pending = redis.call('LRANGE', KEYS[2], 0, -1)
if #pending > 0 then
  pending[#pending + 1] = 0
  return pending
end
local items = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #items == 0 then return {0} end
redis.call('LTRIM', KEYS[1], #items, -1)
local limit = tonumber(ARGV[2])
local out, dead = {}, 0
for _, v in ipairs(items) do
  if #v > limit then
    dead = dead + 1
    redis.call('RPUSH', KEYS[3], cjson.encode({
      reason = 'malformed result: ' .. #v .. ' bytes, over the limit of ' .. limit,
      dead_at = ARGV[3], raw = v}))
  else
    out[#out + 1] = v
  end
end
if #out > 0 then redis.call('RPUSH', KEYS[2], unpack(out)) end
out[#out + 1] = dead
return out
`)

// Drain returns the poller's unacknowledged batch if it has one, else moves
// up to n results into its processing list and returns them, with the number
// of oversized results dead-lettered on the way. The results stay in the
// processing list until Ack.
func (q *Queue) Drain(ctx context.Context, poller string, n, maxBytes int) (results []string, oversized int, err error) {
	if n < 1 || n > MaxBatch {
		return nil, 0, fmt.Errorf("drain batch %d: expected 1 to %d", n, MaxBatch)
	}
	keys := []string{q.names.Output, q.names.processing(poller), q.names.Dead}
	res, err := drainScript.Run(ctx, q.rdb, keys, n, maxBytes, time.Now().UTC().Format(time.RFC3339Nano)).Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("drain %s: %w", q.names.Output, err)
	}
	oversized = int(res[len(res)-1].(int64))
	results = make([]string, 0, len(res)-1)
	for _, v := range res[:len(res)-1] {
		results = append(results, v.(string))
	}
	return results, oversized, nil
}

// Pending returns the results the poller drained and has not acknowledged:
// after a restart with the same id, these are processed again first.
func (q *Queue) Pending(ctx context.Context, poller string) ([]string, error) {
	res, err := q.rdb.LRange(ctx, q.names.processing(poller), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("read processing list of poller %s: %w", poller, err)
	}
	return res, nil
}

// ackScript pushes the batch's dead letters and deletes the processing list,
// but only if the list still exists, so a run retried after a lost reply
// pushes nothing twice.
//
// KEYS[1] processing list, KEYS[2] dead-letter list; ARGV the dead letters.
// Returns 1 if the batch was acknowledged now, 0 if it already was.
var ackScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if #ARGV > 0 then redis.call('RPUSH', KEYS[2], unpack(ARGV)) end
redis.call('DEL', KEYS[1])
return 1
`)

// Ack pushes the dead letters and empties the poller's processing list,
// atomically: after it, the batch is either wholly acknowledged or not at
// all, and acknowledging twice changes nothing.
func (q *Queue) Ack(ctx context.Context, poller string, dead []protocol.DeadLetter) error {
	args := make([]any, len(dead))
	for i, d := range dead {
		args[i] = d.Encode()
	}
	keys := []string{q.names.processing(poller), q.names.Dead}
	if err := ackScript.Run(ctx, q.rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("acknowledge batch of poller %s: %w", poller, err)
	}
	return nil
}

// Heartbeat registers the poller as alive until now + ttl.
func (q *Queue) Heartbeat(ctx context.Context, poller string, ttl time.Duration) error {
	exp := time.Now().Add(ttl).UnixMilli()
	if err := q.rdb.ZAdd(ctx, q.names.pollers(), redis.Z{Score: float64(exp), Member: poller}).Err(); err != nil {
		return fmt.Errorf("heartbeat of poller %s: %w", poller, err)
	}
	return nil
}

// recoverScript gives the results of a dead poller back to the output list,
// at its head and in order, if the poller's lease has really expired.
//
// KEYS[1] output list, KEYS[2] the dead poller's processing list, KEYS[3] pollers set
// ARGV[1] poller id, ARGV[2] now (Unix ms)
// Returns the number of results moved, or -1 if the lease is alive again.
var recoverScript = redis.NewScript(`
local exp = redis.call('ZSCORE', KEYS[3], ARGV[1])
if exp and tonumber(exp) > tonumber(ARGV[2]) then return -1 end
local n = 0
while redis.call('LMOVE', KEYS[2], KEYS[1], 'RIGHT', 'LEFT') do n = n + 1 end
redis.call('ZREM', KEYS[3], ARGV[1])
return n
`)

// RecoverExpired returns to the output list the unacknowledged results of
// every poller whose lease expired (killed, crashed or partitioned away), and
// reports how many results it moved.
func (q *Queue) RecoverExpired(ctx context.Context) (int, error) {
	now := time.Now().UnixMilli()
	ids, err := q.rdb.ZRangeByScore(ctx, q.names.pollers(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now, 10)}).Result()
	if err != nil {
		return 0, fmt.Errorf("list expired pollers: %w", err)
	}
	total := 0
	for _, id := range ids {
		n, err := q.release(ctx, id, now)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// Release hands back anything still in the poller's processing list and
// unregisters it; a poller calls it when it stops cleanly.
func (q *Queue) Release(ctx context.Context, poller string) (int, error) {
	return q.release(ctx, poller, 1<<62)
}

func (q *Queue) release(ctx context.Context, poller string, now int64) (int, error) {
	keys := []string{q.names.Output, q.names.processing(poller), q.names.pollers()}
	n, err := recoverScript.Run(ctx, q.rdb, keys, poller, now).Int()
	if err != nil {
		return 0, fmt.Errorf("recover results of poller %s: %w", poller, err)
	}
	return max(n, 0), nil
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
