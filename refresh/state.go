// Package refresh is the pure core of bigtables: the refresh-retry state
// machine (docs/design.md, "Transitions"), its policies and durations. It imports no
// database or Redis code and never reads the clock: every transition takes
// now as an argument and returns the new state as a value, which the store
// applies in one guarded statement.
package refresh

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bigtables/bigtables/schedule"
	"github.com/lucsky/cuid"
)

// State is the refresh state of one record: the columns the transitions
// read and write. A zero time.Time stands for NULL.
type State struct {
	// RefreshAt is when the next attempt starts, unconditionally; zero means
	// nothing is planned.
	RefreshAt time.Time
	// AttemptUID identifies the running attempt; empty when none runs.
	AttemptUID string
	// AttemptNo counts attempts since the last success: +1 on start, 0 on
	// success.
	AttemptNo int
	// StartedAt is when the running attempt started.
	StartedAt time.Time
	// DeadlineAt is when the running attempt counts as timed out.
	DeadlineAt time.Time
	// FailingSince is when the first failed attempt since the last success
	// started; zero while healthy. GiveUpAfter and progressive strategies
	// measure from it.
	FailingSince time.Time
	// LastDelay is the retry delay chosen after the previous failure since
	// the last success (decorrelated jitter grows from it); 0 if none.
	LastDelay time.Duration
	// Disabled is set by a final failure; only a manual update clears it.
	Disabled bool
	// DisabledReason is the user-friendly text shown while Disabled.
	DisabledReason string
	// Paused is set and cleared by a person (pause, resume): a paused
	// record is never started. Transitions leave it alone.
	Paused bool
	// Parked is set while the record is due but held back because its
	// upstream's breaker is open: no attempt was burned, attempt_no and
	// refresh_at are kept. A manual update clears it.
	Parked bool
}

// Running reports whether an attempt is in progress.
func (s State) Running() bool { return s.AttemptUID != "" }

// Phase is where a record stands, in one word, for people: list and plan
// print it. More phases may come (paused, parked); code that acts on a
// record reads the state's fields, not its phase.
type Phase string

// The phases of a record.
const (
	// PhasePaused: a person paused the record; it starts nothing until
	// resumed.
	PhasePaused Phase = "paused"
	// PhaseDisabled: a final failure disabled the record until an update.
	PhaseDisabled Phase = "disabled"
	// PhaseRunning: an attempt is in progress.
	PhaseRunning Phase = "running"
	// PhaseParked: due, but held back by its upstream's open breaker.
	PhaseParked Phase = "parked"
	// PhaseIdle: nothing is planned (a one-off record that succeeded, or a
	// schedule with no more occurrences).
	PhaseIdle Phase = "idle"
	// PhaseRetrying: an attempt failed since the last success and the next
	// one (at RefreshAt) is its retry.
	PhaseRetrying Phase = "retrying"
	// PhaseWaiting: healthy, waiting for the next planned refresh.
	PhaseWaiting Phase = "waiting"
)

// Phase returns the record's phase. Paused wins over everything (a
// person's hold), then disabled, then a running attempt, then what is
// planned.
func (s State) Phase() Phase {
	switch {
	case s.Paused:
		return PhasePaused
	case s.Disabled:
		return PhaseDisabled
	case s.Running():
		return PhaseRunning
	case s.Parked:
		return PhaseParked
	case s.RefreshAt.IsZero():
		return PhaseIdle
	case s.AttemptNo > 0:
		return PhaseRetrying
	}
	return PhaseWaiting
}

// Due reports whether the scheduler should start an attempt at now.
func (s State) Due(now time.Time) bool {
	return !s.Disabled && !s.Paused && !s.Parked && !s.Running() && !s.RefreshAt.IsZero() && !s.RefreshAt.After(now)
}

// TimedOut reports whether the running attempt's deadline has passed at now.
func (s State) TimedOut(now time.Time) bool {
	return s.Running() && !s.DeadlineAt.IsZero() && !s.DeadlineAt.After(now)
}

// Rules are what a record's transitions depend on besides its state: its
// schedule (nil for one-off records) and its policy.
type Rules struct {
	Schedule *schedule.Schedule
	Policy   Policy
}

