package refresh

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func mustStrategy(t *testing.T, text string) Strategy {
	t.Helper()
	s, err := ParseStrategy(text)
	if err != nil {
		t.Fatalf("ParseStrategy(%q): %v", text, err)
	}
	return s
}

// delays returns the delays after failures 1, 2, ... until exhausted (at
// most 20), with a fixed draw.
func delays(s Strategy, draw float64, failingFor func(k int) time.Duration) []time.Duration {
	var out []time.Duration
	var prev time.Duration
	for k := 1; k <= 20; k++ {
		in := Input{Failure: k, Previous: prev, Draw: draw}
		if failingFor != nil {
			in.FailingFor = failingFor(k)
		}
		d, ok := s.Delay(in)
		if !ok {
			break
		}
		out = append(out, d)
		prev = d
	}
	return out
}

func secs(ns ...float64) []time.Duration {
	out := []time.Duration{}
	for _, n := range ns {
		out = append(out, time.Duration(n*float64(time.Second)))
	}
	return out
}

func equal(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestExactStrategies checks every strategy against sequences worked out by hand.
func TestExactStrategies(t *testing.T) {
	tests := []struct {
		strategy string
		want     []time.Duration
	}{
		// The default list: exhausted after len+1 attempts.
		{"list delays=0,1m,5m,15m,30m,1h", secs(0, 60, 300, 900, 1800, 3600)},
		// 5s x2 cap 300s gives 5, 10, 20, 40, 80, 160, 300 s.
		{"exponential initial=5s multiplier=2 max=300s max_attempts=8", secs(5, 10, 20, 40, 80, 160, 300)},
		// max_attempts 5 means 4 delays: the fifth failure exhausts.
		{"exponential initial=5s max=300s max_attempts=5", secs(5, 10, 20, 40)},
		{"linear initial=5s max_attempts=5", secs(5, 10, 15, 20)},
		{"linear initial=5s max=12s max_attempts=5", secs(5, 10, 12, 12)},
		// 1, 1, 2, 3, 5, 8 units.
		{"fibonacci unit=1m max_attempts=7", secs(60, 60, 120, 180, 300, 480)},
		// The safely family, in milliseconds: fix 3000 with max_retry 3.
		{"fix ms=3000 max_retry=3", secs(3, 3, 3)},
		{"fix ms=3000 max_retry=0", secs()},
		// The safely family's exponential sequence, pct 0: exact.
		{"random-exp-backoff base_ms=3000 max_retry=5", secs(3, 9, 27, 81, 243)},
		{"random-exp-backoff base_ms=200 max_retry=3", secs(0.2, 0.4, 0.8)},
		{"random-exp-backoff base_ms=50 max_retry=3", secs(0.05, 0.25, 1.25)},
		{"random-exp-backoff base_ms=2000 max_retry=5", secs(2, 4, 8, 16, 32)},
		// :max 240000 caps the fifth at 240 s.
		{"random-exp-backoff base_ms=3000 max_ms=240000 max_retry=6", secs(3, 9, 27, 81, 240, 240)},
		{"rand-cycle cycle_ms=1000,2000,5000 max_retry=5", secs(1, 2, 5, 1, 2)},
	}
	for _, tt := range tests {
		s := mustStrategy(t, tt.strategy)
		if got := delays(s, 0.5, nil); !equal(got, tt.want) {
			t.Errorf("%s: delays %v; want %v", tt.strategy, got, tt.want)
		}
	}
}

func TestExpBackoffMsTable(t *testing.T) {
	// The safely library's published table: base -> retries 1..5.
	table := map[int64][]int64{
		50:   {50, 250, 1250, 6250, 31250},
		200:  {200, 400, 800, 1600, 3200},
		2000: {2000, 4000, 8000, 16000, 32000},
		3000: {3000, 9000, 27000, 81000, 243000},
	}
	for base, want := range table {
		for k, w := range want {
			if got := ExpBackoffMs(base, k+1, 0); got != w {
				t.Errorf("ExpBackoffMs(%d, %d) = %d; want %d", base, k+1, got, w)
			}
		}
	}
	// Exact, not float: 2500 -> 1000 * 2.5^4 = 39062.5 -> 39062.
	if got := ExpBackoffMs(2500, 4, 0); got != 39062 {
		t.Errorf("ExpBackoffMs(2500, 4) = %d; want 39062", got)
	}
	if got := ExpBackoffMs(3000, 60, 0); got != int64(MaxDelay/time.Millisecond) {
		t.Errorf("huge k not clamped: %d", got)
	}
}

func TestProgressive(t *testing.T) {
	s := mustStrategy(t, "progressive")
	day := 24 * time.Hour
	tests := []struct {
		failing time.Duration
		want    time.Duration
		ok      bool
	}{
		{0, 5 * time.Minute, true},
		{23 * time.Hour, 5 * time.Minute, true},
		{day, time.Hour, true},
		{6 * day, time.Hour, true},
		{10 * day, 12 * time.Hour, true},
		{20 * day, day, true},
		{100 * day, 96 * time.Hour, true},
		{300 * day, 192 * time.Hour, true},
		{360 * day, 0, false},
	}
	for _, tt := range tests {
		got, ok := s.Delay(Input{Failure: 9, FailingFor: tt.failing})
		if got != tt.want || ok != tt.ok {
			t.Errorf("failing for %v: %v, %v; want %v, %v", tt.failing, got, ok, tt.want, tt.ok)
		}
	}
	custom := mustStrategy(t, "progressive bands=1h:1m,2h:10m")
	if d, ok := custom.Delay(Input{FailingFor: 90 * time.Minute}); d != 10*time.Minute || !ok {
		t.Errorf("custom band = %v, %v", d, ok)
	}
	if _, ok := custom.Delay(Input{FailingFor: 2 * time.Hour}); ok {
		t.Error("custom bands did not give up after the last")
	}
}

// Randomized strategies are tested for their bounds over many draws, and for
// reaching both ends.
func TestRandomizedBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	tests := []struct {
		strategy string
		k        int
		prev     time.Duration
		lo, hi   time.Duration // lo <= d < hi (hi inclusive when capped)
	}{
		{"random-range min_ms=2000 max_ms=5000 max_retry=3", 1, 0, 2 * time.Second, 5 * time.Second},
		{"random base_ms=3000 pct=0.5 max_retry=3", 2, 0, 1500 * time.Millisecond, 4500 * time.Millisecond},
		{"random-exp-backoff base_ms=3000 pct=0.5 max_retry=3", 2, 0, 4500 * time.Millisecond, 13500 * time.Millisecond},
		{"random-exp-backoff base_ms=3000 pct=0.5 max_ms=240000 max_retry=9", 6, 0, 120 * time.Second, 360 * time.Second},
		{"rand-cycle cycle_ms=1000,4000 pct=0.25 max_retry=9", 2, 0, 3 * time.Second, 5 * time.Second},
		{"exponential initial=5s max=300s max_attempts=9 jitter=additive", 3, 0, 20 * time.Second, 25 * time.Second},
		{"exponential initial=5s max=300s max_attempts=9 jitter=additive:0.5", 7, 0, 300 * time.Second, 300*time.Second + 1},
		{"exponential initial=5s max_attempts=9 jitter=full", 3, 0, 0, 20 * time.Second},
		{"exponential initial=5s max_attempts=9 jitter=equal", 3, 0, 10 * time.Second, 20 * time.Second},
		{"exponential initial=5s max=60s max_attempts=9 jitter=decorrelated", 4, 10 * time.Second, 5 * time.Second, 30 * time.Second},
		{"exponential initial=5s max=60s max_attempts=9 jitter=decorrelated", 4, 50 * time.Second, 5 * time.Second, 60*time.Second + 1},
		{"fibonacci unit=10s max_attempts=9 jitter=full", 5, 0, 0, 50 * time.Second},
	}
	for _, tt := range tests {
		s := mustStrategy(t, tt.strategy)
		if !s.Randomized() {
			t.Errorf("%s: Randomized() = false", tt.strategy)
		}
		var lowest, highest time.Duration = 1 << 62, -1
		for range 2000 {
			d, ok := s.Delay(Input{Failure: tt.k, Previous: tt.prev, Draw: rng.Float64()})
			if !ok || d < tt.lo || d >= tt.hi {
				t.Fatalf("%s: failure %d: %v, %v outside [%v, %v)", tt.strategy, tt.k, d, ok, tt.lo, tt.hi)
			}
			lowest, highest = min(lowest, d), max(highest, d)
		}
		// The draws spread over the range: both ends are approached.
		span := tt.hi - tt.lo
		if tt.hi == 300*time.Second+1 || tt.hi == 60*time.Second+1 {
			continue // capped: a single value or a clipped range
		}
		if lowest-tt.lo > span/10 || tt.hi-highest > span/10 {
			t.Errorf("%s: draws cover only [%v, %v] of [%v, %v)", tt.strategy, lowest, highest, tt.lo, tt.hi)
		}
	}
	// The draw's extremes map to the range's ends exactly.
	s := mustStrategy(t, "random base_ms=3000 pct=0.5 max_retry=3")
	if d, _ := s.Delay(Input{Failure: 1, Draw: 0}); d != 1500*time.Millisecond {
		t.Errorf("draw 0 = %v; want 1.5s", d)
	}
}

