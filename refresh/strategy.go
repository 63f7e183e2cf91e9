package refresh

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"time"
)

// Strategy kinds. Each answers one question: after the failure of attempt k,
// how long to wait, or are the retries exhausted. Alignment with the
// schedule, timeouts, on_exhausted and give_up_after are the state machine's
// and apply to every kind alike. Each kind's rules are its entry in the
// table kinds (kinds.go); docs/design.md, "Retry strategies".
const (
	KindList        = "list"        // explicit delays: delays[k-1], exhausted after len+1 attempts
	KindExponential = "exponential" // min(initial * multiplier^(k-1), max)
	KindLinear      = "linear"      // min(initial * k, max)
	KindFibonacci   = "fibonacci"   // unit * fib(k), fib = 1, 1, 2, 3, 5, ...
	KindProgressive = "progressive" // the interval grows with how long the record has failed
	// The safely family (docs/design.md, "Words"): delays in milliseconds,
	// max_retry retries.
	KindFix              = "fix"
	KindRandomRange      = "random-range"
	KindRandom           = "random"
	KindRandomExpBackoff = "random-exp-backoff"
	KindRandCycle        = "rand-cycle"
)

// Jitter kinds, for list, exponential, linear and fibonacci.
const (
	JitterAdditive     = "additive"     // d + rand[0, d*fraction), still capped by max
	JitterFull         = "full"         // rand[0, d)
	JitterEqual        = "equal"        // d/2 + rand[0, d/2)
	JitterDecorrelated = "decorrelated" // min(max, rand[initial, previous*3)) (AWS)
)

// Band is one step of a progressive strategy: while the record has been
// failing for less than Until, retry Every.
type Band struct {
	Until Duration `json:"until"`
	Every Duration `json:"every"`
}

// SeedBands are the default progressive schedule: every 5 minutes during the
// first day, hourly to 7 days, every 12 hours to 14 days, daily to 30 days,
// every 96 hours to 180 days, every 192 hours to 360 days, then give up.
func SeedBands() []Band {
	h := func(n int) Duration { return Duration(time.Duration(n) * time.Hour) }
	return []Band{
		{h(24), Duration(5 * time.Minute)}, {h(7 * 24), h(1)}, {h(14 * 24), h(12)},
		{h(30 * 24), h(24)}, {h(180 * 24), h(96)}, {h(360 * 24), h(192)},
	}
}

// Jitter randomizes a strategy's delays.
type Jitter struct {
	Kind string `json:"kind"`
	// Fraction, for additive jitter: the added delay is below d*fraction.
	// Default 0.25.
	Fraction float64 `json:"fraction,omitempty"`
}

// Strategy is a retry strategy as stored in a policy. Which fields apply
// depends on Kind; Validate names any field that is missing, out of range or
// foreign to the kind.
type Strategy struct {
	Kind string `json:"kind"`

	Delays      []Duration `json:"delays,omitempty"`       // list
	Initial     Duration   `json:"initial,omitempty"`      // exponential, linear
	Multiplier  float64    `json:"multiplier,omitempty"`   // exponential (default 2)
	Unit        Duration   `json:"unit,omitempty"`         // fibonacci
	Max         Duration   `json:"max,omitempty"`          // cap for exponential, linear, fibonacci, jitter
	MaxAttempts int        `json:"max_attempts,omitempty"` // exponential, linear, fibonacci: the failure of this attempt exhausts
	Bands       []Band     `json:"bands,omitempty"`        // progressive (default SeedBands)
	Jitter      *Jitter    `json:"jitter,omitempty"`

	// The safely family (docs/design.md, "Words"), in milliseconds.
	Ms       int64   `json:"ms,omitempty"`        // fix
	MinMs    int64   `json:"min_ms,omitempty"`    // random-range
	MaxMs    int64   `json:"max_ms,omitempty"`    // random-range; cap for random-exp-backoff
	BaseMs   int64   `json:"base_ms,omitempty"`   // random, random-exp-backoff
	Pct      float64 `json:"pct,omitempty"`       // random, random-exp-backoff, rand-cycle: +/- fraction
	CycleMs  []int64 `json:"cycle_ms,omitempty"`  // rand-cycle
	MaxRetry *int    `json:"max_retry,omitempty"` // safely family: retries, so max_retry+1 attempts in all
}

