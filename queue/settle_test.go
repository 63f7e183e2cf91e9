package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/queue"
)

// SettlePushes tells a push that landed from one that did not, and a push
// settled as not landed can no longer land: the answer is final.
func TestSettlePushes(t *testing.T) {
	ctx := context.Background()
	_, rdb, names := testsvc.Redis(t)
	q := queue.New(rdb, names)
	landed, _, err := q.PushJobsOnceFor(ctx, "landed", [][]byte{[]byte("a")}, 3*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ttl, _ := rdb.PTTL(ctx, names.PushTokenKey("landed")).Result(); ttl <= 2*time.Hour {
		t.Errorf("token lifetime %v; want the 3h asked for", ttl)
	}
	got, err := q.SettlePushes(ctx, []string{"landed", "lost", "landed", ""})
	if err != nil {
		t.Fatal(err)
	}
	if at, ok := got["lost"]; len(got) != 2 || !got["landed"].Equal(landed) || !ok || !at.IsZero() {
		t.Fatalf("settled %v; want landed at %v, lost never", got, landed)
	}
	// The lost push comes late (a retry, or a dead process's last bytes):
	// it is refused and pushes nothing.
	_, _, err = q.PushJobsOnce(ctx, "lost", [][]byte{[]byte("b")})
	if !errors.Is(err, queue.ErrPushRefused) {
		t.Errorf("late push of a settled token: %v; want ErrPushRefused", err)
	}
	if n, _ := rdb.LLen(ctx, names.Input).Result(); n != 1 {
		t.Errorf("%d jobs in the input list; want only the landed one", n)
	}
	got, err = q.SettlePushes(ctx, []string{"lost", "landed"})
	if err != nil || !got["lost"].IsZero() || !got["landed"].Equal(landed) {
		t.Errorf("settled again %v, %v; want the same answers", got, err)
	}
	if got, err := q.SettlePushes(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("settle nothing: %v, %v", got, err)
	}
}
