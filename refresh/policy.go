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
	// Retries is the delay after the failure of attempt k (k = 1..len) at index
	// k-1; when attempt len+1 fails the retries are exhausted. Default
	// [0s 1m 5m 15m 30m 1h]. Each from 0 to 365 days, at most 100 entries.
	Retries []Duration `json:"retries"`
	// Align keeps refreshes aligned with the schedule: a retry that would
	// start after, or still be running at, the next planned refresh is moved
	// to that planned refresh. Default true.
	Align bool `json:"align"`
	// OnExhausted is what happens when retries run out. Default "disable".
	OnExhausted OnExhausted `json:"on_exhausted"`
	// GiveUpAfter, when not zero, makes any failure final once the record has
	// been failing that long without a success (e.g. 1 week). Default 0: never.
	GiveUpAfter Duration `json:"give_up_after,omitempty"`
}

// DefaultPolicy returns the policy of the seed's twice-a-day example: timeout
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
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Policy{}, fmt.Errorf("%w: %s", ErrInvalidPolicy, strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return Policy{}, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidPolicy)
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

func (p Policy) clone() Policy {
	p.Retries = append([]Duration(nil), p.Retries...)
	return p
}

// Validate names the first field that breaks a rule, and the rule.
func (p Policy) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPolicy, fmt.Sprintf(format, args...))
	}
	if p.Timeout < Duration(time.Second) || p.Timeout > Duration(MaxTimeout) {
		return bad("timeout %s: expected from 1s to 7 days", p.Timeout)
	}
	if len(p.Retries) > MaxRetries {
		return bad("retries has %d entries: at most %d are allowed", len(p.Retries), MaxRetries)
	}
	for i, d := range p.Retries {
		if d < 0 || d > Duration(MaxDelay) {
			return bad("retries[%d] %s: expected from 0s to 365 days", i, d)
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
	return nil
}

// JSON returns the policy's canonical JSON, as stored.
func (p Policy) JSON() []byte {
	if p.Retries == nil {
		p.Retries = []Duration{}
	}
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
