package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Ping checks that Redis answers.
func (q *Queue) Ping(ctx context.Context) error {
	if err := q.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping Redis: %w", err)
	}
	return nil
}

// Depths are the lengths of the protocol's lists, for operators.
type Depths struct {
	Input, Output, Dead int64
	// Processing is the results drained by pollers and not acknowledged
	// yet, summed over the registered pollers' processing lists.
	Processing int64
}

// Depths reads the lengths of the input, output, dead-letter and
// processing lists: two round trips, whatever the number of pollers.
func (q *Queue) Depths(ctx context.Context) (Depths, error) {
	ids, err := q.rdb.ZRange(ctx, q.names.pollers(), 0, -1).Result()
	if err != nil {
		return Depths{}, fmt.Errorf("list pollers: %w", err)
	}
	p := q.rdb.Pipeline()
	in, out, dead := p.LLen(ctx, q.names.Input), p.LLen(ctx, q.names.Output), p.LLen(ctx, q.names.Dead)
	proc := make([]*redis.IntCmd, len(ids))
	for i, id := range ids {
		proc[i] = p.LLen(ctx, q.names.processing(id))
	}
	if _, err := p.Exec(ctx); err != nil {
		return Depths{}, fmt.Errorf("read queue lengths: %w", err)
	}
	d := Depths{Input: in.Val(), Output: out.Val(), Dead: dead.Val()}
	for _, c := range proc {
		d.Processing += c.Val()
	}
	return d, nil
}

// PollersAlive counts the pollers whose lease has not expired at now.
func (q *Queue) PollersAlive(ctx context.Context, now time.Time) (int, error) {
	n, err := q.rdb.ZCount(ctx, q.names.pollers(), "("+strconv.FormatInt(now.UnixMilli(), 10), "+inf").Result()
	if err != nil {
		return 0, fmt.Errorf("count live pollers: %w", err)
	}
	return int(n), nil
}

// DeadLetters returns up to n dead letters from position start (0 is the
// oldest), as stored: protocol.DeadLetter envelopes in JSON.
func (q *Queue) DeadLetters(ctx context.Context, start, n int64) ([]string, error) {
	if n <= 0 {
		return nil, nil
	}
	list, err := q.rdb.LRange(ctx, q.names.Dead, start, start+n-1).Result()
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	return list, nil
}

// requeueScript moves dead letters back to the output list, oldest first,
// each as the raw result its envelope holds; an entry that is not an
// envelope is left at the head of the list and stops the move.
//
// KEYS[1] dead-letter list, KEYS[2] output list; ARGV[1] most to move.
// Returns {moved, 1 if stopped by an entry that is not an envelope}.
var requeueScript = redis.NewScript(`
local moved = 0
while moved < tonumber(ARGV[1]) do
  local v = redis.call('LINDEX', KEYS[1], 0)
  if not v then return {moved, 0} end
  local ok, d = pcall(cjson.decode, v)
  if not ok or type(d) ~= 'table' or type(d.raw) ~= 'string' then return {moved, 1} end
  redis.call('RPUSH', KEYS[2], d.raw)
  redis.call('LPOP', KEYS[1])
  moved = moved + 1
end
return {moved, 0}
`)

// ErrNotEnvelope means the dead-letter list's oldest entry is not a dead
// letter envelope (something else pushed it): requeue stops before it.
var ErrNotEnvelope = errors.New("the oldest dead letter is not a {reason, dead_at, raw} envelope")

// Requeue moves up to n dead letters, oldest first, back to the output
// list as the raw results they hold, so pollers try them again; each move
// is atomic. It returns how many moved.
func (q *Queue) Requeue(ctx context.Context, n int64) (int64, error) {
	var total int64
	for total < n {
		chunk := min(n-total, opsChunk)
		res, err := requeueScript.Run(ctx, q.rdb, []string{q.names.Dead, q.names.Output}, chunk).Int64Slice()
		if err != nil {
			return total, fmt.Errorf("requeue dead letters: %d moved, then: %w", total, err)
		}
		total += res[0]
		if res[1] == 1 {
			return total, fmt.Errorf("requeue dead letters: %d moved, then: %w", total, ErrNotEnvelope)
		}
		if res[0] < chunk {
			break
		}
	}
	return total, nil
}

// opsChunk bounds what one script or command of Requeue and Purge moves,
// so an operator's command never blocks Redis for long.
const opsChunk = 500

// Purge deletes up to n dead letters, oldest first, and returns how many
// it deleted.
func (q *Queue) Purge(ctx context.Context, n int64) (int64, error) {
	var total int64
	for total < n {
		chunk := min(n-total, opsChunk)
		list, err := q.rdb.LPopCount(ctx, q.names.Dead, int(chunk)).Result()
		if errors.Is(err, redis.Nil) {
			break
		}
		if err != nil {
			return total, fmt.Errorf("purge dead letters: %d deleted, then: %w", total, err)
		}
		total += int64(len(list))
		if int64(len(list)) < chunk {
			break
		}
	}
	return total, nil
}
