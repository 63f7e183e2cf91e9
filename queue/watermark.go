package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// watermarkScript returns min(W, the L of every batch in a processing list):
// W is the Redis time a drain last saw the output list empty, L the
// watermark in force when a batch was drained. "0" if no drain ever set W.
//
// KEYS[1] watermark, KEYS[2] inflight
var watermarkScript = redis.NewScript(luaClock + `
local w = redis.call('GET', KEYS[1])
if not w then return '0' end
local m = tonumber(w)
for _, v in ipairs(redis.call('HVALS', KEYS[2])) do
  local l = tonumber(string.match(v, '^(%S+)'))
  if l and l < m then m = l end
end
return str(m)
`)

// Watermark returns a Redis time before which every result pushed onto the
// output list has been applied and acknowledged: the output list was empty
// at the watermark W (it is FIFO, so everything pushed before had been
// drained), and no batch drained since a time before W is still in a
// processing list. It stands still while pollers are down or behind, and an
// attempt whose deadline it has not passed may still have an answer
// waiting. It is the zero time if no poller ever drained.
func (q *Queue) Watermark(ctx context.Context) (time.Time, error) {
	s, err := watermarkScript.Run(ctx, q.rdb, []string{q.names.watermark(), q.names.inflight()}).Text()
	if err != nil {
		return time.Time{}, fmt.Errorf("read the results watermark: %w", err)
	}
	t, err := micros(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the results watermark: %q: %w", s, err)
	}
	return t, nil
}
