package chaos_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/chaos"
	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/redis/go-redis/v9"
)

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// The short form of make failover: under load, the Sentinel-managed master
// is killed after its replica was cut off for 300 ms, so it dies with
// writes it never replicated. The system must follow the failover by
// itself, and every attempt it lost must be explained by the failover and
// re-driven by a retry. The figures are logged, not asserted.
func TestFailover(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("CI") == "" {
		t.Skip("skipping: redis-server is not installed (scripts/redis-sentinel.sh installs it; set CI=1 to make this a failure)")
	}
	admin := testsvc.AdminDatabaseURL(t)
	port, err := testsvc.FreePorts(26000, 5, 0) // apart from RedisSentinel's ports
	if err != nil {
		t.Fatal(err)
	}
	redis.SetLogger(quietRedis{}) // the clients log every refused dial during the outage
	rep, err := chaos.RunFailover(context.Background(), chaos.FailoverConfig{
		AdminURL: admin, Port: port, Records: 200, Every: 2 * time.Second, Timeout: 3 * time.Second,
		Warmup: 3 * time.Second, Observe: 4 * time.Second, Kills: 1, Lag: 300 * time.Millisecond, Workers: 8,
		Progress: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	k := rep.Kills[0]
	t.Logf("failover %v, first push %v, resumed %v; lost %d jobs and %d results, %d late, %d served twice; %d records re-driven",
		k.Failover, k.FirstPush, k.Resumed, rep.JobsLost, rep.ResultsLost, rep.Late, rep.PoppedTwice, rep.ReDriven)
	if k.Resumed == 0 {
		t.Error("no attempt started after the kill was applied: the system did not follow the failover")
	}
	for _, inv := range rep.Invariants {
		for _, v := range inv.Violations {
			t.Errorf("%s: %s", inv.Name, v)
		}
	}
}
