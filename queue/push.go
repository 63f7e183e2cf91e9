package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// PushTokenTTL is how long PushJobsOnce remembers a push token: far longer
// than a tick's push is retried, so a retry never pushes its jobs a second
// time. PushJobsOnceFor takes a longer lifetime when the token must also
// answer SettlePushes until the jobs' attempts can be timed out.
const PushTokenTTL = 10 * time.Minute

// ErrPushRefused means the push's token was settled as never pushed
// (SettlePushes) before this push ran: its jobs were not pushed, and never
// will be with that token. Retrying cannot help.
var ErrPushRefused = errors.New("push token already settled as never pushed: its starts were redriven")

// refusedToken is the value SettlePushes writes into the key of a token
// whose push had not landed.
const refusedToken = "never"

// pushChunk bounds the values one RPUSH inside the script unpacks (Lua's
// stack holds about 8,000).
const pushChunk = 1000

// PushTokenKey is the key that records that the push with this token ran:
// <input>:push:<token>, holding the Redis time it landed. It shares the
// input list's hash tag, as a script's keys must in Redis Cluster.
func (n Names) PushTokenKey(token string) string { return n.Input + ":push:" + token }

// pushJobsOnceScript pushes the jobs onto the input list only if the token has
// not been seen, and records the token with the Redis time of the push, in
// one atomic step. go-redis retries a command whose reply was lost, and
// the scheduler retries a push that failed; a second run with the same
// token pushes nothing and returns the time of the first. A token settled
// as never pushed (SettlePushes) pushes nothing either.
//
// KEYS[1] input list, KEYS[2] token key
// ARGV[1] token lifetime (ms), ARGV[2...] the jobs
// Returns {1 if pushed now, 0 if pushed before, -1 if refused;
// "seconds.microseconds" of the push, or "" when refused}.
var pushJobsOnceScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
if not redis.call('SET', KEYS[2], now, 'NX', 'PX', ARGV[1]) then
  local v = redis.call('GET', KEYS[2])
  if v == '` + refusedToken + `' then return {-1, ''} end
  return {0, v}
end
for i = 2, #ARGV, ` + strconv.Itoa(pushChunk) + ` do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + ` + strconv.Itoa(pushChunk-1) + `, #ARGV)))
end
return {1, now}
`)

// PushJobsOnce appends the jobs to the input list in one round trip unless a
// push with the same token already did, and returns when (by Redis' clock)
// the jobs landed, and whether this call pushed them. Retrying it with the
// same token after any error is safe: the jobs land exactly once (within
// PushTokenTTL). A token is unique per batch of jobs, e.g. a cuid. A token
// settled by SettlePushes before the push ran fails with ErrPushRefused.
func (q *Queue) PushJobsOnce(ctx context.Context, token string, jobs [][]byte) (landed time.Time, pushed bool, err error) {
	return q.PushJobsOnceFor(ctx, token, jobs, PushTokenTTL)
}

// PushJobsOnceFor is PushJobsOnce with the token remembered for ttl (at
// least PushTokenTTL): as long as SettlePushes may be asked about it.
func (q *Queue) PushJobsOnceFor(ctx context.Context, token string, jobs [][]byte, ttl time.Duration) (landed time.Time, pushed bool, err error) {
	if token == "" {
		return time.Time{}, false, errors.New("push jobs: empty token")
	}
	if len(jobs) == 0 {
		return time.Time{}, false, nil
	}
	args := make([]any, 0, len(jobs)+1)
	args = append(args, max(ttl, PushTokenTTL).Milliseconds())
	for _, j := range jobs {
		args = append(args, j)
	}
	keys := []string{q.names.Input, q.names.PushTokenKey(token)}
	res, err := pushJobsOnceScript.Run(ctx, q.rdb, keys, args...).Slice()
	if err != nil {
		return time.Time{}, false, fmt.Errorf("push %d jobs onto %s: %w", len(jobs), q.names.Input, err)
	}
	flag, _ := res[0].(int64)
	if flag == -1 {
		return time.Time{}, false, fmt.Errorf("push %d jobs onto %s: %w", len(jobs), q.names.Input, ErrPushRefused)
	}
	at, _ := res[1].(string)
	landed, err = parseRedisTime(at)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("push %d jobs onto %s: %w", len(jobs), q.names.Input, err)
	}
	return landed, flag == 1, nil
}

// parseRedisTime reads "seconds.microseconds" as written by the scripts.
func parseRedisTime(s string) (time.Time, error) {
	sec, usec, ok := strings.Cut(s, ".")
	a, err1 := strconv.ParseInt(sec, 10, 64)
	b, err2 := strconv.ParseInt(usec, 10, 64)
	if !ok || err1 != nil || err2 != nil || len(usec) != 6 {
		return time.Time{}, fmt.Errorf("redis time %q: expected seconds.microseconds", s)
	}
	return time.Unix(a, b*1000).UTC(), nil
}
