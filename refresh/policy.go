package refresh

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// OnExhausted says what happens when the last retry of a policy has failed.
type OnExhausted string

const (
	// Disable makes the failure final: the record is disabled until a person
	// updates it. The default.
	Disable OnExhausted = "disable"
	// WaitNext resets attempt_no and waits for the next planned refresh; only
	// GiveUpAfter (or a schedule with no more occurrences) ends it.
	WaitNext OnExhausted = "wait_next"
)

// Limits on policy values; anything outside is refused when saved.
const (
	MaxTimeout = 7 * 24 * time.Hour
	MaxDelay   = 365 * 24 * time.Hour
	MaxRetries = 100
	MaxGiveUp  = MaxDuration
	MaxSpread  = 7 * 24 * time.Hour
)

// ErrInvalidPolicy is wrapped by every error that reports a policy the
// package refuses.
var ErrInvalidPolicy = errors.New("invalid policy")

// Policy is how one record is refreshed and retried (everything but its
// schedule). It is stored as JSON; fields missing from the JSON take the
// values of DefaultPolicy.
type Policy struct {
	// Timeout is how long one attempt may run before it counts as failed with
	// reason "timeout". Default 1h; from 1s to 7 days.
	Timeout Duration `json:"timeout"`
	// Retries is the list strategy in short: the delay after the
	// failure of attempt k (k = 1..len) is at index k-1; when attempt len+1
	// fails the retries are exhausted. Default [0s 1m 5m 15m 30m 1h]. Each
	// from 0 to 365 days, at most 100 entries. Ignored when Strategy is set.
	Retries []Duration `json:"retries"`
	// Strategy is any other retry strategy (exponential, fibonacci, the
	// safely family of docs/design.md, ...); nil means the Retries list.
	Strategy *Strategy `json:"strategy,omitempty"`
	// Align keeps refreshes aligned with the schedule: a retry that would
	// start after, or still be running at, the next planned refresh is moved
	// to that planned refresh. Default true.
	Align bool `json:"align"`
	// OnExhausted is what happens when retries run out. Default "disable".
	OnExhausted OnExhausted `json:"on_exhausted"`
	// GiveUpAfter, when not zero, makes any failure final once the record has
	// been failing that long without a success (e.g. 1 week). Default 0: never.
	GiveUpAfter Duration `json:"give_up_after,omitempty"`
	// Spread, when not zero, adds to each planned refresh an offset within
	// [0, Spread), stable per record (see Rules.ForRecord), so records on one
	// schedule do not all fall due in the same second. At most 1 week.
	Spread Duration `json:"spread,omitempty"`

	// offset is the record's share of Spread, set by Rules.ForRecord and
	// added to every planned refresh; never stored.
	offset time.Duration
}

// DefaultPolicy returns the policy of the original BigTable refresh design
// (docs/design.md, "Words"): timeout
// 1h, retries [0, 1m, 5m, 15m, 30m, 1h], aligned, disable when exhausted.
func DefaultPolicy() Policy {
	return Policy{
		Timeout: Duration(time.Hour),
		Retries: []Duration{0, Duration(time.Minute), Duration(5 * time.Minute),
			Duration(15 * time.Minute), Duration(30 * time.Minute), Duration(time.Hour)},
		Align:       true,
		OnExhausted: Disable,
	}
}