func TestStrategyValidation(t *testing.T) {
	bad := []struct{ in, want string }{
		{"zigzag", `kind "zigzag": expected one of`},
		{"exponential initial=5s max_attempts=1001", "max_attempts 1001: expected 1 to 1000"},
		{"fibonacci max_attempts=3", "unit 0s: expected more than 0s"},
		{"exponential initial=5s max_attempts=3 multiplier=0.5", "multiplier 0.5: expected 1 to 100"},
		{"exponential initial=5s max_attempts=3 ms=4", "field ms does not apply"},
		{"list delays=1m jitter=wobbly", `jitter.kind "wobbly"`},
		{"list delays=0,1m jitter=decorrelated", "decorrelated jitter needs a first delay above 0s"},
		{"fix ms=3000", "max_retry is required"},
		{"fix ms=3000 max_retry=3 jitter=full", "field jitter does not apply"},
		{"random-range min_ms=5000 max_ms=2000 max_retry=1", "max_ms 2000: expected more than min_ms 5000"},
		{"random base_ms=3000 pct=1.5 max_retry=1", "pct 1.5: expected 0 to 1"},
		{"rand-cycle max_retry=1", "cycle_ms is empty"},
		{"progressive bands=2h:1m,1h:5m", "bands[1].until 1h: expected more than the previous band's (2h)"},
		{"progressive bands=2h", "expected until:every"},
		{"linear initial=5s max_attempts=x", "max_attempts=x: expected a number"},
		{"linear initial", `strategy part "initial": expected key=value`},
		{`{"kind":"linear","initial":"5s","max_attempts":3,"colour":1}`, `unknown field "colour"`},
	}
	for _, tt := range bad {
		_, err := ParseStrategy(tt.in)
		if err == nil || !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseStrategy(%q) = %v; want ErrInvalidPolicy containing %q", tt.in, err, tt.want)
		}
	}
}

