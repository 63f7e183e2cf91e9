package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/redis/go-redis/v9"
)

func TestConnectNeverLeaksThePassword(t *testing.T) {
	_, err := queue.Connect(context.Background(), "redis://user:s3cr%40t@127.0.0.1:1/0")
	if err == nil {
		t.Fatal("connected to a closed port")
	}
	if strings.Contains(err.Error(), "s3cr") {
		t.Errorf("error leaks the password: %v", err)
	}
	_, err = queue.Connect(context.Background(), "redis://u:pw@127.0.0.1:6379/0?bogus=1")
	if err == nil || strings.Contains(err.Error(), ":pw@") {
		t.Errorf("bad option: %v", err)
	}
}

func TestNamesValidate(t *testing.T) {
	if err := queue.DefaultNames().Validate(); err != nil {
		t.Error(err)
	}
	if err := (queue.Names{Input: "a", Output: "a", Dead: "b"}).Validate(); err == nil {
		t.Error("clashing names accepted")
	}
	if err := (queue.Names{Input: "a", Output: "b"}).Validate(); err == nil {
		t.Error("empty name accepted")
	}
}

func TestPushPopAndDrain(t *testing.T) {
	_, rdb, names := testsvc.Redis(t)
	q := queue.New(rdb, names)
	ctx := context.Background()
	if err := q.PushJobs(ctx, [][]byte{[]byte("j1"), []byte("j2")}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"j1", "j2"} {
		got, err := q.PopJob(ctx, time.Second)
		if err != nil || string(got) != want {
			t.Fatalf("PopJob = %q, %v; want %q", got, err, want)
		}
	}
	start := time.Now()
	if got, err := q.PopJob(ctx, time.Second); got != nil || err != nil {
		t.Errorf("PopJob on an empty list = %q, %v; want nil, nil", got, err)
	}
	if time.Since(start) < 900*time.Millisecond {
		t.Error("PopJob did not wait")
	}
	if err := q.PushJobs(ctx, [][]byte{[]byte("j3"), []byte("j4"), []byte("j5")}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"j3,j4", "j5"} {
		got, err := q.PopJobs(ctx, time.Second, 2)
		if err != nil || strings.Join(got, ",") != want {
			t.Fatalf("PopJobs = %q, %v; want %q", got, err, want)
		}
	}
	start = time.Now()
	if got, err := q.PopJobs(ctx, time.Second, 2); got != nil || err != nil {
		t.Errorf("PopJobs on an empty list = %q, %v; want nil, nil", got, err)
	}
	if time.Since(start) < 900*time.Millisecond {
		t.Error("PopJobs did not wait")
	}
	for i := range 5 {
		q.PushResult(ctx, []byte{'r', byte('0' + i)})
	}
	p := lease("p")
	b, err := q.Drain(ctx, p, opts(3))
	if err != nil || b.Oversized != 0 || strings.Join(b.Results, ",") != "r0,r1,r2" || b.Token == "" {
		t.Fatalf("Drain = %+v, %v", b, err)
	}
	if pending, _ := q.Pending(ctx, "p"); len(pending) != 3 {
		t.Errorf("pending %v; want the drained batch", pending)
	}
	if res, err := q.Ack(ctx, "p", queue.Ack{Token: b.Token}); err != nil || !res.Acked {
		t.Fatalf("Ack = %+v, %v", res, err)
	}
	if pending, _ := q.Pending(ctx, "p"); len(pending) != 0 {
		t.Errorf("pending after ack %v", pending)
	}
	if _, err := q.Drain(ctx, p, opts(0)); err == nil {
		t.Error("Drain of 0 accepted")
	}
	_, _, _, err = q.Lengths(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Error(err)
	}
}

func lease(id string) queue.Lease {
	return queue.Lease{ID: id, Instance: "instance-of-" + id, TTL: 15 * time.Second}
}

func opts(n int) queue.DrainOptions { return queue.DrainOptions{Max: n, MaxBytes: 100, DeadCap: 1000} }

// clock is a settable clock for the queue's scripts.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func withClock(t *testing.T) (*queue.Queue, *clock, redis.UniversalClient, queue.Names) {
	t.Helper()
	_, rdb, names := testsvc.Redis(t)
	c := &clock{t: t0}
	return queue.New(rdb, names, queue.WithClock(c.now)), c, rdb, names
}