// The exponential strategy's defaults for fields left out: 5 attempts, 5 s
// initial delay, multiplier 2, capped at 300 s.
const (
	DefaultExpMaxAttempts = 5
	DefaultExpInitial     = Duration(5 * time.Second)
	DefaultExpMax         = Duration(300 * time.Second)
)

// withDefaults fills the fields a kind defaults when they are left out
// (exponential: DefaultExpMaxAttempts, DefaultExpInitial, multiplier 2,
// DefaultExpMax unless initial is longer), so the stored policy says them.
func (s Strategy) withDefaults() Strategy {
	if s.Kind == KindExponential {
		if s.Initial == 0 {
			s.Initial = DefaultExpInitial
		}
		if s.MaxAttempts == 0 {
			s.MaxAttempts = DefaultExpMaxAttempts
		}
		if s.Multiplier == 0 {
			s.Multiplier = 2
		}
		if s.Max == 0 && s.Initial <= DefaultExpMax {
			s.Max = DefaultExpMax // a longer initial delay keeps no cap rather than a cap below it
		}
	}
	return s
}

// Input is what a strategy may use to answer.
type Input struct {
	// Failure is the number of the attempt that failed: 1 for the first
	// failure since the last success.
	Failure int
	// FailingFor is how long the record has been failing (progressive).
	FailingFor time.Duration
	// Previous is the delay chosen after the previous failure, 0 if none
	// (decorrelated jitter).
	Previous time.Duration
	// Draw is a uniform random number in [0, 1), drawn by the caller from an
	// injectable source, so runs are reproducible.
	Draw float64
}

// ListStrategy returns the list strategy: explicit delays, the form of the
// default policy.
func ListStrategy(delays ...Duration) Strategy {
	return Strategy{Kind: KindList, Delays: append([]Duration{}, delays...)}
}

// clampDelay keeps a computed delay within [0, MaxDelay] without overflow.
func clampDelay(d float64) time.Duration {
	switch {
	case d <= 0 || math.IsNaN(d):
		return 0
	case d >= float64(MaxDelay):
		return MaxDelay
	}
	return time.Duration(d)
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// Delay answers the strategy's question for one failure: the delay before
// the retry, or false when the retries are exhausted.
func (s Strategy) Delay(in Input) (time.Duration, bool) {
	k := max(in.Failure, 1)
	d, ok := s.base(k, in)
	if !ok {
		return 0, false
	}
	if s.Jitter != nil {
		d = s.jitter(d, in)
	}
	return d, true
}

func (s Strategy) capped(d float64) time.Duration {
	if s.Max > 0 {
		d = math.Min(d, float64(s.Max))
	}
	return clampDelay(d)
}

// base is the strategy's delay before jitter.
func (s Strategy) base(k int, in Input) (time.Duration, bool) {
	spec, ok := kindOf(s.Kind)
	if !ok {
		return 0, false // Validate refuses unknown kinds
	}
	// The safely family: max_retry retries, so the failure of attempt
	// max_retry+1 exhausts.
	if spec.safely && (s.MaxRetry == nil || k > *s.MaxRetry) {
		return 0, false
	}
	return spec.delay(s, k, in)
}

func (s Strategy) multiplier() float64 {
	if s.Multiplier == 0 {
		return 2
	}
	return s.Multiplier
}

func (s Strategy) bands() []Band {
	if len(s.Bands) == 0 {
		return SeedBands()
	}
	return s.Bands
}

// safelyRandom is the safely family's "random base +/- pct": uniform in
// [base - int(base*pct), base + int(base*pct)).
func safelyRandom(base int64, pct, draw float64) int64 {
	spread := int64(float64(base) * pct)
	return base - spread + int64(draw*float64(2*spread))
}

// ExpBackoffMs is the safely family's exponential sequence, in exact
// arithmetic: with
// size = floor(log10 base) and factor = 10^size, the delay after failure k is
// floor(factor * (base/factor)^k), capped by maxMs when maxMs > 0. Base 3000
// gives 3000, 9000, 27000, 81000, 243000; base 200 gives 200, 400, 800.
func ExpBackoffMs(base int64, k int, maxMs int64) int64 {
	if base <= 0 {
		return 0
	}
	size := len(fmt.Sprint(base)) - 1
	factor := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(size)), nil)
	// factor * (base/factor)^k = base^k / factor^(k-1)
	num := new(big.Int).Exp(big.NewInt(base), big.NewInt(int64(k)), nil)
	den := new(big.Int).Exp(factor, big.NewInt(int64(k-1)), nil)
	v := new(big.Int).Quo(num, den)
	limit := big.NewInt(int64(MaxDelay / time.Millisecond))
	if maxMs > 0 && maxMs < limit.Int64() {
		limit = big.NewInt(maxMs)
	}
	if v.Cmp(limit) > 0 {
		return limit.Int64()
	}
	return v.Int64()
}

