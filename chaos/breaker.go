package chaos

import (
	"context"
	"fmt"

	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// breakerOff turns off the breaker of the runs' one upstream (all their
// records share a host). These runs measure what our own faults cost a
// record: a breaker opened by the timeouts those faults cause (pollers
// down, Redis restarted or failed over) or by the misbehaving workers'
// failures would park records for its cool-down, so that records are
// neither refreshed by the end of the run nor burned, and the run would
// measure the breaker instead. The breaker is measured on its own (e2e
// TestBreakerDeadAndHealthyUpstreams, bench --only upstreams). The
// upstream's row is still locked and counted by every batch, so the runs
// still exercise that under faults.
func breakerOff(ctx context.Context, st *store.Store, name string) (string, error) {
	cfg := upstream.DefaultConfig()
	cfg.Breaker.Consecutive, cfg.Breaker.FailureRate = 0, 0
	if err := st.SetUpstream(ctx, name, cfg); err != nil {
		return "", fmt.Errorf("turn the breaker of %s off: %w", name, err)
	}
	return fmt.Sprintf("upstream %s: breaker off (the run measures what our own faults cost a record, not the breaker; see chaos/breaker.go)", name), nil
}
