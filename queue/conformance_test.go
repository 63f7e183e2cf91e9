package queue_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/redis/go-redis/v9"
)

// TestConformance runs the queue's protocol against each way users run
// Redis: one server (TEST_REDIS_URL), a Sentinel-managed master with a
// password, and a Cluster of 3 masters and 3 replicas. The last two are
// started by the project's scripts on free ports unless
// TEST_REDIS_SENTINEL_URL or TEST_REDIS_CLUSTER_URL name running ones.
func TestConformance(t *testing.T) {
	for _, mode := range []struct {
		name string
		url  func(testing.TB) string
	}{
		{"single", func(testing.TB) string { return "" }},
		{"sentinel", testsvc.RedisSentinel},
		{"cluster", testsvc.RedisCluster},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			var rdb redis.UniversalClient
			var names queue.Names
			if u := mode.url(t); u == "" {
				_, rdb, names = testsvc.Redis(t)
			} else {
				_, rdb, names = testsvc.RedisAt(t, u)
			}
			wantType := map[string]string{"single": "*redis.Client", "sentinel": "*redis.Client", "cluster": "*redis.ClusterClient"}[mode.name]
			if got := typeName(rdb); got != wantType {
				t.Fatalf("client %s; want %s", got, wantType)
			}
			// In Cluster, names without a common hash tag are refused.
			err := queue.DefaultNames().ValidateFor(rdb)
			if refused := err != nil && strings.Contains(err.Error(), `"{bt}-input"`); refused != (mode.name == "cluster") {
				t.Errorf("default names: %v", err)
			}
			conformance(t, rdb, names)
		})
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *redis.Client:
		return "*redis.Client"
	case *redis.ClusterClient:
		return "*redis.ClusterClient"
	}
	return "other"
}