// go-redis retries a script whose reply was lost: running Drain and Ack twice
// must neither move a second batch nor push dead letters twice.
func TestDrainAndAckAreIdempotent(t *testing.T) {
	_, rdb, names := testsvc.Redis(t)
	q := queue.New(rdb, names)
	ctx := context.Background()
	for _, v := range []string{"a", "b", "c", "d"} {
		q.PushResult(ctx, []byte(v))
	}
	first, _ := q.Drain(ctx, lease("p"), opts(2))
	again, _ := q.Drain(ctx, lease("p"), opts(2)) // as if the first reply was lost
	if strings.Join(first.Results, ",") != "a,b" || strings.Join(again.Results, ",") != "a,b" || first.Token != again.Token {
		t.Fatalf("drains = %+v then %+v; want a,b twice (the same batch, the same token)", first, again)
	}
	dead := []protocol.DeadLetter{{Reason: "bad", Raw: "a"}}
	r1, err1 := q.Ack(ctx, "p", queue.Ack{Token: first.Token, Dead: dead})
	r2, err2 := q.Ack(ctx, "p", queue.Ack{Token: first.Token, Dead: dead})
	if !r1.Acked || !r2.Acked || err1 != nil || err2 != nil {
		t.Errorf("acks = %+v %v, %+v %v; want both acknowledged (the second finds it done)", r1, err1, r2, err2)
	}
	if n, _ := rdb.LLen(ctx, names.Dead).Result(); n != 1 {
		t.Errorf("%d dead letters after a repeated ack; want 1", n)
	}
	if next, _ := q.Drain(ctx, lease("p"), opts(10)); strings.Join(next.Results, ",") != "c,d" || next.Token == first.Token {
		t.Errorf("next drain = %+v; want c,d under a new token", next)
	}
}

// A lease is judged by one clock, the script's (Redis's TIME in production):
// pollers whose own clocks disagree agree on it.
func TestLeaseExpiresByTheScriptsClock(t *testing.T) {
	q, c, rdb, names := withClock(t)
	ctx := context.Background()
	if reg, err := q.Heartbeat(ctx, lease("a")); err != nil || !reg {
		t.Fatalf("first heartbeat = %v, %v; want registered", reg, err)
	}
	q.PushResult(ctx, []byte("r"))
	if b, _ := q.Drain(ctx, lease("a"), opts(10)); len(b.Results) != 1 {
		t.Fatal("nothing drained")
	}
	c.set(at(14)) // the lease (15 s from the drain) lives
	if n, err := q.RecoverExpired(ctx, "b"); err != nil || n != 0 {
		t.Fatalf("RecoverExpired of a live lease = %d, %v; want 0", n, err)
	}
	c.set(at(15))
	if n, err := q.RecoverExpired(ctx, "b"); err != nil || n != 1 {
		t.Fatalf("RecoverExpired of a lapsed lease = %d, %v; want 1 result adopted", n, err)
	}
	// Without an injected clock the expiry is Redis's TIME + ttl.
	real := queue.New(rdb, names)
	if _, err := real.Heartbeat(ctx, lease("c")); err != nil {
		t.Fatal(err)
	}
	score, _ := rdb.ZScore(ctx, names.Output+":pollers", "c").Result()
	redisNow, _ := rdb.Time(ctx).Result()
	if got := time.UnixMicro(int64(score)); got.Sub(redisNow.Add(15*time.Second)).Abs() > time.Second {
		t.Errorf("lease of c expires at %v; want Redis's time + 15s = %v", got, redisNow.Add(15*time.Second))
	}
}

