package refresh

import (
	"fmt"
	"strings"
	"time"
)

// Simulated outcomes of an attempt.
const (
	OutcomeSuccess      = "success"
	OutcomeFailure      = "failure"
	OutcomeTimeout      = "timeout"
	OutcomeNotRetryable = "not_retryable"
)

// SimOutcome is what one simulated attempt does.
type SimOutcome struct {
	Kind string
	// After is how long the attempt runs before its outcome (not for
	// timeouts, which end at the deadline); 0 means the simulation's default.
	After time.Duration
}

// ParseOutcomes reads a comma-separated list such as
// "failure,failure:10m,timeout,success".
func ParseOutcomes(s string) ([]SimOutcome, error) {
	var out []SimOutcome
	for _, part := range strings.Split(s, ",") {
		kind, after, hasAfter := strings.Cut(strings.TrimSpace(part), ":")
		switch kind {
		case OutcomeSuccess, OutcomeFailure, OutcomeTimeout, OutcomeNotRetryable:
		default:
			return nil, fmt.Errorf("outcome %q: expected success, failure, timeout or not_retryable, optionally with :duration (failure:10m)", part)
		}
		o := SimOutcome{Kind: kind}
		if hasAfter {
			d, err := ParseDuration(after)
			if err != nil {
				return nil, fmt.Errorf("outcome %q: %w", part, err)
			}
			o.After = d
		}
		out = append(out, o)
	}
	return out, nil
}

// PlannedAttempt is one attempt of a simulated run.
type PlannedAttempt struct {
	No       int       `json:"attempt_no"`
	Start    time.Time `json:"start"`
	Deadline time.Time `json:"deadline"`
	End      time.Time `json:"end"`
	Outcome  string    `json:"outcome"`
	// RefreshAt is the refresh_at the outcome leads to (zero: none).
	RefreshAt time.Time `json:"refresh_at"`
	Step      Step      `json:"-"`
	Why       string    `json:"why"`
	Disabled  bool      `json:"disabled"`
	Reason    string    `json:"disabled_reason,omitempty"`
}

// Plan is a simulated run.
type Plan struct {
	Attempts []PlannedAttempt
	Final    State
	// Stopped says why the simulation ended.
	Stopped string
}

// SimOptions tune Simulate.
type SimOptions struct {
	// Outcomes are the attempts' outcomes in order; FailAll makes every
	// attempt fail instead.
	Outcomes []SimOutcome
	FailAll  bool
	// Run is how long an attempt runs before a success or failure, default
	// 1 minute (kept below the timeout).
	Run time.Duration
	// Draw supplies uniform numbers in [0, 1) for randomized strategies.
	Draw func() float64
	// Limit caps the attempts, default 200.
	Limit int
}

// Simulate runs the real state machine on a simulated clock from a record
// due at start.
func Simulate(r Rules, start time.Time, opt SimOptions) Plan {
	if opt.Run <= 0 {
		opt.Run = time.Minute
	}
	if opt.Limit <= 0 {
		opt.Limit = 200
	}
	if opt.Draw == nil {
		opt.Draw = func() float64 { return 0.5 }
	}
	timeout := time.Duration(r.Policy.Timeout)
	s := State{RefreshAt: start}
	var plan Plan
	for i := 0; ; i++ {
		switch {
		case s.Disabled:
			plan.Stopped = "disabled: " + s.DisabledReason
		case s.RefreshAt.IsZero():
			plan.Stopped = "nothing planned: the record waits for a manual update"
		case !opt.FailAll && i >= len(opt.Outcomes):
			plan.Stopped = "no more outcomes given"
		case i >= opt.Limit:
			plan.Stopped = fmt.Sprintf("stopped after %d attempts", opt.Limit)
		}
		if plan.Stopped != "" {
			plan.Final = s
			return plan
		}
		o := SimOutcome{Kind: OutcomeFailure}
		if !opt.FailAll {
			o = opt.Outcomes[i]
		}
		now := s.RefreshAt
		s, _ = r.Start(s, now, fmt.Sprintf("sim-%d", i+1))
		a := PlannedAttempt{No: s.AttemptNo, Start: now, Deadline: s.DeadlineAt, Outcome: o.Kind}
		after := o.After
		if after == 0 {
			after = min(opt.Run, timeout/2)
		}
		if o.Kind == OutcomeTimeout || after >= timeout {
			a.Outcome = OutcomeTimeout
		}
		uid := s.AttemptUID
		switch a.Outcome {
		case OutcomeSuccess:
			a.End = now.Add(after)
			s, _ = r.Succeed(s, a.End, ReceivedAt(a.End), uid)
			a.Why = "success: next planned refresh"
			if s.RefreshAt.IsZero() {
				a.Why = "success: no planned refresh"
			}
		case OutcomeTimeout:
			a.End = s.DeadlineAt
			s, a.Step, _ = r.TimeOut(s, a.End, opt.Draw())
			a.Why = a.Step.String()
		default:
			a.End = now.Add(after)
			s, a.Step, _ = r.Fail(s, a.End, ReceivedAt(a.End), uid, Failure{NotRetryable: o.Kind == OutcomeNotRetryable, Draw: opt.Draw()})
			a.Why = a.Step.String()
		}
		a.RefreshAt, a.Disabled, a.Reason = s.RefreshAt, s.Disabled, s.DisabledReason
		plan.Attempts = append(plan.Attempts, a)
	}
}

// String explains the failure branch taken, for plans and logs.
func (st Step) String() string {
	hm := func(t time.Time) string { return t.Format("2006-01-02 15:04:05") }
	switch st.Decision {
	case Retry:
		return "retry after " + FormatDuration(st.Delay)
	case RetryNoPlan:
		return "retry after " + FormatDuration(st.Delay) + " (no planned refresh)"
	case AlignedAfter:
		return fmt.Sprintf("aligned: the retry (after %s) would start after the planned refresh at %s", FormatDuration(st.Delay), hm(st.Planned))
	case AlignedOverlap:
		return fmt.Sprintf("aligned: the retry (after %s) would still run at the planned refresh at %s", FormatDuration(st.Delay), hm(st.Planned))
	case WaitingNext:
		return "retries exhausted: reset attempt_no, wait for the planned refresh at " + hm(st.Planned)
	case Exhausted:
		return "retries exhausted: disabled"
	case NotRetryable:
		return "not retryable: disabled"
	case GaveUp:
		return "give_up_after reached: disabled"
	}
	return string(st.Decision)
}