// fib returns the k-th Fibonacci number (1, 1, 2, 3, 5, ...), as a float so
// large k saturates instead of overflowing.
func fib(k int) float64 {
	a, b := 1.0, 1.0
	for i := 2; i < k && a < 1e18; i++ {
		a, b = b, a+b
	}
	if k <= 2 {
		return 1
	}
	return b
}

func (s Strategy) jitter(d time.Duration, in Input) time.Duration {
	switch s.Jitter.Kind {
	case JitterAdditive:
		f := s.Jitter.Fraction
		if f == 0 {
			f = 0.25
		}
		return s.capped(float64(d) + in.Draw*float64(d)*f)
	case JitterFull:
		return clampDelay(in.Draw * float64(d))
	case JitterEqual:
		return clampDelay(float64(d)/2 + in.Draw*float64(d)/2)
	case JitterDecorrelated:
		first, _ := s.base(1, Input{})
		prev := in.Previous
		if prev <= 0 {
			prev = first
		}
		hi := 3 * float64(prev)
		if hi <= float64(first) {
			return s.capped(float64(first))
		}
		return s.capped(float64(first) + in.Draw*(hi-float64(first)))
	}
	return d
}

// Validate names the first field that breaks a rule of the kind.
func (s Strategy) Validate() error {
	spec, ok := kindOf(s.Kind)
	if !ok {
		return badStrategy("kind %q: expected one of %s", s.Kind, kindNames())
	}
	for _, f := range s.setFields() {
		if !slices.Contains(spec.fields, f) {
			return badStrategy("%s: field %s does not apply (it takes %s)", s.Kind, f, strings.Join(spec.fields, ", "))
		}
	}
	if err := spec.validate(s); err != nil {
		return err
	}
	if s.Max < 0 || s.Max > Duration(MaxDelay) {
		return badStrategy("%s: max %s: expected at most 365 days", s.Kind, s.Max)
	}
	if spec.safely {
		if err := checkMaxRetry(s); err != nil {
			return err
		}
	}
	if j := s.Jitter; j != nil {
		switch j.Kind {
		case JitterAdditive:
			if j.Fraction < 0 || j.Fraction > 10 {
				return badStrategy("%s: jitter.fraction %v: expected 0 to 10", s.Kind, j.Fraction)
			}
		case JitterFull, JitterEqual, JitterDecorrelated:
			if j.Fraction != 0 {
				return badStrategy("%s: jitter.fraction applies to additive jitter only", s.Kind)
			}
		default:
			return badStrategy("%s: jitter.kind %q: expected additive, full, equal or decorrelated", s.Kind, j.Kind)
		}
		if j.Kind == JitterDecorrelated {
			if first, ok := s.base(1, Input{}); ok && first == 0 {
				return badStrategy("%s: decorrelated jitter needs a first delay above 0s", s.Kind)
			}
		}
	}
	return nil
}

