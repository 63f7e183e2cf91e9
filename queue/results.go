package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/redis/go-redis/v9"
)

// MaxBatch bounds a drain: a batch is returned in one reply and held in a
// poller's memory.
const MaxBatch = 5000

// ErrIDInUse means a poller id is held by the live lease of another process:
// two processes with one id would acknowledge each other's batches.
var ErrIDInUse = errors.New("poller id is held by a live lease of another process")

// Lease identifies a poller process to the queue.
type Lease struct {
	// ID names the poller's processing list.
	ID string
	// Instance is a token unique to this process: another process with the
	// same ID cannot take the ID over while this one's lease lives.
	Instance string
	// TTL is how long the lease lives after each heartbeat or drain.
	TTL time.Duration
}

// leaseScript registers or renews a lease, unless another instance holds
// the id with a live lease.
//
// KEYS[1] pollers, KEYS[2] owners
// ARGV[1] id, ARGV[2] instance, ARGV[3] ttl (µs), ARGV[4] now (see luaClock)
// Returns {code, expiry}: 1 registered (first time, or again after the lease
// lapsed), 0 renewed, -1 held by another instance until expiry.
var leaseScript = redis.NewScript(luaClock + `
local t = now(ARGV[4])
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
local owner = redis.call('HGET', KEYS[2], ARGV[1])
if exp and tonumber(exp) > t and owner and owner ~= ARGV[2] then return {-1, exp} end
local until_ = str(t + tonumber(ARGV[3]))
redis.call('ZADD', KEYS[1], until_, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if exp and tonumber(exp) > t and owner == ARGV[2] then return {0, until_} end
return {1, until_}
`)

// Heartbeat registers the poller or renews its lease until Redis's time +
// TTL. It reports whether the poller was (re-)registered rather than renewed:
// true at the first call, and after the lease lapsed and another poller
// adopted the batch it held. It fails with ErrIDInUse while another process
// holds the id with a live lease, so a poller calls it before it starts.
func (q *Queue) Heartbeat(ctx context.Context, l Lease) (registered bool, err error) {
	keys := []string{q.names.pollers(), q.names.owners()}
	res, err := leaseScript.Run(ctx, q.rdb, keys, l.ID, l.Instance, l.TTL.Microseconds(), q.scriptNow()).Slice()
	if err != nil {
		return false, fmt.Errorf("heartbeat of poller %s: %w", l.ID, err)
	}
	if res[0].(int64) == -1 {
		until, _ := micros(res[1].(string))
		return false, fmt.Errorf("poller %s: %w (until %s)", l.ID, ErrIDInUse, until.Format(time.RFC3339))
	}
	return res[0].(int64) == 1, nil
}

// Batch is what a drain hands a poller: results, and bounds on when they
// reached the output list, in Redis's time.
type Batch struct {
	// Token identifies the batch: Ack acknowledges it only with this token.
	// Empty when nothing was drained.
	Token   string
	Results []string
	// After: every result was pushed after this instant, the last time a
	// drain saw the output list empty before this batch (zero if never).
	After time.Time
	// DrainedAt: every result was pushed by this instant, when the batch was
	// first drained. A replayed or adopted batch keeps both times.
	DrainedAt time.Time
	// Oversized counts the results over the size limit that the drain moved
	// to the dead-letter list (they are not in Results).
	Oversized int
	// Dropped counts dead letters dropped over the cap by this drain.
	Dropped int64
}

// DrainOptions tune a drain.
type DrainOptions struct {
	// Max is the most results moved, 1 to MaxBatch.
	Max int
	// MaxBytes: larger results go to the dead-letter list inside Redis.
	MaxBytes int
	// DeadCap caps the dead-letter list (oldest dropped); 0 means no cap.
	DeadCap int
}