// Errors returned by transitions that do not apply.
var (
	// ErrStale means a result names an attempt that is not the record's
	// running attempt (superseded, timed out, or already applied).
	ErrStale = errors.New("stale attempt")
	// ErrLate means a result reached the output list after its attempt's
	// deadline (see Received): the attempt counts as timed out (the
	// scheduler applies that), so the result is stale. It wraps ErrStale.
	ErrLate = fmt.Errorf("%w: the attempt's deadline has passed", ErrStale)
	// ErrNotDue means Start was asked for a record that is disabled, already
	// running or not yet due.
	ErrNotDue = errors.New("record is not due")
)

// NewAttemptUID returns a new attempt id: a cuid drawn from crypto/rand, so
// replicas started in the same second cannot collide (cuid.New seeds its
// randomness with the start second; docs/design.md, "lucsky/cuid").
func NewAttemptUID() string {
	id, err := cuid.NewCrypto(rand.Reader)
	if err != nil {
		// crypto/rand.Reader does not fail on supported platforms.
		panic(fmt.Sprintf("draw attempt uid: %v", err))
	}
	return id
}

// Start begins an attempt at now: a new attempt uid, attempt_no + 1, a
// deadline now + timeout, and refresh_at the first planned refresh after the
// deadline (zero when the schedule has none).
func (r Rules) Start(s State, now time.Time, attemptUID string) (State, error) {
	if !s.Due(now) {
		return s, ErrNotDue
	}
	s.AttemptUID = attemptUID
	s.AttemptNo++
	s.StartedAt = now
	s.DeadlineAt = now.Add(time.Duration(r.Policy.Timeout))
	s.RefreshAt = r.Next(s.DeadlineAt)
	return s, nil
}

// Received bounds when a worker's result reached the output list, in the
// clock of the queue (Redis's TIME), never in a process's clock. A result is
// judged on time or late by these bounds, not by when it is applied: an
// outage, a backlog or a frozen poller of ours never turns an on-time answer
// into a timeout.
type Received struct {
	// After: the result was pushed after this instant (the output list was
	// empty then). Zero when unknown.
	After time.Time
	// By: the result had been pushed by this instant (when it was drained).
	By time.Time
	// MaxWait bounds how long after the deadline an on-time result may still
	// be applied: a result drained (By) at or after deadline + MaxWait is
	// late whatever After says. Zero means no bound.
	MaxWait time.Duration
}

// DefaultMaxResultWait is the default Received.MaxWait: how long after an
// attempt's deadline a result that reached the output list in time may still
// be applied, and so how long the scheduler may hold the attempt's timeout
// while pollers are down or behind.
const DefaultMaxResultWait = time.Hour

// ReceivedAt is a result known to have reached the output list at t.
func ReceivedAt(t time.Time) Received { return Received{After: t, By: t} }

// Late reports whether a result received as r counts as pushed at or after
// deadline: known to be pushed after an instant at or past the deadline, or
// drained MaxWait or more after it. A zero deadline is never passed.
func (r Received) Late(deadline time.Time) bool {
	if deadline.IsZero() {
		return false
	}
	if !r.After.IsZero() && !r.After.Before(deadline) {
		return true
	}
	return r.MaxWait > 0 && !r.By.IsZero() && !r.By.Before(deadline.Add(r.MaxWait))
}

// current checks that a worker's result received as rcv is for the running
// attempt and reached the output list before its deadline.
func (s State) current(rcv Received, attemptUID string) error {
	if !s.Running() || s.AttemptUID != attemptUID {
		return ErrStale
	}
	if rcv.Late(s.DeadlineAt) {
		return ErrLate
	}
	return nil
}

// Status checks that a worker's progress report, received as rcv, is for the
// running attempt and on time; the caller then stores its message.
func (s State) Status(rcv Received, attemptUID string) error { return s.current(rcv, attemptUID) }

// Succeed applies, at now, a success of the running attempt attemptUID
// received as rcv: attempt_no back to 0 and refresh_at the first planned
// refresh after now. A success that reached the output list at or after the
// deadline is ErrLate.
func (r Rules) Succeed(s State, now time.Time, rcv Received, attemptUID string) (State, error) {
	if err := s.current(rcv, attemptUID); err != nil {
		return s, err
	}
	s = s.clearAttempt()
	s.AttemptNo = 0
	s.FailingSince, s.LastDelay = time.Time{}, 0
	s.RefreshAt = r.Next(now)
	return s, nil
}