// ParsePolicy decodes a JSON policy on top of base (DefaultPolicy when nil),
// refusing unknown fields, and validates the result.
func ParsePolicy(b []byte, base *Policy) (Policy, error) {
	p := DefaultPolicy()
	if base != nil {
		p = base.clone()
	}
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(b, &keys) // errors are reported by the strict decode below
	_, hasRetries := keys["retries"]
	_, hasStrategy := keys["strategy"]
	switch {
	case hasRetries && hasStrategy:
		return Policy{}, fmt.Errorf("%w: give either retries (a list of delays) or strategy, not both", ErrInvalidPolicy)
	case hasRetries:
		p.Strategy = nil
	case hasStrategy:
		p.Retries = nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Policy{}, fmt.Errorf("%w: %s", ErrInvalidPolicy, strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return Policy{}, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidPolicy)
	}
	if p.Strategy != nil && p.Strategy.Kind == KindList && p.Strategy.Jitter == nil {
		p.SetStrategy(*p.Strategy) // one spelling for one policy
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

func (p Policy) clone() Policy {
	p.Retries = append([]Duration(nil), p.Retries...)
	if p.Strategy != nil {
		st := *p.Strategy
		p.Strategy = &st
	}
	return p
}

// RetryStrategy returns the strategy in force: Strategy, or the Retries list.
func (p Policy) RetryStrategy() Strategy {
	if p.Strategy != nil {
		return *p.Strategy
	}
	return ListStrategy(p.Retries...)
}

// SetStrategy makes s the policy's strategy; a list strategy without jitter
// is kept in its short form, Retries.
func (p *Policy) SetStrategy(s Strategy) {
	if s.Kind == KindList && s.Jitter == nil {
		p.Retries, p.Strategy = append([]Duration{}, s.Delays...), nil
		return
	}
	p.Retries, p.Strategy = nil, &s
}

// Validate names the first field that breaks a rule, and the rule.
func (p Policy) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPolicy, fmt.Sprintf(format, args...))
	}
	if p.Timeout < Duration(time.Second) || p.Timeout > Duration(MaxTimeout) {
		return bad("timeout %s: expected from 1s to 7 days", p.Timeout)
	}
	if p.Strategy != nil {
		if err := p.Strategy.Validate(); err != nil {
			return err
		}
	} else {
		if len(p.Retries) > MaxRetries {
			return bad("retries has %d entries: at most %d are allowed", len(p.Retries), MaxRetries)
		}
		for i, d := range p.Retries {
			if d < 0 || d > Duration(MaxDelay) {
				return bad("retries[%d] %s: expected from 0s to 365 days", i, d)
			}
		}
	}
	switch p.OnExhausted {
	case Disable, WaitNext:
	default:
		return bad("on_exhausted %q: expected %q or %q", p.OnExhausted, Disable, WaitNext)
	}
	if p.GiveUpAfter < 0 || p.GiveUpAfter > Duration(MaxGiveUp) {
		return bad("give_up_after %s: expected from 0s (never) to 10 years", p.GiveUpAfter)
	}
	if p.Spread < 0 || p.Spread > Duration(MaxSpread) {
		return bad("spread %s: expected from 0s (none) to 1 week", p.Spread)
	}
	return nil
}

// MarshalJSON writes retries (possibly empty) for the list strategy and
// strategy for any other, never both.
func (p Policy) MarshalJSON() ([]byte, error) {
	type plain Policy // without this method
	out := struct {
		plain
		Retries *[]Duration `json:"retries,omitempty"`
	}{plain: plain(p)}
	if p.Strategy == nil {
		r := p.Retries
		if r == nil {
			r = []Duration{}
		}
		out.Retries = &r
	}
	return json.Marshal(out)
}

// JSON returns the policy's canonical JSON, as stored.
func (p Policy) JSON() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // only strings, bools and Durations: cannot fail
	}
	return b
}

// ParseDelays reads a comma-separated list of durations, such as the
// --retries flag: "0,1m,5m" or "0, 1 minute, PT5M". An empty string is an
// empty list (no retries).
func ParseDelays(s string) ([]Duration, error) {
	if strings.TrimSpace(s) == "" {
		return []Duration{}, nil
	}
	var out []Duration
	for i, part := range strings.Split(s, ",") {
		d, err := ParseDuration(part)
		if err != nil {
			return nil, fmt.Errorf("retry %d: %w", i+1, err)
		}
		out = append(out, Duration(d))
	}
	return out, nil
}