// Two processes with one poller id would acknowledge each other's batches:
// the second is refused while the first's lease lives.
func TestPollerIDHeldByALiveLeaseIsRefused(t *testing.T) {
	q, c, _, _ := withClock(t)
	ctx := context.Background()
	first := queue.Lease{ID: "p", Instance: "one", TTL: 15 * time.Second}
	second := queue.Lease{ID: "p", Instance: "two", TTL: 15 * time.Second}
	if _, err := q.Heartbeat(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Heartbeat(ctx, second); !errors.Is(err, queue.ErrIDInUse) {
		t.Errorf("second process's heartbeat: %v; want ErrIDInUse", err)
	}
	if _, err := q.Drain(ctx, second, opts(10)); !errors.Is(err, queue.ErrIDInUse) {
		t.Errorf("second process's drain: %v; want ErrIDInUse", err)
	}
	c.set(at(16)) // the first died: its lease lapsed
	if reg, err := q.Heartbeat(ctx, second); err != nil || !reg {
		t.Errorf("heartbeat after the lease lapsed = %v, %v; want the id taken over", reg, err)
	}
	if _, err := q.Heartbeat(ctx, first); !errors.Is(err, queue.ErrIDInUse) {
		t.Errorf("the first process back: %v; want ErrIDInUse", err)
	}
}

// A poller paused past its lease had its batch adopted: its acknowledgement
// must do nothing (the adopter owns the batch now), and its next drain
// registers it again, so that its new batch is recovered if it dies.
func TestLapsedPollersAckDoesNothingAndItRegistersAgain(t *testing.T) {
	q, c, rdb, names := withClock(t)
	ctx := context.Background()
	for _, v := range []string{"a", "b", "c"} {
		q.PushResult(ctx, []byte(v))
	}
	old, _ := q.Drain(ctx, lease("slow"), opts(2))
	c.set(at(20))
	if n, _ := q.RecoverExpired(ctx, "live"); n != 2 {
		t.Fatalf("adopted %d; want the 2 results of the lapsed poller", n)
	}
	res, err := q.Ack(ctx, "slow", queue.Ack{Token: old.Token, Dead: []protocol.DeadLetter{{Reason: "x", Raw: "a"}}})
	if err != nil || res.Acked {
		t.Errorf("lapsed poller's ack = %+v, %v; want not acknowledged", res, err)
	}
	if n, _ := rdb.LLen(ctx, names.Dead).Result(); n != 0 {
		t.Errorf("the lapsed poller's ack pushed %d dead letters; want none (the adopter writes them)", n)
	}
	adopted, _ := q.Drain(ctx, lease("live"), opts(10))
	if strings.Join(adopted.Results, ",") != "a,b" || !adopted.After.Equal(old.After) || !adopted.DrainedAt.Equal(old.DrainedAt) || adopted.Token == old.Token {
		t.Errorf("adopted batch %+v; want a,b with the times of %+v and a new token", adopted, old)
	}
	// The lapsed poller drains again: registered again, so its new batch is
	// adopted in turn if it dies now.
	if b, _ := q.Drain(ctx, lease("slow"), opts(10)); strings.Join(b.Results, ",") != "c" {
		t.Fatalf("slow drained %v; want c", b.Results)
	}
	c.set(at(40))
	if _, err := q.Ack(ctx, "live", queue.Ack{Token: adopted.Token}); err != nil {
		t.Fatal(err)
	}
	if n, _ := q.RecoverExpired(ctx, "live"); n != 1 {
		t.Errorf("the batch of a poller that registered again and died was not adopted (%d)", n)
	}
}

// The watermark is a time before which every pushed result has been
// acknowledged: the last time a drain saw the output list empty, held back by
// every batch still in a processing list, and by results handed back.
func TestWatermark(t *testing.T) {
	q, c, _, _ := withClock(t)
	ctx := context.Background()
	mark := func(want time.Time, when string) {
		t.Helper()
		got, err := q.Watermark(ctx)
		if err != nil || !got.Equal(want) {
			t.Errorf("%s: watermark %v, %v; want %v", when, got, err, want)
		}
	}
	mark(time.Time{}, "before any drain")
	c.set(at(1))
	q.Drain(ctx, lease("p"), opts(10)) // empty
	mark(at(1), "after an empty drain")
	q.PushResult(ctx, []byte("r1"))
	q.PushResult(ctx, []byte("r2"))
	c.set(at(2))
	b1, _ := q.Drain(ctx, lease("p"), opts(1))
	if !b1.After.Equal(at(1)) || !b1.DrainedAt.Equal(at(2)) {
		t.Errorf("batch times %v, %v; want %v, %v", b1.After, b1.DrainedAt, at(1), at(2))
	}
	mark(at(1), "with a backlog")
	c.set(at(3))
	b2, _ := q.Drain(ctx, lease("q"), opts(10)) // r2; the list is empty now
	mark(at(1), "while the first batch is in flight")
	q.Ack(ctx, "p", queue.Ack{Token: b1.Token})
	mark(at(1), "while the second batch (drained after 1s) is in flight")
	q.Ack(ctx, "q", queue.Ack{Token: b2.Token})
	mark(at(3), "when all is acknowledged")

	// A result handed back was pushed after its batch's L only.
	q.PushResult(ctx, []byte("r3"))
	c.set(at(4))
	b3, _ := q.Drain(ctx, lease("p"), opts(10))
	mark(at(3), "r3 in flight")
	q.Ack(ctx, "p", queue.Ack{Token: b3.Token, HandBack: []int{0}})
	mark(at(3), "r3 handed back")
	c.set(at(5))
	b4, _ := q.Drain(ctx, lease("p"), opts(10))
	if strings.Join(b4.Results, ",") != "r3" || !b4.After.Equal(at(3)) {
		t.Errorf("after the hand back: %+v; want r3 pushed after %v", b4, at(3))
	}
	// An adopted batch keeps holding the watermark back.
	c.set(at(30))
	q.RecoverExpired(ctx, "q")
	mark(at(3), "the adopted batch in flight")
	b5, _ := q.Drain(ctx, lease("q"), opts(10))
	q.Ack(ctx, "q", queue.Ack{Token: b5.Token})
	mark(at(5), "all acknowledged")
}

// Hand back keeps the order of the results at the head of the output list.
func TestHandBackKeepsOrder(t *testing.T) {
	q, _, _, _ := withClock(t)
	ctx := context.Background()
	for _, v := range []string{"a", "b", "c", "d", "e"} {
		q.PushResult(ctx, []byte(v))
	}
	b, _ := q.Drain(ctx, lease("p"), opts(3))
	q.Ack(ctx, "p", queue.Ack{Token: b.Token, HandBack: []int{0, 2}})
	if next, _ := q.Drain(ctx, lease("p"), opts(10)); strings.Join(next.Results, ",") != "a,c,d,e" {
		t.Errorf("after handing a and c back: %v; want a,c,d,e", next.Results)
	}
}

// The dead-letter list is capped: the oldest are dropped and counted.
func TestDeadLettersAreCapped(t *testing.T) {
	q, _, rdb, names := withClock(t)
	ctx := context.Background()
	for i := range 5 {
		q.PushResult(ctx, []byte(fmt.Sprintf("oversized-%d-%s", i, strings.Repeat("x", 200))))
	}
	q.PushResult(ctx, []byte("ok"))
	b, err := q.Drain(ctx, lease("p"), queue.DrainOptions{Max: 10, MaxBytes: 100, DeadCap: 3})
	if err != nil || b.Oversized != 5 || b.Dropped != 2 || len(b.Results) != 1 {
		t.Fatalf("drain = %+v, %v; want 5 oversized, 2 dropped", b, err)
	}
	dead, _ := rdb.LRange(ctx, names.Dead, 0, -1).Result()
	if len(dead) != 3 || !strings.Contains(dead[0], "oversized-2") {
		t.Errorf("dead letters %d, first %.40s; want the 3 newest", len(dead), dead[0])
	}
	res, err := q.Ack(ctx, "p", queue.Ack{Token: b.Token, DeadCap: 3, Dead: []protocol.DeadLetter{{Reason: "x", Raw: "ok"}}})
	if err != nil || res.Dropped != 1 {
		t.Errorf("ack = %+v, %v; want 1 dropped", res, err)
	}
	if n, _ := q.DeadDropped(ctx); n != 3 {
		t.Errorf("dropped counter %d; want 3", n)
	}
}

// A poller stopping cleanly with a batch in hand (its last batch failed)
// leaves it for the next live poller to adopt at once; an empty one is
// unregistered; a process that no longer owns the id changes nothing.
func TestRelease(t *testing.T) {
	q, _, rdb, names := withClock(t)
	ctx := context.Background()
	q.PushResult(ctx, []byte("r"))
	b, _ := q.Drain(ctx, lease("p"), opts(10))
	if n, err := q.Release(ctx, queue.Lease{ID: "p", Instance: "not the owner"}); err != nil || n != 0 {
		t.Errorf("release by another instance = %d, %v; want nothing done", n, err)
	}
	if n, err := q.Release(ctx, lease("p")); err != nil || n != 1 {
		t.Fatalf("Release = %d, %v; want 1 left for adoption", n, err)
	}
	if n, _ := q.RecoverExpired(ctx, "q"); n != 1 {
		t.Fatalf("adopted %d at once; want 1", n)
	}
	if got, _ := q.Drain(ctx, lease("q"), opts(10)); strings.Join(got.Results, ",") != "r" || !got.DrainedAt.Equal(b.DrainedAt) {
		t.Errorf("adopted %+v; want r as drained at first", got)
	}
	q.Drain(ctx, lease("e"), opts(10))
	if n, err := q.Release(ctx, lease("e")); err != nil || n != 0 {
		t.Errorf("Release of an empty poller = %d, %v", n, err)
	}
	if _, err := rdb.ZScore(ctx, names.Output+":pollers", "e").Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("an empty poller is still registered after its release: %v", err)
	}
}