// conformance pushes jobs, pops them, drains results, acknowledges them,
// recovers a dead poller's batch and cancels attempts, checking every step's
// effect; in Cluster, every key it made is in one slot.
func conformance(t *testing.T, rdb redis.UniversalClient, names queue.Names) {
	ctx := context.Background()
	q := queue.New(rdb, names)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Jobs: pushed in one round trip, popped in order, one or several at once.
	must(q.PushJobs(ctx, [][]byte{[]byte("j1"), []byte("j2"), []byte("j3")}))
	if in, _, _, err := q.Lengths(ctx); err != nil || in != 3 {
		t.Fatalf("input length %d, %v; want 3", in, err)
	}
	if got, err := q.PopJob(ctx, time.Second); err != nil || string(got) != "j1" {
		t.Fatalf("PopJob = %q, %v; want j1", got, err)
	}
	if got, err := q.PopJobs(ctx, time.Second, 5); err != nil || !slices.Equal(got, []string{"j2", "j3"}) {
		t.Fatalf("PopJobs = %q, %v; want j2, j3", got, err)
	}
	if got, err := q.PopJobs(ctx, time.Second, 5); err != nil || got != nil {
		t.Fatalf("PopJobs on an empty list = %q, %v; want nothing", got, err)
	}

	// Results: a drain moves a batch to the poller's processing list (an
	// oversized one to the dead letters), a second drain returns the same
	// batch, and an ack clears it once.
	for _, r := range []string{"r1", "r2", strings.Repeat("x", 200), "r3", "r4", "r5"} {
		must(q.PushResult(ctx, []byte(r)))
	}
	lease := func(id string) queue.Lease { return queue.Lease{ID: id, Instance: id + "-instance", TTL: time.Minute} }
	opt := queue.DrainOptions{Max: 3, MaxBytes: 100}
	b, err := q.Drain(ctx, lease("p1"), opt)
	if err != nil || b.Oversized != 1 || !slices.Equal(b.Results, []string{"r1", "r2"}) || b.Token == "" {
		t.Fatalf("Drain = %+v, %v; want r1, r2, one oversized and a token", b, err)
	}
	if again, err := q.Drain(ctx, lease("p1"), opt); err != nil || !slices.Equal(again.Results, b.Results) || again.Token != b.Token {
		t.Fatalf("second Drain = %+v, %v; want the same batch %+v", again, err, b)
	}
	if pending, err := q.Pending(ctx, "p1"); err != nil || !slices.Equal(pending, b.Results) {
		t.Fatalf("Pending = %q, %v; want %q", pending, err, b.Results)
	}
	dead := []protocol.DeadLetter{{Reason: "bad", Raw: "r2"}}
	if res, err := q.Ack(ctx, "p1", queue.Ack{Token: b.Token, Dead: dead}); err != nil || !res.Acked {
		t.Fatalf("Ack = %+v, %v; want acknowledged", res, err)
	}
	if _, err := q.Ack(ctx, "p1", queue.Ack{Token: b.Token, Dead: dead}); err != nil {
		t.Fatalf("second Ack: %v", err)
	}
	if _, out, nDead, err := q.Lengths(ctx); err != nil || out != 3 || nDead != 2 {
		t.Fatalf("lengths after ack: output %d, dead %d, %v; want 3 and 2 (the oversized one and r2, once)", out, nDead, err)
	}

	// A poller whose lease lapsed has its batch adopted by a live poller,
	// with its token renewed; a poller that stops cleanly leaves its batch
	// for adoption at once.
	now := time.Now()
	clocked := queue.New(rdb, names, queue.WithClock(func() time.Time { return now }))
	short := queue.Lease{ID: "p2", Instance: "p2-instance", TTL: time.Second}
	if b2, err := clocked.Drain(ctx, short, queue.DrainOptions{Max: 2, MaxBytes: 100}); err != nil || !slices.Equal(b2.Results, []string{"r3", "r4"}) {
		t.Fatalf("Drain by p2 = %+v, %v; want r3, r4", b2, err)
	}
	if b3, err := clocked.Drain(ctx, lease("p3"), queue.DrainOptions{Max: 2, MaxBytes: 100}); err != nil || !slices.Equal(b3.Results, []string{"r5"}) {
		t.Fatalf("Drain by p3 = %+v, %v; want r5", b3, err)
	}
	must(q.Cancel(ctx, map[string]time.Time{"a1": time.Now().Add(time.Minute)}))
	if rdb, ok := rdb.(*redis.ClusterClient); ok {
		oneSlot(t, rdb, names)
	}
	now = now.Add(2 * time.Second) // p2's lease lapses; p3's lives
	if _, err := clocked.Heartbeat(ctx, lease("p4")); err != nil {
		t.Fatal(err)
	}
	if n, err := clocked.RecoverExpired(ctx, "p4"); err != nil || n != 2 {
		t.Fatalf("RecoverExpired = %d, %v; want the 2 results of p2", n, err)
	}
	b4, err := clocked.Drain(ctx, lease("p4"), queue.DrainOptions{Max: 10, MaxBytes: 100})
	if err != nil || !slices.Equal(b4.Results, []string{"r3", "r4"}) {
		t.Fatalf("Drain by p4 after adoption = %+v, %v; want p2's r3, r4", b4, err)
	}
	if res, err := clocked.Ack(ctx, "p4", queue.Ack{Token: b4.Token}); err != nil || !res.Acked {
		t.Fatalf("Ack by p4 = %+v, %v; want acknowledged", res, err)
	}
	if n, err := clocked.Release(ctx, lease("p3")); err != nil || n != 1 {
		t.Fatalf("Release = %d, %v; want the 1 result of p3 left for adoption", n, err)
	}
	if n, err := clocked.RecoverExpired(ctx, "p4"); err != nil || n != 1 {
		t.Fatalf("RecoverExpired after Release = %d, %v; want p3's result", n, err)
	}
	b5, err := clocked.Drain(ctx, lease("p4"), queue.DrainOptions{Max: 10, MaxBytes: 100})
	if err != nil || !slices.Equal(b5.Results, []string{"r5"}) {
		t.Fatalf("Drain by p4 after release = %+v, %v; want r5", b5, err)
	}
	if res, err := clocked.Ack(ctx, "p4", queue.Ack{Token: b5.Token}); err != nil || !res.Acked {
		t.Fatalf("Ack of r5 = %+v, %v; want acknowledged", res, err)
	}

	// Cancellation markers.
	for uid, want := range map[string]bool{"a1": true, "a2": false} {
		if got, err := q.Cancelled(ctx, uid); err != nil || got != want {
			t.Errorf("Cancelled(%s) = %v, %v; want %v", uid, got, err, want)
		}
	}
	if in, out, _, err := q.Lengths(ctx); err != nil || in != 0 || out != 0 {
		t.Errorf("lengths at the end: input %d, output %d, %v; want empty", in, out, err)
	}
}

// oneSlot checks that every key the test made (lists, processing lists,
// pollers set, cancellation marker) sits in one slot of the Cluster.
func oneSlot(t *testing.T, rdb *redis.ClusterClient, names queue.Names) {
	t.Helper()
	ctx := context.Background()
	prefix, _, _ := strings.Cut(names.Input, "}")
	slots := map[int64][]string{}
	n := 0
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, prefix+"}*", 100).Iterator()
		for iter.Next(ctx) {
			slot, err := rdb.ClusterKeySlot(ctx, iter.Val()).Result()
			if err != nil {
				return err
			}
			slots[slot] = append(slots[slot], iter.Val())
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, keys := range slots {
		n += len(keys)
	}
	if len(slots) != 1 || n < 5 {
		t.Errorf("keys by slot: %v; want the 5 keys of the test (dead list, 2 processing lists, pollers set, cancellation marker) in one slot", slots)
	}
}
