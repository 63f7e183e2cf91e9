package upstream

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/refresh"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func newUp(mod func(*Config)) *Upstream {
	c := DefaultConfig()
	if mod != nil {
		mod(&c)
	}
	return &Upstream{Name: "api.example", Config: c}
}

// step is one event on the injected clock: a due record asks to start, an
// attempt ends, or the tick wakes the upstream.
type step struct {
	at      time.Duration
	admit   bool
	outcome *Outcome
	wake    bool
	// expectations
	verdict Verdict
	state   BreakerState
	trans   BreakerState // "" means no transition expected
	release int
}

func ptr(o Outcome) *Outcome { return &o }

func run(t *testing.T, u *Upstream, steps []step) {
	t.Helper()
	for i, s := range steps {
		var tr *Transition
		now := at(s.at)
		switch {
		case s.admit:
			var v Verdict
			v, tr = u.Admit(now)
			if v != s.verdict {
				t.Fatalf("step %d: verdict %v, want %v (state %+v)", i, v, s.verdict, u.State)
			}
		case s.outcome != nil:
			tr = u.Observe(*s.outcome, now)
		case s.wake:
			var n int
			n, tr = u.Wake(now, 1000)
			if n != s.release {
				t.Fatalf("step %d: wake releases %d, want %d", i, n, s.release)
			}
		}
		if got := u.State.Current(); got != s.state {
			t.Fatalf("step %d: breaker %s, want %s (state %+v)", i, got, s.state, u.State)
		}
		switch {
		case s.trans == "" && tr != nil:
			t.Fatalf("step %d: unexpected transition %+v", i, *tr)
		case s.trans != "" && (tr == nil || tr.To != s.trans):
			t.Fatalf("step %d: transition %+v, want to %s", i, tr, s.trans)
		}
	}
}

