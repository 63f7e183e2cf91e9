package refresh

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
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
	// MaxRetryAfterCap bounds max_retry_after.
	MaxRetryAfterCap = 30 * 24 * time.Hour
	// DefaultMaxRetryAfter is the default max_retry_after: a worker's
	// retry_after sets the delay of its failure up to one day.
	DefaultMaxRetryAfter = 24 * time.Hour
	// MaxReasonLen bounds final_reason and each note, in characters.
	MaxReasonLen = 500
	// MaxNotes bounds the notes a policy keeps.
	MaxNotes = 20
	// MaxKindLen bounds a failure kind's name, in bytes; the wire protocol
	// refuses longer ones.
	MaxKindLen = 64
	// MaxKinds bounds the entries of on_kind.
	MaxKinds = 50
	// MaxNotifyURLLen bounds the notify URL.
	MaxNotifyURLLen = 2048
	// MaxSpread bounds spread.
	MaxSpread = 7 * 24 * time.Hour
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
	// OnKind maps a failure kind a worker reports (free text such as
	// rate_limited, upstream_5xx, bad_input) to its own strategy, or to
	// "final" (not retryable). A kind not listed, and a failure without a
	// kind, use the policy's strategy (docs/design.md, "Failures by kind").
	OnKind map[string]KindRule `json:"on_kind,omitempty"`
	// MaxRetryAfter bounds the delay a worker's retry_after may set: a
	// longer retry_after waits this long. 0 means the default, 1 day; at
	// most 30 days.
	MaxRetryAfter Duration `json:"max_retry_after,omitempty"`
	// FinalReason is the disabled reason stored when a final failure
	// disables the record, unless the worker sent a user_friendly_reason
	// (e.g. "thumbnail creation failed"). Empty: the default reason, which
	// names the attempt count and the last error.
	FinalReason string `json:"final_reason,omitempty"`
	// Notify is a webhook URL (http or https) the notifier also delivers
	// this record's events to, besides its own --webhook URLs; the notifier
	// calls it only when its host is on the operator's allow-list.
	Notify string `json:"notify,omitempty"`
	// NotifyFinal asks for the customer to be told when a final failure
	// disables the record ("Email the customer about the final failure"):
	// the record's disabled event carries it, for the notifier.
	NotifyFinal bool `json:"notify_final,omitempty"`
	// Notes are sentences of a policy written as sentences (--expr) that
	// bigtables keeps for people but does not act on ("Send a request to
	// the thumbnailer service"); explain prints them.
	Notes []string `json:"notes,omitempty"`
	// Spread, when not zero, adds to each planned refresh an offset within
	// [0, Spread), stable per record (see Rules.ForRecord), so records on one
	// schedule do not all fall due in the same second. At most 1 week.
	Spread Duration `json:"spread,omitempty"`

	// offset is the record's share of Spread, set by Rules.ForRecord and
	// added to every planned refresh; never stored.
	offset time.Duration
}

// KindFinal is the on_kind value that makes a failure of that kind final
// at once, as a worker's "retryable": false does.
const KindFinal = "final"

// KindRule is what on_kind says for one failure kind: Final (the JSON
// string "final"), or a strategy of its own (the JSON object
// {"strategy": {...}}).
type KindRule struct {
	// Final makes a failure of the kind final at once.
	Final bool
	// Strategy answers the delay after a failure of the kind.
	Strategy *Strategy
}

// MarshalJSON writes "final" or {"strategy": ...}.
func (k KindRule) MarshalJSON() ([]byte, error) {
	if k.Final || k.Strategy == nil {
		return json.Marshal(KindFinal)
	}
	return json.Marshal(struct {
		Strategy *Strategy `json:"strategy"`
	}{k.Strategy})
}