// drainScript renews the poller's lease (registering it again if it lapsed)
// and returns its unacknowledged batch if it has one; else it moves up to
// ARGV[1] results from the head of the output list to the poller's
// processing list, atomically, and records the batch in the inflight hash as
// "L T token": L the watermark in force (every result in the batch was
// pushed after it, since the list was empty then and is FIFO), T now. If the
// output list is empty afterwards, the watermark becomes now. go-redis
// retries a script whose reply was lost: a second run returns the same
// batch. Results longer than ARGV[2] bytes go straight to the dead-letter
// list, wrapped with their reason, so a huge value never travels to the
// poller.
//
// KEYS[1] output, KEYS[2] processing, KEYS[3] dead, KEYS[4] inflight,
// KEYS[5] watermark, KEYS[6] pollers, KEYS[7] owners, KEYS[8] batches,
// KEYS[9] dropped
// ARGV[1] batch size, ARGV[2] max result bytes, ARGV[3] now, ARGV[4] poller
// id, ARGV[5] instance, ARGV[6] lease ttl (µs), ARGV[7] dead-letter cap,
// ARGV[8] dead_at of dead letters (RFC 3339; informational)
// Returns {"taken", expiry} if another instance holds the id, else
// {"ok", token, L, T, oversized, dropped, results...}.
var drainScript = redis.NewScript(luaClock + luaLists + `
local t = now(ARGV[3])
local id = ARGV[4]
local exp = redis.call('ZSCORE', KEYS[6], id)
local owner = redis.call('HGET', KEYS[7], id)
if exp and tonumber(exp) > t and owner and owner ~= ARGV[5] then return {'taken', exp} end
redis.call('ZADD', KEYS[6], str(t + tonumber(ARGV[6])), id)
redis.call('HSET', KEYS[7], id, ARGV[5])

local reply = {'ok'}
local pending = redis.call('LRANGE', KEYS[2], 0, -1)
if #pending > 0 then
  local info = redis.call('HGET', KEYS[4], id)
  local l, d, tok
  if info then l, d, tok = string.match(info, '^(%S+) (%S+) (%S+)$') end
  if not tok then -- a list left without its record: nothing known of its times
    l, d, tok = '0', str(t), tostring(redis.call('INCR', KEYS[8]))
    redis.call('HSET', KEYS[4], id, l .. ' ' .. d .. ' ' .. tok)
  end
  reply[2], reply[3], reply[4], reply[5], reply[6] = tok, l, d, 0, 0
  for i, v in ipairs(pending) do reply[6 + i] = v end
  return reply
end

local w = redis.call('GET', KEYS[5]) or '0'
local items = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #items > 0 then redis.call('LTRIM', KEYS[1], #items, -1) end
if redis.call('LLEN', KEYS[1]) == 0 then redis.call('SET', KEYS[5], str(t)) end
local limit = tonumber(ARGV[2])
local out, dead = {}, {}
for _, v in ipairs(items) do
  if #v > limit then
    dead[#dead + 1] = cjson.encode({
      reason = 'malformed result: ' .. #v .. ' bytes, over the limit of ' .. limit,
      dead_at = ARGV[8], raw = v})
  else
    out[#out + 1] = v
  end
end
local dropped = 0
if #dead > 0 then
  pushAll('RPUSH', KEYS[3], dead)
  dropped = capDead(KEYS[3], KEYS[9], tonumber(ARGV[7]))
end
local tok = ''
if #out > 0 then
  pushAll('RPUSH', KEYS[2], out)
  tok = tostring(redis.call('INCR', KEYS[8]))
  redis.call('HSET', KEYS[4], id, w .. ' ' .. str(t) .. ' ' .. tok)
end
reply[2], reply[3], reply[4], reply[5], reply[6] = tok, w, str(t), #dead, dropped
for i, v in ipairs(out) do reply[6 + i] = v end
return reply
`)