func TestBreakerTransitions(t *testing.T) {
	fail, ok, unc := ptr(Failed), ptr(Succeeded), ptr(Uncounted)
	tests := []struct {
		name  string
		mod   func(*Config)
		steps []step
	}{
		{"consecutive failures open it; an open breaker parks", nil, []step{
			{at: 0, outcome: fail, state: Closed},
			{at: 1, outcome: fail, state: Closed},
			{at: 2, outcome: fail, state: Closed},
			{at: 3, outcome: fail, state: Closed},
			{at: 4, outcome: fail, state: Open, trans: Open},
			{at: 5, admit: true, verdict: Park, state: Open},
			{at: 29 * time.Second, admit: true, verdict: Park, state: Open},
		}},
		{"a success resets the consecutive count", nil, []step{
			{at: 0, outcome: fail, state: Closed}, {at: 1, outcome: fail, state: Closed},
			{at: 2, outcome: fail, state: Closed}, {at: 3, outcome: fail, state: Closed},
			{at: 4, outcome: ok, state: Closed},
			{at: 5, outcome: fail, state: Closed},
		}},
		{"not-retryable failures of one record do not count", nil, []step{
			{at: 0, outcome: fail, state: Closed}, {at: 1, outcome: fail, state: Closed},
			{at: 2, outcome: fail, state: Closed}, {at: 3, outcome: fail, state: Closed},
			{at: 4, outcome: unc, state: Closed}, {at: 5, outcome: unc, state: Closed},
			{at: 6, outcome: fail, state: Open, trans: Open},
		}},
		{"the failure rate over the window opens it, past the minimum volume", func(c *Config) {
			c.Breaker.Consecutive = 0
			c.Breaker.MinVolume = 4
		}, []step{
			{at: 0, outcome: fail, state: Closed}, {at: 1, outcome: ok, state: Closed},
			{at: 2, outcome: fail, state: Closed},
			{at: 3, outcome: ok, state: Closed}, // 4 attempts, 2 failed: a success never opens
			{at: 4, outcome: fail, state: Open, trans: Open},
		}},
		{"below the minimum volume the rate does not open it", func(c *Config) {
			c.Breaker.Consecutive = 0
			c.Breaker.MinVolume = 10
		}, []step{
			{at: 0, outcome: fail, state: Closed}, {at: 1, outcome: fail, state: Closed},
			{at: 2, outcome: fail, state: Closed}, {at: 3, outcome: fail, state: Closed},
		}},
		{"failures older than two windows are forgotten", func(c *Config) {
			c.Breaker.Consecutive = 0
			c.Breaker.MinVolume = 3
		}, []step{
			{at: 0, outcome: fail, state: Closed}, {at: 1, outcome: fail, state: Closed},
			{at: 3 * time.Minute, outcome: fail, state: Closed},
			{at: 3*time.Minute + 1, outcome: ok, state: Closed},
		}},
		{"cool-down over: half-open, probes start, the rest park; a success closes and releases", nil, []step{
			{at: 0, outcome: fail, state: Closed}, {at: 0, outcome: fail, state: Closed}, {at: 0, outcome: fail, state: Closed},
			{at: 0, outcome: fail, state: Closed}, {at: 0, outcome: fail, state: Open, trans: Open},
			{at: 30 * time.Second, admit: true, verdict: Start, state: HalfOpen, trans: HalfOpen},
			{at: 30 * time.Second, admit: true, verdict: Start, state: HalfOpen},
			{at: 30 * time.Second, admit: true, verdict: Park, state: HalfOpen},
			{at: 31 * time.Second, outcome: ok, state: Closed, trans: Closed},
			{at: 31 * time.Second, admit: true, verdict: Start, state: Closed},
		}},
		{"a failing probe reopens with a doubled cool-down, bounded", func(c *Config) {
			c.Breaker.Consecutive = 1
			c.Breaker.MaxCoolDown = refresh.Duration(90 * time.Second)
		}, []step{
			{at: 0, outcome: fail, state: Open, trans: Open}, // 30s
			{at: 30 * time.Second, wake: true, release: 2, state: HalfOpen, trans: HalfOpen},
			{at: 31 * time.Second, outcome: fail, state: Open, trans: Open}, // 60s
			{at: 90 * time.Second, admit: true, verdict: Park, state: Open},
			{at: 91 * time.Second, wake: true, release: 2, state: HalfOpen, trans: HalfOpen},
			{at: 92 * time.Second, outcome: fail, state: Open, trans: Open}, // 120s capped at 90s
			{at: 181 * time.Second, admit: true, verdict: Park, state: Open},
			{at: 182 * time.Second, admit: true, verdict: Start, state: HalfOpen, trans: HalfOpen},
		}},
		{"late answers while open only count", func(c *Config) { c.Breaker.Consecutive = 1 }, []step{
			{at: 0, outcome: fail, state: Open, trans: Open},
			{at: 1, outcome: ok, state: Open},
			{at: 2, outcome: fail, state: Open},
		}},
		{"probes lost (cancelled, undone): a new round after a cool-down", func(c *Config) { c.Breaker.Consecutive = 1 }, []step{
			{at: 0, outcome: fail, state: Open, trans: Open},
			{at: 30 * time.Second, wake: true, release: 2, state: HalfOpen, trans: HalfOpen},
			{at: 30 * time.Second, admit: true, verdict: Start, state: HalfOpen},
			{at: 30 * time.Second, admit: true, verdict: Start, state: HalfOpen},
			{at: 59 * time.Second, admit: true, verdict: Park, state: HalfOpen},
			{at: 59 * time.Second, wake: true, release: 0, state: HalfOpen},
			{at: 60 * time.Second, wake: true, release: 2, state: HalfOpen},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { run(t, newUp(tc.mod), tc.steps) })
	}
}

func TestReleaseIsSpreadByTheRate(t *testing.T) {
	u := newUp(func(c *Config) { c.Breaker.Consecutive = 1; c.Rate = 5 })
	u.Observe(Failed, at(0))
	u.Wake(at(30*time.Second), 1000)
	if tr := u.Observe(Succeeded, at(31*time.Second)); tr == nil || tr.To != Closed {
		t.Fatalf("transition %+v, want closed", tr)
	}
	total := 0
	for s := 0; s <= 10; s++ {
		n, _ := u.Wake(at(31*time.Second+time.Duration(s)*time.Second), 1000)
		total += n
	}
	if total != 50 {
		t.Fatalf("released %d in 10s at 5/s, want 50", total)
	}
	u.Wake(at(42*time.Second), 1000)
	u.Released(true)
	if !u.State.Releasing {
		t.Fatal("a release with parked records left is over")
	}
	u.Released(false)
	if u.State.Releasing {
		t.Fatal("a release with no parked record left is not over")
	}
	if n, _ := u.Wake(at(50*time.Second), 1000); n != 0 {
		t.Fatalf("released %d after the release ended", n)
	}
}

func TestReleaseWithoutRateUsesTheDefault(t *testing.T) {
	u := newUp(nil)
	u.State = State{Breaker: Closed, Releasing: true, ReleasedAt: t0}
	n, _ := u.Wake(at(2*time.Second), 1000)
	if n != 2*DefaultReleaseRate {
		t.Fatalf("released %d in 2s, want %d", n, 2*DefaultReleaseRate)
	}
	if n, _ := u.Wake(at(time.Hour), 100); n != 100 {
		t.Fatalf("released %d, want the limit 100", n)
	}
}

func TestMaxInFlight(t *testing.T) {
	u := newUp(func(c *Config) { c.MaxInFlight = 2 })
	u.InFlight = 1
	if v, _ := u.Admit(t0); v != Start {
		t.Fatalf("verdict %v, want start", v)
	}
	if v, _ := u.Admit(t0); v != Wait {
		t.Fatalf("verdict %v with 2 in flight of 2, want wait", v)
	}
	if !u.State.BlockedUntil.After(t0) {
		t.Fatal("a full upstream is blocked for a while")
	}
	u.Observe(Succeeded, at(time.Millisecond))
	if !u.State.BlockedUntil.IsZero() {
		t.Fatal("a result unblocks the upstream")
	}
	if v, _ := u.Admit(at(time.Millisecond)); v != Start {
		t.Fatalf("verdict %v after a result, want start", v)
	}
}

func TestRateIsATokenBucket(t *testing.T) {
	u := newUp(func(c *Config) { c.Rate = 2; c.Burst = 3 })
	starts := func(now time.Time) int {
		n := 0
		for {
			if v, _ := u.Admit(now); v != Start {
				return n
			}
			n++
		}
	}
	if n := starts(t0); n != 3 {
		t.Fatalf("a fresh bucket starts %d, want its burst 3", n)
	}
	if got, want := u.State.BlockedUntil, at(500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("blocked until %v, want %v (one token at 2/s)", got, want)
	}
	if n := starts(at(time.Second)); n != 2 {
		t.Fatalf("after 1s at 2/s: %d starts, want 2", n)
	}
	if n := starts(at(time.Hour)); n != 3 {
		t.Fatalf("after a quiet hour: %d starts, want the burst 3", n)
	}
	total := 0
	for ms := 100; ms <= 10_000; ms += 100 {
		total += starts(at(time.Hour + time.Duration(ms)*time.Millisecond))
	}
	if total != 20 {
		t.Fatalf("10s at 2/s started %d, want 20", total)
	}
}

// A result frees a place in flight but earns no token: an upstream blocked
// by its rate stays blocked until its next token, so the claim keeps
// passing over its rows; one blocked by its in-flight cap is cleared.
func TestResultKeepsARateBlock(t *testing.T) {
	u := newUp(func(c *Config) { c.Rate = 2; c.MaxInFlight = 5 })
	u.InFlight = 3
	for range 2 {
		if v, _ := u.Admit(t0); v != Start {
			t.Fatalf("verdict %v, want start", v)
		}
	}
	if v, _ := u.Admit(t0); v != Wait {
		t.Fatalf("verdict %v with no token, want wait", v)
	}
	u.Observe(Succeeded, at(100*time.Millisecond))
	if got, want := u.State.BlockedUntil, at(500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("blocked until %v after a result, want %v (the next token at 2/s)", got, want)
	}
	u.Observe(Succeeded, at(600*time.Millisecond))
	if !u.State.BlockedUntil.IsZero() {
		t.Fatalf("blocked until %v with a token earned, want unblocked", u.State.BlockedUntil)
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"max_in_flight": 4, "rate": 2.5, "breaker": {"consecutive": 3, "cool_down": "1m", "max_cool_down": "1h"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxInFlight != 4 || c.Rate != 2.5 || c.Breaker.Consecutive != 3 || c.Breaker.Probes != 2 || c.Breaker.FailureRate != 0.5 {
		t.Fatalf("config %+v", c)
	}
	for in, want := range map[string]string{
		`{"rate": -1}`:                       "rate -1",
		`{"breaker": {"probes": 0}}`:         "probes 0",
		`{"bogus": 1}`:                       "unknown field",
		`{"breaker": {"cool_down": "1h"}}`:   "max_cool_down 10m",
		`{"breaker": {"failure_rate": 1.5}}`: "failure_rate 1.5",
		`{"max_in_flight": -2}`:              "max_in_flight -2",
		`{"rate": 5, "burst": 0.5}`:          "burst 0.5",
	} {
		_, err := ParseConfig([]byte(in))
		if !errors.Is(err, ErrInvalidConfig) || !contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one naming %q", in, err, want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestName(t *testing.T) {
	for in, want := range map[string]string{
		"https://API.example.com/x?y=1":   "api.example.com",
		"http://user:pw@h.example:8080/x": "h.example:8080",
		"s3://bucket/key":                 "bucket",
		"not a url":                       "not a url",
	} {
		if got := Name(in); got != want {
			t.Errorf("Name(%q) = %q, want %q", in, got, want)
		}
	}
}
