// Package upstream is the pure core of the per-upstream protections: a
// circuit breaker (closed, open, half-open), a limit on attempts in flight
// and a smoothed start rate (a token bucket), for all the records that share
// one upstream (docs/design.md, "Upstreams"). It does no I/O and never reads
// the clock: every method takes now. Its state is stored in PostgreSQL (table
// upstreams) and changed under the transactions that start attempts and
// apply their results, so every scheduler and poller sees one state.
package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/bigtables/bigtables/refresh"
)

// BreakerState is where an upstream's breaker stands.
type BreakerState string

// The breaker's states.
const (
	// Closed: attempts start (within the limits); failures are counted.
	Closed BreakerState = "closed"
	// Open: due records are parked, no attempt starts, until NextProbe.
	Open BreakerState = "open"
	// HalfOpen: a few probe attempts (real records) may start; a success
	// closes the breaker, a failure opens it again with a longer cool-down.
	HalfOpen BreakerState = "half_open"
)

// Breaker says when an upstream's breaker opens and how it recovers
// (docs/design.md, U4, U6, U7).
type Breaker struct {
	// Consecutive opens the breaker after this many failed attempts in a
	// row (timeouts count; not-retryable failures do not). 0: never on
	// this count. Default 5.
	Consecutive int `json:"consecutive"`
	// FailureRate (0 to 1) opens the breaker when at least this share of
	// the attempts of the last Window failed, once MinVolume attempts
	// ended in it. 0: never on the rate. Default 0.5.
	FailureRate float64 `json:"failure_rate"`
	// MinVolume is the fewest attempts in the window for FailureRate to
	// apply. Default 20.
	MinVolume int `json:"min_volume"`
	// Window is the span FailureRate is measured over (two fixed windows,
	// the previous one weighted by how much of it is still in span).
	// Default 1m.
	Window refresh.Duration `json:"window"`
	// CoolDown is how long the breaker stays open the first time; each
	// failed probe doubles it, up to MaxCoolDown. Default 30s.
	CoolDown refresh.Duration `json:"cool_down"`
	// MaxCoolDown bounds the cool-down's backoff. Default 10m.
	MaxCoolDown refresh.Duration `json:"max_cool_down"`
	// Probes is how many attempts may start while half-open. Default 2.
	Probes int `json:"probes"`
}

// Config is one upstream's settings. Upstreams nobody configured take
// DefaultConfig.
type Config struct {
	// MaxInFlight caps the attempts running for this upstream across all
	// schedulers; 0: no cap.
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// Rate caps starts per second (a token bucket of Burst tokens); 0: no
	// cap.
	Rate float64 `json:"rate,omitempty"`
	// Burst is the token bucket's size: how many starts may go at once
	// after a quiet spell. Default max(1, Rate).
	Burst float64 `json:"burst,omitempty"`
	// ReleaseRate is how many parked records per second are released after
	// the breaker closes. Default Rate, or 10 when Rate is 0.
	ReleaseRate float64 `json:"release_rate,omitempty"`
	// Breaker is the circuit breaker's policy.
	Breaker Breaker `json:"breaker"`
}

// DefaultConfig is the configuration of upstreams nobody configured: no
// limits, and a breaker that opens after 5 failures in a row or half the
// attempts of a minute (20 at least), cools down 30s doubling up to 10m,
// and probes with 2 records.
func DefaultConfig() Config {
	return Config{Breaker: Breaker{
		Consecutive: 5, FailureRate: 0.5, MinVolume: 20, Window: refresh.Duration(time.Minute),
		CoolDown: refresh.Duration(30 * time.Second), MaxCoolDown: refresh.Duration(10 * time.Minute), Probes: 2,
	}}
}

// ErrInvalidConfig is wrapped by every error about a refused configuration.
var ErrInvalidConfig = errors.New("invalid upstream configuration")

