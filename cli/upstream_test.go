package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

func TestUpstreamSetAndList(t *testing.T) {
	r := newOpsRunner(t)
	out := r.ok("upstream", "set", "partner", "--max-in-flight", "4", "--rate", "300/m",
		"--breaker", "consecutive=3 failure-rate=25% cool-down=1m max-cool-down=1h probes=1")
	var v upstreamView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	c := v.Config
	if c.MaxInFlight != 4 || c.Rate != 5 || c.Breaker.Consecutive != 3 || c.Breaker.FailureRate != 0.25 ||
		time.Duration(c.Breaker.CoolDown) != time.Minute || c.Breaker.Probes != 1 || c.Breaker.MinVolume != 20 {
		t.Fatalf("config %+v", c)
	}
	// A second set changes only the flags given.
	r.ok("upstream", "set", "partner", "--rate", "2/s")
	list, err := r.st.Upstreams(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Config.Rate != 2 || list[0].Config.MaxInFlight != 4 || list[0].Config.Breaker.Consecutive != 3 {
		t.Fatalf("upstreams after a second set: %+v", list)
	}

	// Records: the host by default, an explicit name with --upstream, the
	// host again with --upstream "".
	var row recordView
	json.Unmarshal([]byte(r.ok("add", "--uid", "a", "--input-url", "https://API.example.com/x")), &row)
	if row.Upstream != "api.example.com" {
		t.Fatalf("default upstream %q, want the host", row.Upstream)
	}
	json.Unmarshal([]byte(r.ok("update", "a", "--upstream", "partner")), &row)
	if row.Upstream != "partner" {
		t.Fatalf("upstream %q, want partner", row.Upstream)
	}
	json.Unmarshal([]byte(r.ok("update", "a", "--input-url", "https://other.example.com/y")), &row)
	if row.Upstream != "partner" {
		t.Fatalf("an explicit upstream survives a new URL: got %q", row.Upstream)
	}
	json.Unmarshal([]byte(r.ok("update", "a", "--upstream", "")), &row)
	if row.Upstream != "other.example.com" {
		t.Fatalf("--upstream \"\": %q, want the host", row.Upstream)
	}

	table := r.ok("upstreams")
	if !strings.Contains(table, "NAME") || !strings.Contains(table, "partner") || !strings.Contains(table, "2/s") {
		t.Fatalf("upstreams table:\n%s", table)
	}
	for _, bad := range [][]string{
		{"upstream", "set", "partner", "--rate", "fast"},
		{"upstream", "set", "partner", "--breaker", "probes=0"},
		{"upstream", "set", "partner", "--breaker", "bogus=1"},
		{"upstream", "set", "partner", "--max-in-flight", "-1"},
		{"upstream", "set", " partner"},
		{"upstream", "partner"},
	} {
		if _, stderr, code := r.run(bad...); code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want a usage error", bad, code, stderr)
		}
	}
	list, _ = r.st.Upstreams(context.Background())
	if len(list) != 1 || list[0].Config.Rate != 2 || list[0].Config.Breaker.Probes != 1 {
		t.Fatalf("refused values were written: %+v", list)
	}
}

func TestListPhaseParked(t *testing.T) {
	r := newOpsRunner(t)
	r.ok("upstream", "set", "down.example", "--breaker", "consecutive=1")
	r.ok("add", "--uid", "p", "--input-url", "https://down.example/x")
	r.ok("add", "--uid", "q", "--input-url", "https://up.example/x")
	// Open the breaker as a poller would, then let the scheduler park p.
	err := r.st.InTx(context.Background(), func(tx *store.Tx) error {
		ups, err := tx.LockUpstreams(context.Background(), []string{"down.example"})
		if err != nil {
			return err
		}
		ups["down.example"].Observe(upstream.Failed, tx.Now())
		return tx.SaveUpstreams(context.Background(), ups)
	})
	if err != nil {
		t.Fatal(err)
	}
	if res := r.tick(); res.BreakerParked != 1 || res.Started != 1 {
		t.Fatalf("tick %+v, want 1 parked and 1 started", res)
	}
	out := r.ok("list", "--phase", "parked")
	if !regexp.MustCompile(`(?m)^p +parked +0 `).MatchString(out) || strings.Contains(out, "up.example") {
		t.Fatalf("list --phase parked:\n%s", out)
	}
	var row recordView
	if err := json.Unmarshal([]byte(r.ok("show", "p")), &row); err != nil {
		t.Fatal(err)
	}
	if row.ParkedAt == nil || row.Phase != "parked" || row.Upstream != "down.example" {
		t.Fatalf("show p: phase %q, parked_at %v, upstream %q; want parked, a time, down.example", row.Phase, row.ParkedAt, row.Upstream)
	}
	var q recordView
	if err := json.Unmarshal([]byte(r.ok("show", "q")), &q); err != nil || q.Phase != "running" || q.ParkedAt != nil {
		t.Fatalf("show q: %+v %v; want running, not parked", q, err)
	}
	var stats statsView
	if err := json.Unmarshal([]byte(r.ok("stats", "--json")), &stats); err != nil {
		t.Fatal(err)
	}
	if stats.Records.Phases["parked"] != 1 || stats.Records.Phases["running"] != 1 || stats.Records.Phases["waiting"] != 0 {
		t.Fatalf("stats phases %v; want 1 parked, 1 running, 0 waiting", stats.Records.Phases)
	}
	if text := r.ok("stats"); !regexp.MustCompile(`(?m)^  parked +1 *$`).MatchString(text) {
		t.Fatalf("stats:\n%s", text)
	}
	if table := r.ok("upstreams"); !strings.Contains(table, "open") {
		t.Fatalf("upstreams:\n%s", table)
	}
}

// A cool-down given alone keeps the doubling after failed probes: the
// default max-cool-down (10m) would otherwise equal or refuse it.
func TestBreakerCoolDownAloneStillDoubles(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		wantMax time.Duration
	}{
		{"cool-down=10m", 200 * time.Minute},
		{"cool-down=1h", 20 * time.Hour},
		{"cool-down=1d", 7 * 24 * time.Hour},
		{"cool-down=1m", 10 * time.Minute},                    // the default max already allows doubling
		{"cool-down=10m max-cool-down=10m", 10 * time.Minute}, // given: kept
	} {
		b := upstream.DefaultConfig().Breaker
		if err := parseBreaker(tc.spec, &b); err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		if time.Duration(b.MaxCoolDown) != tc.wantMax {
			t.Errorf("%s: max-cool-down %s; want %s", tc.spec, b.MaxCoolDown, tc.wantMax)
		}
	}
}
