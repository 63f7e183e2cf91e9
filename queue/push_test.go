package queue_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/queue"
	"github.com/redis/go-redis/v9"
)

func TestPushJobsOnceIsIdempotent(t *testing.T) {
	ctx := context.Background()
	_, rdb, names := testsvc.Redis(t)
	q := queue.New(rdb, names)
	var jobs [][]byte
	for i := range 2500 { // more than one RPUSH inside the script
		jobs = append(jobs, fmt.Appendf(nil, `{"n":%d}`, i))
	}
	before := time.Now()
	landed, pushed, err := q.PushJobsOnce(ctx, "tok-1", jobs)
	if err != nil || !pushed {
		t.Fatalf("first push: pushed %v, %v", pushed, err)
	}
	if d := landed.Sub(before); d < -time.Second || d > 5*time.Second {
		t.Errorf("landed at %v, %v after the call began; want Redis' clock, close to ours", landed, d)
	}
	again, pushed, err := q.PushJobsOnce(ctx, "tok-1", jobs)
	if err != nil || pushed || !again.Equal(landed) {
		t.Errorf("second push with the same token: pushed %v at %v, %v; want nothing pushed, the first landing time %v", pushed, again, err, landed)
	}
	got, _ := rdb.LRange(ctx, names.Input, 0, -1).Result()
	if len(got) != len(jobs) {
		t.Fatalf("%d jobs in the list; want %d, once each", len(got), len(jobs))
	}
	for i, g := range got {
		if g != string(jobs[i]) {
			t.Fatalf("job %d is %s; want %s (in order)", i, g, jobs[i])
		}
	}
	if ttl, _ := rdb.PTTL(ctx, names.PushTokenKey("tok-1")).Result(); ttl <= 0 || ttl > queue.PushTokenTTL {
		t.Errorf("token lifetime %v; want up to %v", ttl, queue.PushTokenTTL)
	}
	if _, pushed, err := q.PushJobsOnce(ctx, "tok-2", jobs[:1]); err != nil || !pushed {
		t.Errorf("a new token: pushed %v, %v; want pushed", pushed, err)
	}
}

// A reply lost after Redis ran the push makes go-redis send it again (3
// retries by default). The plain RPUSH then lands twice; the push with a
// token lands once.
func TestPushJobsOnceSurvivesALostReply(t *testing.T) {
	ctx := context.Background()
	_, rdb, names := testsvc.Redis(t)
	direct := queue.New(rdb, names)
	// Load the script first, so the proxied call runs it by EVALSHA.
	if _, _, err := direct.PushJobsOnce(ctx, "warm", [][]byte{[]byte("warm")}); err != nil {
		t.Fatal(err)
	}
	marker := []byte("drop-my-reply")
	addr, dropped := lossyProxy(t, rdb.(*redis.Client).Options().Addr, marker)
	viaProxy := redis.NewClient(&redis.Options{Addr: addr, DB: rdb.(*redis.Client).Options().DB})
	defer viaProxy.Close()
	q := queue.New(viaProxy, names)

	if err := q.PushJobs(ctx, [][]byte{[]byte("plain-drop-my-reply")}); err != nil {
		t.Fatalf("plain push: %v", err)
	}
	landed, pushed, err := q.PushJobsOnce(ctx, "tok", [][]byte{[]byte("a"), []byte("b-drop-my-reply")})
	if err != nil {
		t.Fatalf("push once: %v", err)
	}
	if dropped.Load() != 2 {
		t.Fatalf("the proxy dropped %d replies; want 2 (one per push)", dropped.Load())
	}
	if pushed || landed.IsZero() {
		t.Errorf("the retried push: pushed %v at %v; want the first run's landing, nothing pushed again", pushed, landed)
	}
	got, _ := rdb.LRange(ctx, names.Input, 0, -1).Result()
	want := []string{"warm", "plain-drop-my-reply", "plain-drop-my-reply", "a", "b-drop-my-reply"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("input list %q; want %q: the plain RPUSH twice (the fault), the tokened push once", got, want)
	}
}

// lossyProxy forwards TCP connections to target; the first time a given
// command containing marker goes through, it reads Redis' reply, throws it
// away and closes the connection: Redis ran the command, the client never
// hears so. The client's retry of the same command is answered.
func lossyProxy(t *testing.T, target string, marker []byte) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	dropped := new(atomic.Int32)
	var mu sync.Mutex
	seen := map[string]bool{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			var dropNext atomic.Bool
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if bytes.Contains(buf[:n], marker) {
							mu.Lock()
							if !seen[string(buf[:n])] {
								seen[string(buf[:n])] = true
								dropNext.Store(true)
							}
							mu.Unlock()
						}
						if _, werr := s.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				s.Close()
			}()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && dropNext.Swap(false) {
						dropped.Add(1)
						break
					}
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.Close()
				s.Close()
			}()
		}
	}()
	return ln.Addr().String(), dropped
}
