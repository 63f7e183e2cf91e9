package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
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
	got, over, err := q.Drain(ctx, "p", 3, 100)
	if err != nil || over != 0 || strings.Join(got, ",") != "r0,r1,r2" {
		t.Fatalf("Drain = %v, %d, %v", got, over, err)
	}
	if pending, _ := q.Pending(ctx, "p"); len(pending) != 3 {
		t.Errorf("pending %v; want the drained batch", pending)
	}
	if err := q.Ack(ctx, "p", nil); err != nil {
		t.Fatal(err)
	}
	if pending, _ := q.Pending(ctx, "p"); len(pending) != 0 {
		t.Errorf("pending after ack %v", pending)
	}
	// Release hands back what a stopping poller still holds, in order.
	q.Drain(ctx, "p", 10, 100)
	if n, err := q.Release(ctx, "p"); err != nil || n != 2 {
		t.Errorf("Release = %d, %v", n, err)
	}
	if got, _, _ := q.Drain(ctx, "p2", 10, 100); strings.Join(got, ",") != "r3,r4" {
		t.Errorf("after release, output holds %v; want r3,r4", got)
	}
	if _, _, err := q.Drain(ctx, "p", 0, 100); err == nil {
		t.Error("Drain of 0 accepted")
	}
	_, _, _, err = q.Lengths(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Error(err)
	}
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
	first, _, _ := q.Drain(ctx, "p", 2, 100)
	again, _, _ := q.Drain(ctx, "p", 2, 100) // as if the first reply was lost
	if strings.Join(first, ",") != "a,b" || strings.Join(again, ",") != "a,b" {
		t.Fatalf("drains = %v then %v; want a,b twice (the same batch)", first, again)
	}
	dead := []protocol.DeadLetter{{Reason: "bad", Raw: "a"}}
	q.Ack(ctx, "p", dead)
	q.Ack(ctx, "p", dead)
	if n, _ := rdb.LLen(ctx, names.Dead).Result(); n != 1 {
		t.Errorf("%d dead letters after a repeated ack; want 1", n)
	}
	if next, _, _ := q.Drain(ctx, "p", 10, 100); strings.Join(next, ",") != "c,d" {
		t.Errorf("next drain = %v; want c,d", next)
	}
}