// UnmarshalJSON reads "final" or {"strategy": {...}} and nothing else.
func (k *KindRule) UnmarshalJSON(b []byte) error {
	var word string
	if err := json.Unmarshal(b, &word); err == nil {
		if word != KindFinal {
			return fmt.Errorf("on_kind value %q: expected \"final\" or {\"strategy\": {...}}", word)
		}
		*k = KindRule{Final: true}
		return nil
	}
	var obj struct {
		Strategy *Strategy `json:"strategy"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil || obj.Strategy == nil {
		return fmt.Errorf("on_kind value %s: expected \"final\" or {\"strategy\": {...}}", clipText(string(b), 80))
	}
	st := obj.Strategy.withDefaults()
	*k = KindRule{Strategy: &st}
	return nil
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
	if err := checkRanges(keys); err != nil {
		return Policy{}, err
	}
	if _, ok := keys["on_kind"]; ok {
		p.OnKind = nil // a map given replaces the base's, as every field does
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Policy{}, fmt.Errorf("%w: %s", ErrInvalidPolicy, strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return Policy{}, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidPolicy)
	}
	if p.Strategy != nil {
		st := p.Strategy.withDefaults()
		p.Strategy = &st
	}
	if p.Strategy != nil && p.Strategy.Kind == KindList && p.Strategy.Jitter == nil {
		p.SetStrategy(*p.Strategy) // one spelling for one policy
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// checkRanges checks the policy's durations against their fields' ranges
// before the decode does (which knows only AnyDuration), so that an error
// states the field's rule: timeout "100000h" is too long for a timeout
// before it is too long for any duration.
func checkRanges(keys map[string]json.RawMessage) error {
	for _, f := range []struct {
		key string
		r   Range
	}{{"timeout", TimeoutRange}, {"give_up_after", GiveUpRange}} {
		var s string
		if json.Unmarshal(keys[f.key], &s) == nil {
			if _, err := f.r.Parse(s); err != nil {
				return fmt.Errorf("%w: %s: %v", ErrInvalidPolicy, f.key, err)
			}
		}
	}
	var retries []string
	if json.Unmarshal(keys["retries"], &retries) == nil {
		for i, s := range retries {
			if _, err := DelayRange.Parse(s); err != nil {
				return fmt.Errorf("%w: retries[%d]: %v", ErrInvalidPolicy, i, err)
			}
		}
	}
	return nil
}

func (p Policy) clone() Policy {
	p.Retries = append([]Duration(nil), p.Retries...)
	if p.Strategy != nil {
		st := *p.Strategy
		p.Strategy = &st
	}
	if p.OnKind != nil {
		m := make(map[string]KindRule, len(p.OnKind))
		for k, v := range p.OnKind {
			m[k] = v
		}
		p.OnKind = m
	}
	p.Notes = append([]string(nil), p.Notes...)
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
	if !TimeoutRange.Contains(time.Duration(p.Timeout)) {
		return bad("timeout %s: expected %s", p.Timeout, TimeoutRange)
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
			if !DelayRange.Contains(time.Duration(d)) {
				return bad("retries[%d] %s: expected %s", i, d, DelayRange)
			}
		}
	}
	switch p.OnExhausted {
	case Disable, WaitNext:
	default:
		return bad("on_exhausted %q: expected %q or %q", p.OnExhausted, Disable, WaitNext)
	}
	if !GiveUpRange.Contains(time.Duration(p.GiveUpAfter)) {
		return bad("give_up_after %s: expected %s", p.GiveUpAfter, GiveUpRange)
	}
	if endless(p.RetryStrategy()) && p.GiveUpAfter == 0 {
		return bad("strategy %s without max_attempts retries forever: set give_up_after to bound it", p.RetryStrategy().Kind)
	}
	if len(p.OnKind) > MaxKinds {
		return bad("on_kind has %d entries: at most %d are allowed", len(p.OnKind), MaxKinds)
	}
	for _, kind := range p.kindNames() {
		rule := p.OnKind[kind]
		if err := ValidateKind(kind); err != nil {
			return bad("on_kind: %v", err)
		}
		if rule.Final || rule.Strategy == nil {
			continue
		}
		if err := rule.Strategy.Validate(); err != nil {
			return fmt.Errorf("on_kind %q: %w", kind, err)
		}
		if endless(*rule.Strategy) && p.GiveUpAfter == 0 {
			return bad("on_kind %q: strategy %s without max_attempts retries forever: set give_up_after to bound it", kind, rule.Strategy.Kind)
		}
	}
	if p.MaxRetryAfter < 0 || p.MaxRetryAfter > Duration(MaxRetryAfterCap) {
		return bad("max_retry_after %s: expected from 0s (the default, 1 day) to 30 days", p.MaxRetryAfter)
	}
	if err := checkText("final_reason", p.FinalReason); err != nil {
		return bad("%v", err)
	}
	if len(p.Notes) > MaxNotes {
		return bad("notes has %d entries: at most %d are allowed", len(p.Notes), MaxNotes)
	}
	for i, n := range p.Notes {
		if err := checkText(fmt.Sprintf("notes[%d]", i), n); err != nil {
			return bad("%v", err)
		}
	}
	if p.Notify != "" {
		if err := ValidateNotifyURL(p.Notify); err != nil {
			return bad("%v", err)
		}
	}
	if p.Spread < 0 || p.Spread > Duration(MaxSpread) {
		return bad("spread %s: expected from 0s (none) to 1 week", p.Spread)
	}
	return nil
}

// endless reports whether a strategy never exhausts its retries by count
// nor by age: only give_up_after can end it (fibonacci without
// max_attempts).
func endless(s Strategy) bool {
	spec, ok := kindOf(s.Kind)
	return ok && !spec.safely && s.Kind != KindProgressive && s.Attempts() == 0
}

// kindNames returns on_kind's kinds, sorted.
func (p Policy) kindNames() []string {
	names := make([]string, 0, len(p.OnKind))
	for k := range p.OnKind {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// ValidateKind checks a failure kind's name: 1 to MaxKindLen bytes of
// printable characters (letters, digits, punctuation; no spaces or control
// characters).
func ValidateKind(kind string) error {
	if kind == "" || len(kind) > MaxKindLen {
		return fmt.Errorf("kind %q: expected 1 to %d bytes", clipText(kind, MaxKindLen), MaxKindLen)
	}
	if !utf8.ValidString(kind) {
		return fmt.Errorf("kind %q: not valid UTF-8", kind)
	}
	for _, r := range kind {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("kind %q: expected no spaces or control characters (e.g. rate_limited)", kind)
		}
	}
	return nil
}

// ValidateNotifyURL checks a policy's notify URL: an absolute http or https
// URL with a host and no user or password (a secret would show in events
// and logs).
func ValidateNotifyURL(s string) error {
	if len(s) > MaxNotifyURLLen {
		return fmt.Errorf("notify: longer than %d bytes", MaxNotifyURLLen)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("notify %q: not a URL: %v", clipText(s, 100), err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("notify %q: expected an http:// or https:// URL", clipText(s, 100))
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("notify %q: the URL has no host", clipText(s, 100))
	case u.User != nil:
		return errors.New("notify: the URL holds a user or password; put secrets in the notifier's configuration, not in a policy")
	}
	return nil
}

// checkText checks a text a policy keeps for people.
func checkText(name, s string) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("%s: not valid UTF-8", name)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("%s: contains a control character (a line break, a tab or NUL): expected one line of text", name)
	case utf8.RuneCountInString(s) > MaxReasonLen:
		return fmt.Errorf("%s: longer than %d characters", name, MaxReasonLen)
	}
	return nil
}

// clipText cuts s to at most n characters, marking the cut with "…".
func clipText(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// RetryAfterCap is the longest delay a worker's retry_after may set:
// MaxRetryAfter, or DefaultMaxRetryAfter when it is 0.
func (p Policy) RetryAfterCap() time.Duration {
	if p.MaxRetryAfter > 0 {
		return time.Duration(p.MaxRetryAfter)
	}
	return DefaultMaxRetryAfter
}

// RuleFor returns the strategy a failure of kind answers to, and whether a
// failure of the kind is final at once: on_kind's entry for the kind, else
// the policy's strategy.
func (p Policy) RuleFor(kind string) (Strategy, bool) {
	if rule, ok := p.OnKind[kind]; ok && kind != "" {
		if rule.Final || rule.Strategy == nil {
			return Strategy{}, true
		}
		return *rule.Strategy, false
	}
	return p.RetryStrategy(), false
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
		d, err := DelayRange.Parse(part)
		if err != nil {
			return nil, fmt.Errorf("retry %d: %w", i+1, err)
		}
		out = append(out, Duration(d))
	}
	return out, nil
}
