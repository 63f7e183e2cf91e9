package poller_test

import (
	"context"
	"testing"

	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/upstream"
)

func upstreamState(t *testing.T, e env, name string) upstream.State {
	t.Helper()
	list, err := e.st.Upstreams(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range list {
		if u.Name == name {
			return u.State
		}
	}
	return upstream.State{}
}

// Results applied by a poller feed their upstream's breaker in the batch's
// transaction: failures a worker called not retryable are the record's own
// fault and never open it; as many retryable failures do.
func TestNotRetryableFailuresDoNotOpenTheBreaker(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	cfg := upstream.DefaultConfig()
	cfg.Breaker.Consecutive, cfg.Breaker.FailureRate = 3, 0
	if err := e.st.SetUpstream(ctx, "example.com", cfg); err != nil {
		t.Fatal(err)
	}
	p := poller.New(e.st, e.q, poller.Config{Logger: quiet()})
	no := false
	att := start(t, e, refresh.DefaultPolicy(), "a", "b", "c")
	for uid, a := range att {
		push(t, e, string(protocol.Result{BigTableUID: uid, AttemptUID: a, Type: protocol.Failure, Retryable: &no,
			UserFriendlyReason: "Provided URL is invalid"}.Encode()))
	}
	drainAll(t, e, p)
	if s := upstreamState(t, e, "example.com"); s.Breaker != upstream.Closed || s.Failures != 0 {
		t.Fatalf("after 3 not-retryable failures: breaker %s, failures %d; want closed, 0", s.Breaker, s.Failures)
	}
	att = start(t, e, refresh.DefaultPolicy(), "d", "e", "f")
	for uid, a := range att {
		push(t, e, result(uid, a, protocol.Failure, "GET: 503"))
	}
	drainAll(t, e, p)
	if s := upstreamState(t, e, "example.com"); s.Breaker != upstream.Open || s.Failures != 3 {
		t.Fatalf("after 3 retryable failures: breaker %s, failures %d; want open, 3", s.Breaker, s.Failures)
	}
}
