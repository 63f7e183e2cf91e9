package bench

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/bigtables/bigtables/internal/testsvc"
)

// TestUpstreamsScenario runs the upstreams scenario and checks what does
// not depend on the machine's speed: attempts on the dead upstream while
// its breaker is open are probes only, nothing is disabled, and every
// parked record is refreshed after the recovery. The figures are logged.
func TestUpstreamsScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("the upstreams scenario takes about 40 seconds; not in -short")
	}
	redisURL, _, _ := testsvc.Redis(t)
	res, err := Upstreams(context.Background(), Config{AdminURL: testsvc.AdminDatabaseURL(t), RedisURL: redisURL, Workers: 4, Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("figures:\n%s", b)
	if res.AttemptsOnDeadWhileOpen > res.ProbesAllowed {
		t.Errorf("%d attempts on the dead upstream while its breaker was open; its probes allow %d", res.AttemptsOnDeadWhileOpen, res.ProbesAllowed)
	}
	if res.DisabledOnDeadUpstream != 0 {
		t.Errorf("%d records of the dead upstream disabled", res.DisabledOnDeadUpstream)
	}
	if res.ParkedAtRecovery == 0 {
		t.Error("no record was parked during the outage")
	}
}