// Failure describes why an attempt failed.
type Failure struct {
	// Message is the worker's message, or "timeout".
	Message string
	// NotRetryable makes the failure final at once (e.g. the URL is invalid).
	NotRetryable bool
	// Reason is a user-friendly reason; a final failure shows it as the
	// disabled reason when given.
	Reason string
	// Draw is a uniform random number in [0, 1) for randomized strategies,
	// drawn by the caller from its (injectable) source.
	Draw float64
	// Kind is the kind of failure the worker reported (e.g. rate_limited),
	// or "": the policy's on_kind may give it a strategy of its own or make
	// it final.
	Kind string
	// RetryAfter, when not zero, is when the worker asked to be retried
	// (its retry_after, made absolute by the caller): it sets this
	// failure's delay, up to the policy's max_retry_after, still aligned
	// with the schedule. It cannot revive exhausted retries.
	RetryAfter time.Time
}

// Decision says which branch of the failure transition was taken.
type Decision string

// The failure branches.
const (
	// Retry: refresh_at is now + the policy's delay.
	Retry Decision = "retry"
	// RetryNoPlan: the schedule has no planned refresh; refresh_at is now + delay.
	RetryNoPlan Decision = "retry_no_plan"
	// AlignedAfter: now + delay is after the next planned refresh, so the
	// planned refresh is the retry.
	AlignedAfter Decision = "aligned_after_plan"
	// AlignedOverlap: the retry would still run at the next planned refresh
	// (now + delay + timeout is after it), so the planned refresh is the retry.
	AlignedOverlap Decision = "aligned_overlap"
	// WaitingNext: retries ran out under on_exhausted=wait_next; attempt_no is
	// reset and refresh_at is the next planned refresh.
	WaitingNext Decision = "wait_next"
	// Exhausted: retries ran out; the record is disabled.
	Exhausted Decision = "exhausted"
	// NotRetryable: the worker said the failure is permanent; disabled.
	NotRetryable Decision = "not_retryable"
	// GaveUp: the record failed for longer than give_up_after; disabled.
	GaveUp Decision = "gave_up"
)

// Final reports whether the decision disables the record.
func (d Decision) Final() bool { return d == Exhausted || d == NotRetryable || d == GaveUp }

// Step explains a failure transition: the branch taken and the times it
// compared. Delay and Planned are zero where they did not matter.
type Step struct {
	Decision Decision
	Delay    time.Duration
	Planned  time.Time
	// Kind is the failure's kind when the policy's on_kind has an entry
	// for it (its strategy, or final), else "".
	Kind string
	// FromRetryAfter: the delay is the worker's retry_after (bounded by
	// max_retry_after), not the strategy's.
	FromRetryAfter bool
}

// Fail applies, at now, a worker's failure of the running attempt attemptUID
// received as rcv. A failure that reached the output list at or after the
// deadline is ErrLate.
func (r Rules) Fail(s State, now time.Time, rcv Received, attemptUID string, f Failure) (State, Step, error) {
	if err := s.current(rcv, attemptUID); err != nil {
		return s, Step{}, err
	}
	return r.fail(s, now, f)
}

// TimeOut fails the running attempt because its deadline passed, with the
// message "timeout"; draw is as Failure.Draw. It is ErrNotDue unless
// s.TimedOut(now).
func (r Rules) TimeOut(s State, now time.Time, draw float64) (State, Step, error) {
	if !s.TimedOut(now) {
		return s, Step{}, ErrNotDue
	}
	return r.fail(s, now, Failure{Message: "timeout", Draw: draw})
}