// Drain renews the poller's lease and returns its unacknowledged batch if it
// has one (a failed batch, a batch of the same id before a restart, or one
// it adopted), else moves up to opt.Max results into its processing list and
// returns them. Oversized results are dead-lettered on the way. The results
// stay in the processing list until Ack. It fails with ErrIDInUse if another
// process holds the poller id with a live lease.
func (q *Queue) Drain(ctx context.Context, l Lease, opt DrainOptions) (Batch, error) {
	if opt.Max < 1 || opt.Max > MaxBatch {
		return Batch{}, fmt.Errorf("drain batch %d: expected 1 to %d", opt.Max, MaxBatch)
	}
	keys := []string{q.names.Output, q.names.processing(l.ID), q.names.Dead, q.names.inflight(), q.names.watermark(),
		q.names.pollers(), q.names.owners(), q.names.batches(), q.names.dropped()}
	res, err := drainScript.Run(ctx, q.rdb, keys, opt.Max, opt.MaxBytes, q.scriptNow(), l.ID, l.Instance,
		l.TTL.Microseconds(), opt.DeadCap, q.wallNow().Format(time.RFC3339Nano)).Slice()
	if err != nil {
		return Batch{}, fmt.Errorf("drain %s: %w", q.names.Output, err)
	}
	if res[0].(string) == "taken" {
		until, _ := micros(res[1].(string))
		return Batch{}, fmt.Errorf("drain %s: poller %s: %w (until %s)", q.names.Output, l.ID, ErrIDInUse, until.Format(time.RFC3339))
	}
	b := Batch{Token: res[1].(string), Oversized: int(res[4].(int64)), Dropped: res[5].(int64)}
	if b.After, err = micros(res[2].(string)); err == nil {
		b.DrainedAt, err = micros(res[3].(string))
	}
	if err != nil {
		return Batch{}, fmt.Errorf("drain %s: read the batch's times: %w", q.names.Output, err)
	}
	b.Results = make([]string, 0, len(res)-6)
	for _, v := range res[6:] {
		b.Results = append(b.Results, v.(string))
	}
	return b, nil
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

// Ack is the acknowledgement of a batch.
type Ack struct {
	// Token is the batch's (Batch.Token).
	Token string
	// Dead are the dead letters to push.
	Dead []protocol.DeadLetter
	// HandBack are the indexes (into Batch.Results) of results handed back
	// to the head of the output list, in order, for a later batch.
	HandBack []int
	// DeadCap caps the dead-letter list (oldest dropped); 0 means no cap.
	DeadCap int
}

// AckResult says what an acknowledgement did.
type AckResult struct {
	// Acked is false when the token is not the poller's current batch (its
	// lease lapsed and another poller adopted the batch): nothing was done,
	// no dead letter pushed.
	Acked bool
	// Dropped counts dead letters dropped over the cap.
	Dropped int64
}

// ackScript acknowledges the poller's batch if its token is still the
// current one: it hands the given results back to the head of the output
// list (lowering the watermark to the batch's L, since they were pushed after
// L only), pushes the dead letters, caps the dead-letter list and deletes the
// processing list. A run retried after a lost reply finds the token recorded
// as acknowledged and does nothing again.
//
// KEYS[1] processing, KEYS[2] dead, KEYS[3] inflight, KEYS[4] acked,
// KEYS[5] output, KEYS[6] watermark, KEYS[7] dropped
// ARGV[1] poller id, ARGV[2] token, ARGV[3] dead-letter cap, ARGV[4] number n
// of dead letters, ARGV[5..4+n] the dead letters, then the 0-based indexes
// of the results to hand back, ascending.
// Returns {1, dropped} if acknowledged now, {2, 0} if it already was,
// {0, 0} if the token is not the current batch.
var ackScript = redis.NewScript(luaLists + `
local id, token = ARGV[1], ARGV[2]
local info = redis.call('HGET', KEYS[3], id)
local l, tok
if info then l, tok = string.match(info, '^(%S+) %S+ (%S+)$') end
if tok ~= token then
  if redis.call('HGET', KEYS[4], id) == token then return {2, 0} end
  return {0, 0}
end
local n = tonumber(ARGV[4])
if #ARGV > 4 + n then
  local items = redis.call('LRANGE', KEYS[1], 0, -1)
  local back = {}
  for i = #ARGV, 5 + n, -1 do back[#back + 1] = items[tonumber(ARGV[i]) + 1] end
  pushAll('LPUSH', KEYS[5], back)
  local w = redis.call('GET', KEYS[6])
  if not w or tonumber(l) < tonumber(w) then redis.call('SET', KEYS[6], l) end
end
local dropped = 0
if n > 0 then
  local dead = {}
  for i = 5, 4 + n do dead[#dead + 1] = ARGV[i] end
  pushAll('RPUSH', KEYS[2], dead)
  dropped = capDead(KEYS[2], KEYS[7], tonumber(ARGV[3]))
end
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[3], id)
redis.call('HSET', KEYS[4], id, token)
return {1, dropped}
`)

// Ack acknowledges the poller's batch, atomically: it hands back the
// results a.HandBack names, pushes the dead letters and empties the
// processing list. Acknowledging twice changes nothing. An Ack whose token is
// not the poller's current batch does nothing and reports Acked false.
func (q *Queue) Ack(ctx context.Context, poller string, a Ack) (AckResult, error) {
	args := make([]any, 0, 4+len(a.Dead)+len(a.HandBack))
	args = append(args, poller, a.Token, a.DeadCap, len(a.Dead))
	for _, d := range a.Dead {
		args = append(args, d.Encode())
	}
	for _, i := range a.HandBack {
		args = append(args, i)
	}
	keys := []string{q.names.processing(poller), q.names.Dead, q.names.inflight(), q.names.acked(),
		q.names.Output, q.names.watermark(), q.names.dropped()}
	res, err := ackScript.Run(ctx, q.rdb, keys, args...).Slice()
	if err != nil {
		return AckResult{}, fmt.Errorf("acknowledge batch %s of poller %s: %w", a.Token, poller, err)
	}
	return AckResult{Acked: res[0].(int64) != 0, Dropped: res[1].(int64)}, nil
}

// expiredScript lists the pollers whose lease expired by Redis's time.
//
// KEYS[1] pollers; ARGV[1] now
var expiredScript = redis.NewScript(luaClock + `
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', str(now(ARGV[1])))
`)

// adoptScript takes over the batch of a poller whose lease expired, if the
// adopting poller has none in hand: the processing list is renamed to the
// adopter's and keeps its times (L, T) under a new token, so the lapsed
// poller's acknowledgement, should it wake up, does nothing. A poller with
// an empty list is unregistered.
//
// KEYS[1] lapsed poller's processing, KEYS[2] adopter's processing,
// KEYS[3] pollers, KEYS[4] owners, KEYS[5] inflight, KEYS[6] acked, KEYS[7] batches
// ARGV[1] lapsed poller id, ARGV[2] adopter id, ARGV[3] now
// Returns the number of results adopted, -1 if the lease is alive again,
// -2 if the adopter has a batch in hand (another poller, or a later call,
// adopts it).
var adoptScript = redis.NewScript(luaClock + `
local t = now(ARGV[3])
local exp = redis.call('ZSCORE', KEYS[3], ARGV[1])
if exp and tonumber(exp) > t then return -1 end
local n = redis.call('LLEN', KEYS[1])
if n > 0 then
  if redis.call('EXISTS', KEYS[2]) == 1 then return -2 end
  local info = redis.call('HGET', KEYS[5], ARGV[1])
  local l, d = '0', str(t)
  if info then l, d = string.match(info, '^(%S+) (%S+)') end
  redis.call('RENAME', KEYS[1], KEYS[2])
  redis.call('HSET', KEYS[5], ARGV[2], l .. ' ' .. d .. ' ' .. tostring(redis.call('INCR', KEYS[7])))
end
redis.call('HDEL', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
return n
`)

// RecoverExpired looks for pollers whose lease expired (killed, crashed,
// frozen or partitioned away), unregisters them, and adopts the batch of the
// first one that left one, if the poller has no batch in hand: its next
// Drain returns that batch, with the times it was first drained with. It
// returns how many results it adopted.
func (q *Queue) RecoverExpired(ctx context.Context, poller string) (int, error) {
	ids, err := expiredScript.Run(ctx, q.rdb, []string{q.names.pollers()}, q.scriptNow()).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("list expired pollers: %w", err)
	}
	adopted := 0
	for _, id := range ids {
		if id == poller {
			continue
		}
		keys := []string{q.names.processing(id), q.names.processing(poller), q.names.pollers(), q.names.owners(),
			q.names.inflight(), q.names.acked(), q.names.batches()}
		n, err := adoptScript.Run(ctx, q.rdb, keys, id, poller, q.scriptNow()).Int()
		if err != nil {
			return adopted, fmt.Errorf("adopt the batch of poller %s: %w", id, err)
		}
		adopted += max(n, 0)
	}
	return adopted, nil
}

