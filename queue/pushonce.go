package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// pushOnceScript appends ARGV[1] to the output list unless the attempt's
// marker exists, and sets the marker to the push's token ARGV[3] (expiring
// after ARGV[2] ms) in the same step. It returns 1 if it pushed, 2 if this
// push (same token) had landed before, 0 if another push of that attempt
// had.
var pushOnceScript = redis.NewScript(`
if redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[2]) then
  redis.call('RPUSH', KEYS[1], ARGV[1])
  return 1
end
if redis.call('GET', KEYS[2]) == ARGV[3] then return 2 end
return 0`)

// PushedKey is the key marking that the final result of attemptUID has been
// pushed by PushResultOnce (its value is the push's token). It shares the
// output list's hash tag.
func (n Names) PushedKey(attemptUID string) string { return n.Output + ":pushed:" + attemptUID }

// PushResultOnce appends a final result (success or failure) of attemptUID
// to the output list unless one was pushed for that attempt in the last ttl,
// and reports whether this push landed (now, or at an earlier try with the
// same token) rather than another one. token identifies one push and its
// retries: a random value per result.
//
// The push is idempotent, so it may be retried after any error: go-redis
// re-sends a command whose reply was lost (MaxRetries), and a plain RPUSH
// that Redis had already run then lands twice; the caller's own retries after
// an error whose outcome is unknown would do the same. Two workers handed the
// same attempt push one final result between them.
func (q *Queue) PushResultOnce(ctx context.Context, attemptUID, token string, result []byte, ttl time.Duration) (bool, error) {
	ms := max(ttl.Milliseconds(), 1000)
	keys := []string{q.names.Output, q.names.PushedKey(attemptUID)}
	n, err := pushOnceScript.Run(ctx, q.rdb, keys, result, ms, token).Int()
	if err != nil {
		return false, fmt.Errorf("push result of attempt %s onto %s: %w", attemptUID, q.names.Output, err)
	}
	return n > 0, nil
}