func (r Rules) fail(s State, now time.Time, f Failure) (State, Step, error) {
	if s.FailingSince.IsZero() {
		s.FailingSince = s.StartedAt
		if s.FailingSince.IsZero() {
			s.FailingSince = now
		}
	}
	s = s.clearAttempt()
	p := r.Policy

	kind := ""
	if _, ok := p.OnKind[f.Kind]; ok && f.Kind != "" {
		kind = f.Kind
	}
	strategy, kindFinal := p.RuleFor(f.Kind)
	if f.NotRetryable || kindFinal {
		return p.final(s, f, ""), Step{Decision: NotRetryable, Kind: kind}, nil
	}
	if p.GiveUpAfter > 0 && now.Sub(s.FailingSince) >= time.Duration(p.GiveUpAfter) {
		why := fmt.Sprintf("Cannot refresh BigTable: no success since %s (gave up after %s)",
			s.FailingSince.UTC().Format(time.RFC3339), p.GiveUpAfter)
		return p.final(s, f, why), Step{Decision: GaveUp, Kind: kind}, nil
	}
	planned := r.Next(now)
	delay, ok := strategy.Delay(Input{
		Failure: s.AttemptNo, FailingFor: now.Sub(s.FailingSince), Previous: s.LastDelay, Draw: f.Draw,
	})
	if !ok {
		if p.OnExhausted == WaitNext && !planned.IsZero() {
			s.AttemptNo, s.LastDelay = 0, 0
			s.RefreshAt = planned
			return s, Step{Decision: WaitingNext, Planned: planned, Kind: kind}, nil
		}
		return p.final(s, f, ""), Step{Decision: Exhausted, Planned: planned, Kind: kind}, nil
	}
	step := Step{Planned: planned, Kind: kind}
	if !f.RetryAfter.IsZero() {
		delay = min(max(f.RetryAfter.Sub(now), 0), p.RetryAfterCap())
		step.FromRetryAfter = true
	}
	step.Delay = delay
	s.LastDelay = delay
	retryAt := now.Add(delay)
	switch {
	case planned.IsZero():
		s.RefreshAt, step.Decision = retryAt, RetryNoPlan
	case p.Align && retryAt.After(planned):
		s.RefreshAt, step.Decision = planned, AlignedAfter
	case p.Align && retryAt.Add(time.Duration(p.Timeout)).After(planned):
		s.RefreshAt, step.Decision = planned, AlignedOverlap
	default:
		s.RefreshAt, step.Decision = retryAt, Retry
	}
	return s, step, nil
}

// final disables the record. The reason shown is the worker's user-friendly
// reason if it gave one, else the policy's final_reason, else why, else
// DefaultFinalReason (docs/design.md, T5).
func (p Policy) final(s State, f Failure, why string) State {
	s.RefreshAt = time.Time{}
	s.DeadlineAt = time.Time{}
	s.Disabled = true
	switch {
	case f.Reason != "":
		s.DisabledReason = f.Reason
	case p.FinalReason != "":
		s.DisabledReason = p.FinalReason
	case why != "":
		s.DisabledReason = why
	default:
		s.DisabledReason = DefaultFinalReason(s.AttemptNo, f.Message)
	}
	return s
}

// DefaultFinalReason is the disabled reason when neither the worker nor the
// policy gives one: the attempt count and the last error, as in "Cannot
// refresh BigTable after 7 attempts: GET: 503 Service Unavailable" (the last
// error of a timeout is "timeout"). The error is cut to 300 characters;
// without one the text ends after the count.
func DefaultFinalReason(attempts int, lastError string) string {
	unit := "attempts"
	if attempts == 1 {
		unit = "attempt"
	}
	out := fmt.Sprintf("Cannot refresh BigTable after %d %s", attempts, unit)
	if e := strings.TrimSpace(lastError); e != "" {
		out += ": " + clipText(e, 300)
	}
	return out
}

// Update is the manual save of a record by a person: it re-enables the
// record, resets attempt_no, cancels any running attempt (whose results become
// stale) and plans a refresh at now. It returns the cancelled attempt's uid,
// or "".
func Update(s State, now time.Time) (State, string) {
	cancelled := s.AttemptUID
	s = s.clearAttempt()
	s.AttemptNo = 0
	s.FailingSince, s.LastDelay = time.Time{}, 0
	s.Disabled = false
	s.DisabledReason = ""
	s.Parked = false
	s.RefreshAt = now
	return s, cancelled
}

func (s State) clearAttempt() State {
	s.AttemptUID = ""
	s.StartedAt = time.Time{}
	s.DeadlineAt = time.Time{}
	return s
}
