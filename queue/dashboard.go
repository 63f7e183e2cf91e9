package queue

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ErrDeadLetterMoved means the dead letter named by position and digest is
// no longer at that position (another operator or a purge moved the list):
// nothing was changed.
var ErrDeadLetterMoved = errors.New("the dead letter is no longer at that position (the list changed): reload and try again")

// DeadLetterDigest is the digest that names one stored dead letter for
// RequeueOne and DeleteOne: the SHA-1 of its stored bytes, in hex (what
// Redis' redis.sha1hex computes in a script).
func DeadLetterDigest(stored string) string {
	sum := sha1.Sum([]byte(stored))
	return hex.EncodeToString(sum[:])
}

// oneDeadScript removes the dead letter at ARGV[1] if its digest is
// ARGV[2], and with ARGV[3] = "requeue" pushes the raw result its envelope
// holds onto the output list first.
//
// KEYS[1] dead-letter list, KEYS[2] output list. Returns 1 when done, 0
// when the entry moved, -1 when requeue meets an entry that is not an
// envelope.
var oneDeadScript = redis.NewScript(`
local v = redis.call('LINDEX', KEYS[1], tonumber(ARGV[1]))
if not v or redis.sha1hex(v) ~= ARGV[2] then return 0 end
if ARGV[3] == 'requeue' then
  local ok, d = pcall(cjson.decode, v)
  if not ok or type(d) ~= 'table' or type(d.raw) ~= 'string' then return -1 end
  redis.call('RPUSH', KEYS[2], d.raw)
end
local marker = '\0bigtables-removing\0' .. ARGV[2]
redis.call('LSET', KEYS[1], tonumber(ARGV[1]), marker)
redis.call('LREM', KEYS[1], 1, marker)
return 1
`)

// RequeueOne moves the dead letter at position index (0 is the oldest)
// whose stored bytes have digest (DeadLetterDigest) back to the output
// list as the raw result its envelope holds, atomically. A list that
// changed under the operator is ErrDeadLetterMoved, and an entry that is
// not an envelope ErrNotEnvelope: nothing moves.
func (q *Queue) RequeueOne(ctx context.Context, index int64, digest string) error {
	return q.oneDead(ctx, "requeue", index, digest)
}

// DeleteOne deletes the dead letter at position index whose stored bytes
// have digest, or returns ErrDeadLetterMoved.
func (q *Queue) DeleteOne(ctx context.Context, index int64, digest string) error {
	return q.oneDead(ctx, "delete", index, digest)
}

func (q *Queue) oneDead(ctx context.Context, action string, index int64, digest string) error {
	if index < 0 {
		return fmt.Errorf("%s dead letter %d: position must be 0 or more", action, index)
	}
	res, err := oneDeadScript.Run(ctx, q.rdb, []string{q.names.Dead, q.names.Output}, index, digest, action).Int64()
	if err != nil {
		return fmt.Errorf("%s dead letter %d: %w", action, index, err)
	}
	switch res {
	case 0:
		return fmt.Errorf("%s dead letter %d: %w", action, index, ErrDeadLetterMoved)
	case -1:
		return fmt.Errorf("%s dead letter %d: %w", action, index, ErrNotEnvelope)
	}
	return nil
}