// ParseConfig decodes a JSON configuration on top of DefaultConfig,
// refusing unknown fields, and validates it. Empty input means the
// defaults.
func ParseConfig(b []byte) (Config, error) {
	c := DefaultConfig()
	if len(bytes.TrimSpace(b)) == 0 {
		return c, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%w: %s", ErrInvalidConfig, strings.TrimPrefix(err.Error(), "json: "))
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate reports the first value out of range.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	b := c.Breaker
	switch {
	case c.MaxInFlight < 0:
		return bad("max_in_flight %d: expected 0 (no cap) or more", c.MaxInFlight)
	case c.Rate < 0 || math.IsNaN(c.Rate) || c.Rate > 1e6:
		return bad("rate %v: expected 0 (no cap) to 1000000 starts per second", c.Rate)
	case c.Burst < 0 || math.IsNaN(c.Burst) || c.Burst > 1e6 || (c.Burst > 0 && c.Burst < 1):
		// A bucket of less than one token would never allow a start.
		return bad("burst %v: expected 0 (the rate, at least 1) or 1 to 1000000", c.Burst)
	case c.ReleaseRate < 0 || math.IsNaN(c.ReleaseRate) || c.ReleaseRate > 1e6:
		return bad("release_rate %v: expected 0 (the rate, or 10) to 1000000 per second", c.ReleaseRate)
	case b.Consecutive < 0 || b.Consecutive > 1_000_000:
		return bad("breaker consecutive %d: expected 0 (off) to 1000000", b.Consecutive)
	case b.FailureRate < 0 || b.FailureRate > 1 || math.IsNaN(b.FailureRate):
		return bad("breaker failure_rate %v: expected 0 (off) to 1", b.FailureRate)
	case b.MinVolume < 1 && b.FailureRate > 0:
		return bad("breaker min_volume %d: expected 1 or more", b.MinVolume)
	case b.Window < refresh.Duration(time.Second) && b.FailureRate > 0:
		return bad("breaker window %s: expected 1s or more", b.Window)
	case b.CoolDown < refresh.Duration(time.Second):
		return bad("breaker cool_down %s: expected 1s or more", b.CoolDown)
	case b.MaxCoolDown < b.CoolDown:
		return bad("breaker max_cool_down %s: expected at least cool_down (%s)", b.MaxCoolDown, b.CoolDown)
	case b.MaxCoolDown > refresh.Duration(7*24*time.Hour):
		return bad("breaker max_cool_down %s: expected at most 1 week", b.MaxCoolDown)
	case b.Probes < 1 || b.Probes > 1000:
		return bad("breaker probes %d: expected 1 to 1000", b.Probes)
	}
	return nil
}

// EffectiveBurst is the token bucket's size: Burst, or its default
// max(1, Rate).
func (c Config) EffectiveBurst() float64 {
	if c.Burst > 0 {
		return c.Burst
	}
	return max(1, c.Rate)
}

// DefaultReleaseRate is how many parked records per second are released
// after a breaker closes on an upstream with no rate.
const DefaultReleaseRate = 10

// EffectiveReleaseRate is how many parked records per second are
// released after the breaker closes: ReleaseRate, or its default (Rate, or
// DefaultReleaseRate without a rate).
func (c Config) EffectiveReleaseRate() float64 {
	switch {
	case c.ReleaseRate > 0:
		return c.ReleaseRate
	case c.Rate > 0:
		return c.Rate
	}
	return DefaultReleaseRate
}

// Name returns the default upstream of an input URL: its host (with the
// port, lower-cased, without user information). An input that is not a URL
// with a host is its own upstream's name, so it is never mixed with others
// (docs/design.md, U1).
func Name(inputURL string) string {
	u, err := url.Parse(inputURL)
	if err != nil || u.Host == "" {
		return inputURL
	}
	return strings.ToLower(u.Host)
}

// State is an upstream's stored state. A zero time stands for NULL; the
// zero State is a closed breaker with nothing counted.
type State struct {
	// Breaker is the breaker's state ("" reads as closed).
	Breaker BreakerState
	// Failures counts the failed attempts in a row.
	Failures int
	// WindowStart begins the current window; Attempts and FailuresInWindow
	// count the attempts that ended in it, PrevAttempts and PrevFailures
	// those of the window before.
	WindowStart                                            time.Time
	Attempts, FailuresInWindow, PrevAttempts, PrevFailures int
	// Opens counts the openings since the breaker last closed: the
	// cool-down doubles with each.
	Opens int
	// NextProbe is when an open breaker turns half-open; while half-open,
	// when a new round of probes may start if none has answered (its probes
	// were cancelled or undone).
	NextProbe time.Time
	// ProbesLeft is how many probes may still start while half-open.
	ProbesLeft int
	// Tokens is the token bucket's content at TokensAt.
	Tokens   float64
	TokensAt time.Time
	// Releasing is set while the parked records of a closed breaker are
	// being released; ReleasedAt is how far the release has counted.
	Releasing  bool
	ReleasedAt time.Time
	// BlockedUntil: no start is possible before it (no token, or the
	// in-flight cap reached); the claim passes over the upstream's rows
	// until then. A result clears it, unless the rate has no token yet:
	// then it is when the next token is due.
	BlockedUntil time.Time
	// ChangedAt is when the breaker last changed state.
	ChangedAt time.Time
}

// Upstream is one upstream as a tick or a batch sees it, locked: its name,
// configuration, state and the attempts running for it.
type Upstream struct {
	Name   string
	Config Config
	State  State
	// InFlight counts the attempts running for the upstream (the store
	// counts them; the tick adds its starts and removes its timeouts).
	InFlight int
}

// Transition is a change of an upstream's breaker, for the log and the
// events.
type Transition struct {
	Upstream string
	From, To BreakerState
	At       time.Time
	// Why is a sentence: what opened or closed it.
	Why string
	// CoolDown is how long an opened breaker stays open.
	CoolDown time.Duration
}

// CountByState counts transitions by the state they went to; nil when
// there are none.
func CountByState(trs []Transition) map[BreakerState]int {
	var out map[BreakerState]int
	for _, t := range trs {
		if out == nil {
			out = map[BreakerState]int{}
		}
		out[t.To]++
	}
	return out
}

// Verdict is what Admit decided for one due record.
type Verdict int

// The verdicts.
const (
	// Start: start the attempt.
	Start Verdict = iota
	// Park: the breaker is open (or half-open with its probes out): park
	// the record; no attempt is burned.
	Park
	// Wait: a limit (in flight, rate) holds the record back for now; it
	// stays due and is claimed again later.
	Wait
)

func (v Verdict) String() string {
	return [...]string{"start", "park", "wait"}[v]
}

// blockRecheck is how long a full in-flight cap keeps the claim off an
// upstream when no result clears it sooner.
const blockRecheck = time.Second

// Current is the breaker's state, with "" (a row never moved) read as
// closed.
func (s State) Current() BreakerState {
	if s.Breaker == "" {
		return Closed
	}
	return s.Breaker
}

// coolDown is the cool-down after the opens-th opening since the last close:
// doubled at each, bounded by MaxCoolDown (docs/design.md, U7).
func (c Config) coolDown(opens int) time.Duration {
	d := time.Duration(c.Breaker.CoolDown)
	limit := time.Duration(c.Breaker.MaxCoolDown)
	for i := 1; i < opens && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

func (u *Upstream) move(to BreakerState, now time.Time, why string) *Transition {
	t := &Transition{Upstream: u.Name, From: u.State.Current(), To: to, At: now, Why: why}
	u.State.Breaker = to
	u.State.ChangedAt = now
	return t
}

func (u *Upstream) open(now time.Time, why string) *Transition {
	u.State.Opens++
	cd := u.Config.coolDown(u.State.Opens)
	t := u.move(Open, now, why)
	t.CoolDown = cd
	u.State.NextProbe = now.Add(cd)
	u.State.ProbesLeft = 0
	u.State.Releasing = false
	return t
}

func (u *Upstream) halfOpen(now time.Time) *Transition {
	t := u.move(HalfOpen, now, "cool-down over: probing")
	u.probeRound(now)
	return t
}

// probeRound lets a half-open breaker's probes start at now, and a new
// round after a cool-down if none of them answered.
func (u *Upstream) probeRound(now time.Time) {
	u.State.ProbesLeft = u.Config.Breaker.Probes
	u.State.NextProbe = now.Add(u.Config.coolDown(u.State.Opens))
}

// Admit decides, at now, whether a due record of this upstream starts, is
// parked or waits, and on Start takes its share of the limits (a token, a
// place in flight, a probe). An open breaker whose cool-down is over turns
// half-open; the transition is returned when there was one (docs/design.md,
// U5, U6, U10, U11).
func (u *Upstream) Admit(now time.Time) (Verdict, *Transition) {
	var tr *Transition
	switch u.State.Current() {
	case Open:
		if now.Before(u.State.NextProbe) {
			return Park, nil
		}
		tr = u.halfOpen(now)
	case HalfOpen:
		if u.State.ProbesLeft <= 0 {
			if now.Before(u.State.NextProbe) {
				return Park, nil
			}
			// No probe answered in a whole cool-down (cancelled, undone):
			// a new round.
			u.probeRound(now)
		}
	}
	c := u.Config
	if c.MaxInFlight > 0 && u.InFlight >= c.MaxInFlight {
		u.State.BlockedUntil = now.Add(blockRecheck)
		return Wait, tr
	}
	if c.Rate > 0 {
		u.refill(now)
		if u.State.Tokens < 1 {
			u.State.BlockedUntil = now.Add(c.untilToken(u.State.Tokens))
			return Wait, tr
		}
		u.State.Tokens--
	}
	u.InFlight++
	if u.State.Current() == HalfOpen {
		u.State.ProbesLeft--
	}
	return Start, tr
}

// nextToken is when the rate lets the next start through, if that is after
// now; zero without a rate or with a token at now. It changes nothing.
func (u *Upstream) nextToken(now time.Time) time.Time {
	if u.Config.Rate <= 0 || u.State.TokensAt.IsZero() {
		return time.Time{}
	}
	tokens := u.tokensAt(now)
	if tokens >= 1 {
		return time.Time{}
	}
	return now.Add(u.Config.untilToken(tokens))
}

// untilToken is how long the bucket takes to fill from tokens (below 1) to
// one token: at least a microsecond.
func (c Config) untilToken(tokens float64) time.Duration {
	return max(time.Duration((1-tokens)/c.Rate*float64(time.Second)), time.Microsecond)
}

// tokensAt is the bucket's content at now: the tokens earned since
// TokensAt added, up to the burst (a fresh bucket is full). It changes
// nothing.
func (u *Upstream) tokensAt(now time.Time) float64 {
	b := u.Config.EffectiveBurst()
	if u.State.TokensAt.IsZero() {
		return b
	}
	if el := now.Sub(u.State.TokensAt); el > 0 {
		return min(b, u.State.Tokens+el.Seconds()*u.Config.Rate)
	}
	return u.State.Tokens
}

// refill adds the tokens earned since TokensAt (a fresh bucket is full).
func (u *Upstream) refill(now time.Time) {
	if u.State.TokensAt.IsZero() || now.After(u.State.TokensAt) {
		u.State.Tokens, u.State.TokensAt = u.tokensAt(now), now
	}
}

// Outcome is how an attempt ended, as the breaker counts it.
type Outcome int

// The outcomes.
const (
	// Succeeded counts as a success.
	Succeeded Outcome = iota
	// Failed counts as a failure (a worker's retryable failure, a
	// timeout).
	Failed
	// Uncounted frees its place in flight and counts nothing: a failure
	// that the record itself caused (not retryable).
	Uncounted
)

// Observe counts, at now, an attempt of this upstream that ended, and
// returns the breaker's transition if it made one: a closed breaker opens
// when a threshold is crossed; a half-open one closes on a success and
// opens again, with a longer cool-down, on a failure. An open breaker only
// counts (its late answers are from attempts started before it opened).
// What counts is docs/design.md, U3; the transitions U4 and U7.
func (u *Upstream) Observe(o Outcome, now time.Time) *Transition {
	u.InFlight = max(0, u.InFlight-1)
	// The end frees a place in flight, not a token: a block by the rate
	// stays until the next token (docs/design.md, U10, U11).
	u.State.BlockedUntil = u.nextToken(now)
	if o == Uncounted {
		return nil
	}
	u.roll(now)
	u.State.Attempts++
	if o == Failed {
		u.State.Failures++
		u.State.FailuresInWindow++
	} else {
		u.State.Failures = 0
	}
	b := u.Config.Breaker
	switch u.State.Current() {
	case Closed:
		if o != Failed {
			return nil
		}
		if b.Consecutive > 0 && u.State.Failures >= b.Consecutive {
			if u.State.Failures == 1 {
				return u.open(now, "1 failure")
			}
			return u.open(now, fmt.Sprintf("%d failures in a row", u.State.Failures))
		}
		if b.FailureRate > 0 {
			att, fail := u.windowCounts(now)
			if att >= float64(b.MinVolume) && fail/att >= b.FailureRate {
				return u.open(now, fmt.Sprintf("%.0f%% of %.0f attempts failed in %s", 100*fail/att, att, b.Window))
			}
		}
	case HalfOpen:
		if o == Failed {
			return u.open(now, "a probe failed")
		}
		t := u.move(Closed, now, "a probe succeeded")
		u.State.Opens, u.State.Failures, u.State.ProbesLeft = 0, 0, 0
		u.State.NextProbe = time.Time{}
		u.State.WindowStart = now
		u.State.Attempts, u.State.FailuresInWindow, u.State.PrevAttempts, u.State.PrevFailures = 0, 0, 0, 0
		u.State.Releasing, u.State.ReleasedAt = true, now
		return t
	}
	return nil
}

// roll moves the window on at now.
func (u *Upstream) roll(now time.Time) {
	w := time.Duration(u.Config.Breaker.Window)
	if w <= 0 {
		w = time.Minute
	}
	s := &u.State
	switch el := now.Sub(s.WindowStart); {
	case s.WindowStart.IsZero() || el >= 2*w || el < 0:
		s.WindowStart = now
		s.Attempts, s.FailuresInWindow, s.PrevAttempts, s.PrevFailures = 0, 0, 0, 0
	case el >= w:
		s.WindowStart = s.WindowStart.Add(w)
		s.PrevAttempts, s.PrevFailures = s.Attempts, s.FailuresInWindow
		s.Attempts, s.FailuresInWindow = 0, 0
	}
}

// windowCounts estimates the attempts and failures of the last Window: the
// current window's, plus the previous window's weighted by the share of it
// still in span.
func (u *Upstream) windowCounts(now time.Time) (attempts, failures float64) {
	w := time.Duration(u.Config.Breaker.Window)
	s := u.State
	weight := 0.0
	if w > 0 {
		weight = max(0, 1-float64(now.Sub(s.WindowStart))/float64(w))
	}
	return float64(s.Attempts) + weight*float64(s.PrevAttempts), float64(s.FailuresInWindow) + weight*float64(s.PrevFailures)
}

// WindowFailures is the failures counted in the last Window at now (an
// estimate, see Breaker.Window), for people.
func (u *Upstream) WindowFailures(now time.Time) int {
	_, f := u.windowCounts(now)
	return int(math.Round(f))
}

// Wake is called at now for an upstream whose breaker waits for its
// cool-down or whose parked records are being released, and says how many
// parked records to release: the probes of an open breaker whose cool-down
// is over (it turns half-open), or the next share of a closed breaker's
// parked records (bounded by the release rate, at most limit). The caller
// releases them and reports how many it found with Released
// (docs/design.md, U6, U8).
func (u *Upstream) Wake(now time.Time, limit int) (release int, tr *Transition) {
	switch u.State.Current() {
	case Open:
		if now.Before(u.State.NextProbe) {
			return 0, nil
		}
		tr = u.halfOpen(now)
		return u.State.ProbesLeft, tr
	case HalfOpen:
		if u.State.ProbesLeft <= 0 && !now.Before(u.State.NextProbe) {
			u.probeRound(now)
			return u.State.ProbesLeft, nil
		}
		return 0, nil
	}
	if !u.State.Releasing {
		return 0, nil
	}
	rr := u.Config.EffectiveReleaseRate()
	if u.State.ReleasedAt.IsZero() || u.State.ReleasedAt.After(now) {
		u.State.ReleasedAt = now
	}
	n := int(now.Sub(u.State.ReleasedAt).Seconds() * rr)
	if n < 1 {
		return 0, nil
	}
	if n >= limit {
		n = limit
		u.State.ReleasedAt = now
	} else {
		u.State.ReleasedAt = u.State.ReleasedAt.Add(time.Duration(float64(n) / rr * float64(time.Second)))
	}
	return n, nil
}

// Released records what the release of a closed breaker's parked records
// left: when none is left parked, the release is over. (That fewer were
// found than asked is not enough: a parked record another transaction
// holds is skipped, and would then stay parked for good.)
func (u *Upstream) Released(left bool) {
	if u.State.Current() == Closed && !left {
		u.State.Releasing = false
	}
}

// Waking reports whether the upstream needs Wake: an open or half-open
// breaker, or a release in progress.
func (s State) Waking() bool {
	return s.Current() != Closed || s.Releasing
}
