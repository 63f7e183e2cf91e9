package poller_test

import (
	"context"
	"testing"

	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/upstream"
)

// A failure whose kind the record's policy makes final ("on_kind":
// "final") is the record's own fault, as a worker's "retryable": false is:
// it does not count against the upstream's breaker (docs/design.md, U3).
// Failures of other kinds do.
func TestFinalKindsDoNotOpenTheBreaker(t *testing.T) {
	for _, tc := range []struct {
		kind string
		want upstream.BreakerState
	}{
		{"bad_input", upstream.Closed},  // final by the policy
		{"upstream_5xx", upstream.Open}, // retried by the policy's strategy
	} {
		t.Run(tc.kind, func(t *testing.T) {
			e := setup(t)
			ctx := context.Background()
			cfg := upstream.DefaultConfig()
			cfg.Breaker.Consecutive, cfg.Breaker.FailureRate = 2, 0
			if err := e.st.SetUpstream(ctx, "example.com", cfg); err != nil {
				t.Fatal(err)
			}
			pol := refresh.DefaultPolicy()
			pol.OnKind = map[string]refresh.KindRule{"bad_input": {Final: true}}
			att := start(t, e, pol, "a", "b", "c")
			var results []string
			for _, uid := range []string{"a", "b", "c"} {
				r := protocol.Result{BigTableUID: uid, AttemptUID: att[uid], Type: protocol.Failure,
					Message: "refused", Kind: tc.kind}
				results = append(results, string(r.Encode()))
			}
			push(t, e, results...)
			drainAll(t, e, poller.New(e.st, e.q, poller.Config{Logger: quiet()}))
			got := breakerOf(t, e, "example.com")
			if got != tc.want {
				t.Fatalf("breaker %q after 3 failures of kind %s; want %q", got, tc.kind, tc.want)
			}
		})
	}
}
