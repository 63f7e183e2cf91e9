package chaos

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/protocol"
	"github.com/redis/go-redis/v9"
)

// proxied starts a proxy in front of the test Redis and returns it, a client
// through it (retries as given), a direct client, and a key private to the
// test.
func proxied(t *testing.T, maxRetries int) (*proxy, *redis.Client, redis.UniversalClient, string, *counter, *fakeClock) {
	t.Helper()
	rawURL, direct, names := testsvc.Redis(t)
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	c := &counter{n: map[string]int{}}
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p, err := newProxy(opt.Addr, c.add, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	opt.Addr = p.Addr()
	opt.MaxRetries = maxRetries
	opt.ReadTimeout = 3 * time.Second
	via := redis.NewClient(opt)
	t.Cleanup(func() { via.Close() })
	return p, via, direct, names.Input, c, clock
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(kind string) {
	c.mu.Lock()
	c.n[kind]++
	c.mu.Unlock()
}

func (c *counter) get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[kind]
}

func TestProxyForwards(t *testing.T) {
	_, via, direct, key, _, _ := proxied(t, 0)
	ctx := context.Background()
	if err := via.RPush(ctx, key, "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := direct.LRange(ctx, key, 0, -1).Result(); err != nil || len(got) != 2 {
		t.Fatalf("LRANGE after RPUSH through the proxy = %v, %v; want [a b]", got, err)
	}
}

// A lost reply: the command ran and the client saw an error; with go-redis'
// default retries the client saw success and the command ran twice.
func TestProxyLostReplyRunsTheCommand(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		retries int
		every   int // one reply in every is lost
		fails   bool
		runs    int64
	}{
		{retries: -1, every: 1, fails: true, runs: 1},
		{retries: 3, every: 1000, fails: false, runs: 2},
	} {
		p, via, direct, key, c, clock := proxied(t, tc.retries)
		via.Ping(ctx) // the connection exists before the window opens
		p.dropReplies(10*time.Second, tc.every)
		err := via.RPush(ctx, key, "job").Err()
		if (err != nil) != tc.fails {
			t.Errorf("retries %d: RPUSH through a proxy losing its reply: err = %v; want an error: %v", tc.retries, err, tc.fails)
		}
		if n, _ := direct.LLen(ctx, key).Result(); n != tc.runs {
			t.Errorf("retries %d: RPUSH ran %d times behind the lost reply; want %d", tc.retries, n, tc.runs)
		}
		if c.get(faultReplyDropped) != 1 {
			t.Errorf("retries %d: %d lost replies counted; want 1", tc.retries, c.get(faultReplyDropped))
		}
		clock.advance(10 * time.Second)
		if err := via.Ping(ctx).Err(); err != nil {
			t.Errorf("retries %d: PING after the window: %v", tc.retries, err)
		}
	}
}

// An outage armed on a pattern starts when a command carrying it passes,
// refuses connections for its length, and then ends by itself.
func TestProxyOutageOnPush(t *testing.T) {
	ctx := context.Background()
	for _, forward := range []bool{false, true} {
		p, via, direct, key, c, clock := proxied(t, -1)
		via.Ping(ctx)
		fired := p.outageOn([]byte("\r\n"+key+"\r\n"), forward, time.Second)
		if err := via.Set(ctx, key+":other", "1", 0).Err(); err != nil {
			t.Fatalf("forward %v: a command without the pattern failed: %v", forward, err)
		}
		if err := via.RPush(ctx, key, "job").Err(); err == nil {
			t.Fatalf("forward %v: the push that starts the outage succeeded", forward)
		}
		<-fired
		want := int64(0)
		if forward {
			want = 1
		}
		if n, _ := direct.LLen(ctx, key).Result(); n != want {
			t.Errorf("forward %v: the push ran %d times; want %d", forward, n, want)
		}
		if !p.down() {
			t.Errorf("forward %v: the proxy accepts connections right after the outage started", forward)
		}
		if err := via.Ping(ctx).Err(); err == nil {
			t.Errorf("forward %v: PING during the outage succeeded", forward)
		}
		clock.advance(time.Second)
		if err := via.Ping(ctx).Err(); err != nil {
			t.Errorf("forward %v: PING after the outage: %v", forward, err)
		}
		if c.get(faultPushOutage) != 1 {
			t.Errorf("forward %v: %d outages counted; want 1", forward, c.get(faultPushOutage))
		}
	}
}

func TestProxyDropsConnections(t *testing.T) {
	p, via, _, _, c, _ := proxied(t, 0)
	ctx := context.Background()
	if err := via.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if n := p.dropConns(5, func(n int) int { return n - 1 }); n != 1 {
		t.Fatalf("dropConns closed %d connections; want the 1 open", n)
	}
	if c.get(faultConnDropped) != 1 {
		t.Errorf("%d dropped connections counted; want 1", c.get(faultConnDropped))
	}
	if err := via.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after the drop (a new connection): %v", err)
	}
}

// The proxy notes the attempts of the jobs it forwards, also when a job is
// split across reads, and not those of results.
func TestProxyNotesForwardedJobs(t *testing.T) {
	p, via, _, key, _, _ := proxied(t, 0)
	ctx := context.Background()
	job := protocol.Job{BigTableUID: "c1", AttemptUID: "att-pushed", InputURL: "http://x.invalid/", AttemptNo: 1, DeadlineAt: time.Now()}
	res := protocol.Result{BigTableUID: "c1", AttemptUID: "att-result", Type: protocol.Success}
	if err := via.RPush(ctx, key, job.Encode(), res.Encode()).Err(); err != nil {
		t.Fatal(err)
	}
	split := protocol.Job{BigTableUID: "c2", AttemptUID: "att-split", InputURL: "http://x.invalid/", AttemptNo: 1, DeadlineAt: time.Now()}.Encode()
	pp := &pipe{}
	p.noteJobs(pp, split[:30])
	p.noteJobs(pp, split[30:])
	got := p.forwarded()
	for _, a := range []string{"att-pushed", "att-split"} {
		if _, ok := got[a]; !ok {
			t.Errorf("forwarded() = %v; want %s in it", got, a)
		}
	}
	if _, ok := got["att-result"]; ok {
		t.Errorf("forwarded() = %v: a result taken for a job", got)
	}
}
