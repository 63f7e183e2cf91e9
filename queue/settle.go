package queue

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// settlePushesScript answers, for each token key, when its push landed:
// the landing time the key holds ("seconds.microseconds"), or "" if none. A key that does not exist
// is set to the refused marker in the same step, so a push with that token
// still under way (or stuck in a dead process's socket) can no longer land:
// the answer 0 is final.
//
// KEYS the token keys; ARGV[1] the refused marker's lifetime (ms).
var settlePushesScript = redis.NewScript(`
local out = {}
for i, k in ipairs(KEYS) do
  if redis.call('SET', k, '` + refusedToken + `', 'NX', 'PX', ARGV[1]) then
    out[i] = ''
  else
    local v = redis.call('GET', k)
    if v == '` + refusedToken + `' then out[i] = '' else out[i] = v end
  end
end
return out
`)

// SettlePushes reports, for each push token (see PushJobsOnceFor), when its
// push landed (Redis' clock), or the zero time if it never did, in one
// round trip. A push that had not landed is settled as never pushed: a
// later PushJobsOnce with its token pushes nothing and fails with
// ErrPushRefused, so "not landed" stays true. A token whose key
// is gone (expired, or Redis restarted without its data) reads as not
// landed. Empty tokens are ignored.
func (q *Queue) SettlePushes(ctx context.Context, tokens []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(tokens))
	keys := make([]string, 0, len(tokens))
	list := make([]string, 0, len(tokens))
	for _, t := range tokens {
		if _, dup := out[t]; dup || t == "" {
			continue
		}
		out[t] = time.Time{}
		keys = append(keys, q.names.PushTokenKey(t))
		list = append(list, t)
	}
	if len(keys) == 0 {
		return out, nil
	}
	res, err := settlePushesScript.Run(ctx, q.rdb, keys, strconv.FormatInt(PushTokenTTL.Milliseconds(), 10)).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("settle %d job pushes: %w", len(keys), err)
	}
	if len(res) != len(list) {
		return nil, fmt.Errorf("settle %d job pushes: %d answers", len(keys), len(res))
	}
	for i, t := range list {
		if res[i] == "" {
			continue
		}
		at, err := parseRedisTime(res[i])
		if err != nil {
			return nil, fmt.Errorf("settle %d job pushes: token %s: %w", len(keys), t, err)
		}
		out[t] = at
	}
	return out, nil
}
