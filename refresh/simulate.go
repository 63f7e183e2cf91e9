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
	// FailureKind is the kind of failure the worker reports (failure and
	// not_retryable only), e.g. rate_limited.
	FailureKind string
	// RetryAfter is the worker's retry_after, relative to the failure;
	// meaningful when HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
}

// String writes the outcome back in ParseOutcomes' form: failure,
// failure:rate_limited:30s, failure:retry_after=0s.
func (o SimOutcome) String() string {
	out := o.Kind
	if o.FailureKind != "" {
		out += ":" + o.FailureKind
		if o.HasRetryAfter {
			out += ":" + FormatDuration(o.RetryAfter)
		}
	} else if o.HasRetryAfter {
		out += ":retry_after=" + FormatDuration(o.RetryAfter)
	}
	return out
}

// ParseOutcomes reads a comma-separated list of outcomes: success, failure,
// timeout or not_retryable, each followed by optional colon-separated parts:
//
//   - a duration before any kind: how long the attempt runs (failure:10m);
//   - a word: the failure's kind (failure:rate_limited);
//   - a duration after the kind: the worker's retry_after
//     (failure:rate_limited:30s);
//   - key=value with key after, kind or retry_after, in any order
//     (failure:retry_after=30s:after=2m).
func ParseOutcomes(s string) ([]SimOutcome, error) {
	var out []SimOutcome
	for _, part := range strings.Split(s, ",") {
		fields := strings.Split(strings.TrimSpace(part), ":")
		o := SimOutcome{Kind: fields[0]}
		switch o.Kind {
		case OutcomeSuccess, OutcomeFailure, OutcomeTimeout, OutcomeNotRetryable:
		default:
			return nil, fmt.Errorf("outcome %q: expected success, failure, timeout or not_retryable, optionally with :duration (failure:10m), :kind and :retry_after (failure:rate_limited:30s)", part)
		}
		for _, f := range fields[1:] {
			key, value, isPair := strings.Cut(f, "=")
			if !isPair {
				if _, err := ParseDuration(f); err == nil {
					key, value = "after", f
					if o.FailureKind != "" {
						key = "retry_after"
					}
				} else {
					key, value = "kind", f
				}
			}
			switch key {
			case "after", "retry_after":
				d, err := ParseDuration(value)
				if err != nil {
					return nil, fmt.Errorf("outcome %q: %s: %w", part, key, err)
				}
				if key == "after" {
					o.After = d
				} else {
					o.RetryAfter, o.HasRetryAfter = d, true
				}
			case "kind":
				if err := ValidateKind(value); err != nil {
					return nil, fmt.Errorf("outcome %q: %w", part, err)
				}
				o.FailureKind = value
			default:
				return nil, fmt.Errorf("outcome %q: %q: expected after=, kind= or retry_after=", part, f)
			}
		}
		if (o.FailureKind != "" || o.HasRetryAfter) && o.Kind != OutcomeFailure && o.Kind != OutcomeNotRetryable {
			return nil, fmt.Errorf("outcome %q: only a failure has a kind or a retry_after", part)
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
	// FailureKind and RetryAfter are what the simulated worker reported
	// with its failure ("" and nil when nothing).
	FailureKind string         `json:"kind,omitempty"`
	RetryAfter  *time.Duration `json:"-"`
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
		if o.Kind == OutcomeFailure || o.Kind == OutcomeNotRetryable {
			a.FailureKind = o.FailureKind
			if o.HasRetryAfter {
				ra := o.RetryAfter
				a.RetryAfter = &ra
			}
		}
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
			f := Failure{NotRetryable: o.Kind == OutcomeNotRetryable, Draw: opt.Draw(), Kind: a.FailureKind}
			if a.RetryAfter != nil {
				f.RetryAfter = a.End.Add(*a.RetryAfter)
			}
			s, a.Step, _ = r.Fail(s, a.End, ReceivedAt(a.End), uid, f)
			a.Why = a.Step.String()
		}
		a.RefreshAt, a.Disabled, a.Reason = s.RefreshAt, s.Disabled, s.DisabledReason
		plan.Attempts = append(plan.Attempts, a)
	}
}

// String explains the failure branch taken, for plans and logs.
func (st Step) String() string {
	out := st.decision()
	var why []string
	if st.Kind != "" {
		why = append(why, "kind "+st.Kind)
	}
	if st.FromRetryAfter {
		why = append(why, "the worker's retry_after")
	}
	if len(why) > 0 {
		out += " [" + strings.Join(why, "; ") + "]"
	}
	return out
}

func (st Step) decision() string {
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