// releaseScript ends a lease on a clean stop: an empty poller is
// unregistered; one that still holds a batch (its last batch failed) has its
// lease expired at once, so the next live poller adopts the batch. It does
// nothing if the id now belongs to another process.
//
// KEYS[1] processing, KEYS[2] pollers, KEYS[3] owners, KEYS[4] acked
// ARGV[1] id, ARGV[2] instance
// Returns the number of results left for adoption, or -1.
var releaseScript = redis.NewScript(`
local owner = redis.call('HGET', KEYS[3], ARGV[1])
if owner and owner ~= ARGV[2] then return -1 end
local n = redis.call('LLEN', KEYS[1])
if n > 0 then
  redis.call('ZADD', KEYS[2], 0, ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
end
return n
`)

// Release ends the poller's lease when it stops cleanly. A batch still in
// its processing list is left for the next live poller to adopt at once. It
// returns how many results were left so.
func (q *Queue) Release(ctx context.Context, l Lease) (int, error) {
	keys := []string{q.names.processing(l.ID), q.names.pollers(), q.names.owners(), q.names.acked()}
	n, err := releaseScript.Run(ctx, q.rdb, keys, l.ID, l.Instance).Int()
	if err != nil {
		return 0, fmt.Errorf("release poller %s: %w", l.ID, err)
	}
	return max(n, 0), nil
}

// DeadDropped returns how many dead letters were dropped over the cap, in
// all, since the counter was created.
func (q *Queue) DeadDropped(ctx context.Context) (int64, error) {
	s, err := q.rdb.Get(ctx, q.names.dropped()).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read dropped dead letters: %w", err)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read dropped dead letters: %q: %w", s, err)
	}
	return n, nil
}