// Attempts returns the number of the attempt whose failure exhausts the
// retries, or 0 when only the record's age ends them (progressive).
func (s Strategy) Attempts() int {
	spec, ok := kindOf(s.Kind)
	switch {
	case !ok:
		return 0
	case spec.safely:
		if s.MaxRetry == nil {
			return 0
		}
		return *s.MaxRetry + 1
	}
	return spec.attempts(s)
}

// Randomized reports whether the strategy draws random numbers.
func (s Strategy) Randomized() bool {
	spec, ok := kindOf(s.Kind)
	return s.Jitter != nil || (ok && spec.randomized)
}

// setFields lists the JSON names of the fields that are set.
func (s Strategy) setFields() []string {
	var out []string
	for _, f := range strategyFields {
		if f.isSet(s) {
			out = append(out, f.name)
		}
	}
	return out
}

// ParseStrategy reads a strategy from JSON ({"kind": ...}) or from the
// compact form the --strategy flag takes: the kind, then key=value pairs with
// the JSON field names (dashes work too), lists comma-separated, bands as
// until:every pairs and jitter as kind[:fraction]:
//
//	exponential initial=5s multiplier=2 max=300s max-attempts=7 jitter=additive:0.25
//	random-exp-backoff base_ms=3000 pct=0.5 max_ms=240000 max_retry=3
//	progressive bands=24h:5m,168h:1h
func ParseStrategy(text string) (Strategy, error) {
	text = strings.TrimSpace(text)
	var b []byte
	if strings.HasPrefix(text, "{") {
		b = []byte(text)
	} else {
		m, err := compactStrategy(text)
		if err != nil {
			return Strategy{}, err
		}
		b, _ = json.Marshal(m)
	}
	var s Strategy
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Strategy{}, fmt.Errorf("%w: strategy: %s", ErrInvalidPolicy, strings.TrimPrefix(err.Error(), "json: "))
	}
	s = s.withDefaults()
	if err := s.Validate(); err != nil {
		return Strategy{}, err
	}
	return s, nil
}

func compactStrategy(text string) (map[string]any, error) {
	fields := strings.Fields(text)
	if len(fields) == 0 {
		return nil, fmt.Errorf("%w: strategy is empty: expected a kind such as exponential", ErrInvalidPolicy)
	}
	m := map[string]any{"kind": fields[0]}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		k = strings.ReplaceAll(k, "-", "_")
		if !ok || v == "" {
			return nil, fmt.Errorf("%w: strategy part %q: expected key=value", ErrInvalidPolicy, f)
		}
		f, _ := fieldOf(k) // unknown names go through as text: decoding names them
		switch f.compact {
		case compactNumber:
			var n json.Number
			if err := json.Unmarshal([]byte(v), &n); err != nil {
				return nil, fmt.Errorf("%w: strategy %s=%s: expected a number", ErrInvalidPolicy, k, v)
			}
			m[k] = n
		case compactDurations:
			m[k] = strings.Split(v, ",")
		case compactNumbers:
			var list []json.Number
			for _, p := range strings.Split(v, ",") {
				var n json.Number
				if err := json.Unmarshal([]byte(p), &n); err != nil {
					return nil, fmt.Errorf("%w: strategy %s value %q: expected a number of milliseconds", ErrInvalidPolicy, k, p)
				}
				list = append(list, n)
			}
			m[k] = list
		case compactBands:
			var bands []map[string]string
			for _, p := range strings.Split(v, ",") {
				until, every, ok := strings.Cut(p, ":")
				if !ok {
					return nil, fmt.Errorf("%w: strategy band %q: expected until:every, e.g. 24h:5m", ErrInvalidPolicy, p)
				}
				bands = append(bands, map[string]string{"until": until, "every": every})
			}
			m[k] = bands
		case compactJitter:
			kind, frac, hasFrac := strings.Cut(v, ":")
			j := map[string]any{"kind": kind}
			if hasFrac {
				var n json.Number
				if err := json.Unmarshal([]byte(frac), &n); err != nil {
					return nil, fmt.Errorf("%w: strategy jitter fraction %q: expected a number", ErrInvalidPolicy, frac)
				}
				j["fraction"] = n
			}
			m[k] = j
		default:
			m[k] = v
		}
	}
	return m, nil
}
