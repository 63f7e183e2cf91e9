package queue

import (
	"strconv"
	"time"
)

// Option configures a Queue.
type Option func(*Queue)

// WithClock makes the scripts use now() instead of Redis's TIME, so tests can
// cross leases and deadlines exactly, without sleeping. Production code
// leaves Redis's clock in charge: it is the one clock every process agrees on.
func WithClock(now func() time.Time) Option {
	return func(q *Queue) { q.clock = now }
}

// scriptNow is the time argument of every script: "" to make the script read
// Redis's TIME, or the injected clock in Unix microseconds.
func (q *Queue) scriptNow() string {
	if q.clock == nil {
		return ""
	}
	return strconv.FormatInt(q.clock().UnixMicro(), 10)
}

// wallNow is the injected clock, or this process's: only for informational
// times (a dead letter's dead_at), never for a decision.
func (q *Queue) wallNow() time.Time {
	if q.clock != nil {
		return q.clock().UTC()
	}
	return time.Now().UTC()
}

// luaClock is the prelude of the scripts that read or store times: now(arg)
// is the injected time if the argument is set, else Redis's TIME, in Unix
// microseconds (exact in Lua's doubles until the year 2255); str(n) renders
// such a number without an exponent.
const luaClock = `
local function now(arg)
  if arg and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function str(n) return string.format('%.0f', n) end
`

// luaLists holds the list helpers of the scripts: pushAll pushes a Lua
// table in chunks (unpack is bounded by Lua's stack, about 8000 values), and
// capDead trims the dead-letter list to its cap, oldest first, counting what
// it drops.
const luaLists = `
local function pushAll(cmd, key, list)
  for i = 1, #list, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
  end
end
local function capDead(dead, counter, limit)
  if limit <= 0 then return 0 end
  local over = redis.call('LLEN', dead) - limit
  if over <= 0 then return 0 end
  redis.call('LTRIM', dead, over, -1)
  redis.call('INCRBY', counter, over)
  return over
end
`

// micros parses a script's time (Unix microseconds; "0" or "" for none).
func micros(s string) (time.Time, error) {
	if s == "" || s == "0" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseFloat(s, 64) // ZSCORE may answer in float notation
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(int64(n)).UTC(), nil
}