func TestPolicyWithStrategy(t *testing.T) {
	def := DefaultPolicy()
	p, err := ParsePolicy([]byte(`{"strategy":{"kind":"fibonacci","unit":"1m","max_attempts":5}}`), &def)
	if err != nil {
		t.Fatal(err)
	}
	if p.Retries != nil || p.RetryStrategy().Kind != KindFibonacci {
		t.Errorf("strategy did not replace the default retries: %+v", p)
	}
	if got := string(p.JSON()); strings.Contains(got, "retries") || !strings.Contains(got, `"strategy":{"kind":"fibonacci","unit":"1m","max_attempts":5}`) {
		t.Errorf("JSON = %s", got)
	}
	back, err := ParsePolicy(p.JSON(), nil)
	if err != nil || back.RetryStrategy().Kind != KindFibonacci {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	if _, err := ParsePolicy([]byte(`{"retries":["1m"],"strategy":{"kind":"fix","ms":1,"max_retry":1}}`), nil); err == nil ||
		!strings.Contains(err.Error(), "not both") {
		t.Errorf("both retries and strategy: %v", err)
	}
	// A list strategy is stored in its short form.
	q, err := ParsePolicy([]byte(`{"strategy":{"kind":"list","delays":["1m"]}}`), nil)
	if err != nil || q.Strategy != nil || len(q.Retries) != 1 {
		t.Errorf("list strategy = %+v, %v; want retries [1m]", q, err)
	}
}

// TestStrategiesInTheStateMachine runs each family through Fail: the delay,
// alignment and exhaustion all come from one place.
func TestStrategiesInTheStateMachine(t *testing.T) {
	for _, text := range []string{
		"exponential initial=1m max_attempts=3", "linear initial=1m max_attempts=3", "fibonacci unit=1m max_attempts=3",
		"fix ms=60000 max_retry=2", "rand-cycle cycle_ms=60000 max_retry=2", "random base_ms=60000 max_retry=2",
		"random-range min_ms=60000 max_ms=60001 max_retry=2", "random-exp-backoff base_ms=60000 max_retry=2",
	} {
		p := policy(time.Hour, nil)
		p.SetStrategy(mustStrategy(t, text))
		r := Rules{nil, p}
		s := State{RefreshAt: at("08:00")}
		var decisions []string
		for !s.Disabled {
			now := s.RefreshAt
			s, _ = r.Start(s, now, "a")
			var step Step
			s, step, _ = r.Fail(s, now.Add(time.Minute), ReceivedAt(now.Add(time.Minute)), "a", Failure{Draw: 0.5})
			decisions = append(decisions, string(step.Decision))
			if len(decisions) > 5 {
				t.Fatalf("%s: never exhausted", text)
			}
		}
		if got := strings.Join(decisions, ","); got != "retry_no_plan,retry_no_plan,exhausted" {
			t.Errorf("%s: %s; want two retries then exhausted", text, got)
		}
		if s.DisabledReason != "Cannot refresh BigTable after 3 attempts" {
			t.Errorf("%s: reason %q", text, s.DisabledReason)
		}
	}
	// Progressive gives up by age, here with wait_next refused by a week.
	p := policy(time.Minute, nil)
	p.SetStrategy(mustStrategy(t, "progressive bands=1h:10m"))
	r := Rules{nil, p}
	s := State{RefreshAt: at("08:00")}
	n := 0
	for !s.Disabled {
		now := s.RefreshAt
		s, _ = r.Start(s, now, "a")
		s, _, _ = r.Fail(s, now.Add(time.Second), ReceivedAt(now.Add(time.Second)), "a", Failure{})
		n++
	}
	if n != 7 { // 08:00, 08:10, ..., 09:00 (failing for 1h: give up)
		t.Errorf("progressive 1h:10m made %d attempts; want 7", n)
	}
	// Decorrelated jitter remembers the previous delay in the state.
	p = policy(time.Minute, nil)
	p.SetStrategy(mustStrategy(t, "exponential initial=10s max=1h max_attempts=9 jitter=decorrelated"))
	r = Rules{nil, p}
	s = State{RefreshAt: at("08:00")}
	s, _ = r.Start(s, at("08:00"), "a")
	s, _, _ = r.Fail(s, at("08:00"), ReceivedAt(at("08:00")), "a", Failure{Draw: 0.999})
	if s.LastDelay < 29*time.Second {
		t.Errorf("first decorrelated delay %v; want near 30s", s.LastDelay)
	}
	first := s.LastDelay
	s, _ = r.Start(s, s.RefreshAt, "b")
	s, _, _ = r.Fail(s, s.StartedAt, ReceivedAt(s.StartedAt), "b", Failure{Draw: 0.999})
	if s.LastDelay < 2*first {
		t.Errorf("second decorrelated delay %v did not grow from %v", s.LastDelay, first)
	}
}
