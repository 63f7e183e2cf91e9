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

// OutcomeParked is the outcome of a plan's row where the record fell due
// while its upstream's breaker was open: no attempt started.
const OutcomeParked = "parked"

// PlannedAttempt is one attempt of a simulated run, or one parking (Parked).
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
	// Parked: the record fell due at Start while its upstream's breaker
	// was open, so it was parked (docs/design.md, U5): no attempt started,
	// No is the attempt_no kept, RefreshAt the refresh_at kept, End when
	// the record was released, Deadline zero, Outcome OutcomeParked.
	Parked bool `json:"parked,omitempty"`
	// Probe: the attempt started as a half-open breaker's probe (U6).
	Probe bool `json:"probe,omitempty"`
	// InOutage: the attempt started during SimOptions.Outage, so it failed.
	InOutage bool `json:"in_outage,omitempty"`
	// Breaker is the upstream's breaker state after the row, and
	// BreakerWhy the transitions the row caused ("" when none); both ""
	// without SimOptions.Upstream.
	Breaker    string `json:"breaker,omitempty"`
	BreakerWhy string `json:"breaker_why,omitempty"`
}

// Plan is a simulated run.
type Plan struct {
	Attempts []PlannedAttempt
	Final    State
	// Stopped says why the simulation ended.
	Stopped string
}

// SimOutage is a span during which the record's upstream is down.
type SimOutage struct {
	From, To time.Time
}

// Set reports whether the outage spans any time.
func (o SimOutage) Set() bool { return o.To.After(o.From) }

// covers reports whether an attempt starting at t falls in the outage.
func (o SimOutage) covers(t time.Time) bool { return o.Set() && !t.Before(o.From) && t.Before(o.To) }

// SimAdmission is what a simulated upstream decided for the record due at
// some instant.
type SimAdmission struct {
	// Start: the attempt starts; else the record is parked until Release.
	Start bool
	// Probe: it starts as a half-open breaker's probe.
	Probe bool
	// Release is when a parked record is released (the breaker's next
	// probe), when Admit is asked again.
	Release time.Time
	// Breaker is the breaker's state after the decision; Why the
	// transitions it made, "" when none.
	Breaker, Why string
}

// SimUpstream stands for the record's upstream (its circuit breaker) in a
// simulation, on the simulated clock. Only the simulated record's attempts
// reach it: the records that share a real upstream are not simulated.
type SimUpstream interface {
	// Admit decides, at now, whether the due record starts or is parked.
	Admit(now time.Time) SimAdmission
	// Observe counts an attempt that ended at end with outcome (success,
	// failure, timeout, not_retryable) and returns the breaker's state
	// after it and the transition it made ("" when none).
	Observe(outcome string, end time.Time) (breaker, why string)
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
	// Outage, when set, makes every attempt that starts in [From, To) a
	// retryable failure after Run (the upstream refuses connections); those
	// attempts take nothing from Outcomes. Without Outcomes (and without
	// FailAll) the attempts outside the outage succeed and the simulation
	// stops after the first planned refresh (not a retry, not a probe)
	// that starts after the outage and succeeds.
	Outage SimOutage
	// Upstream, when set, is asked before each start and told each
	// outcome: an open breaker parks the record (no attempt burned) until
	// its release, when its time parked is added to failing_since
	// (Unpark).
	Upstream SimUpstream
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
	var released time.Time // a parked record's release: it starts then, not at its kept refresh_at
	next, attempts, resumed := 0, 0, false
	for {
		now := s.RefreshAt
		if released.After(now) {
			now = released
		}
		outage := opt.Outage.covers(now)
		switch {
		case s.Disabled:
			plan.Stopped = "disabled: " + s.DisabledReason
		case s.RefreshAt.IsZero():
			plan.Stopped = "nothing planned: the record waits for a manual update"
		case resumed:
			plan.Stopped = "the record is back on its schedule after the outage"
		case !opt.FailAll && !outage && next >= len(opt.Outcomes) && (opt.Outcomes != nil || !opt.Outage.Set()):
			plan.Stopped = "no more outcomes given"
		case attempts >= opt.Limit:
			plan.Stopped = fmt.Sprintf("stopped after %d attempts", opt.Limit)
		}
		if plan.Stopped != "" {
			plan.Final = s
			return plan
		}
		var adm SimAdmission
		if opt.Upstream != nil {
			if adm = opt.Upstream.Admit(now); !adm.Start {
				plan.Attempts = append(plan.Attempts, PlannedAttempt{No: s.AttemptNo, Start: now, End: adm.Release,
					Outcome: OutcomeParked, RefreshAt: s.RefreshAt, Parked: true, Breaker: adm.Breaker, BreakerWhy: adm.Why,
					Why: "breaker open: parked until its cool-down ends; no attempt burned"})
				s = Unpark(Park(s), now, adm.Release)
				released = adm.Release
				continue
			}
		}
		o := SimOutcome{Kind: OutcomeSuccess}
		switch {
		case outage:
			o = SimOutcome{Kind: OutcomeFailure}
		case opt.FailAll:
			o = SimOutcome{Kind: OutcomeFailure}
		case next < len(opt.Outcomes):
			o = opt.Outcomes[next]
			next++
		}
		attempts++
		s, _ = r.Start(s, now, fmt.Sprintf("sim-%d", attempts))
		a := PlannedAttempt{No: s.AttemptNo, Start: now, Deadline: s.DeadlineAt, Outcome: o.Kind, InOutage: outage,
			Probe: adm.Probe, Breaker: adm.Breaker, BreakerWhy: adm.Why}
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
			resumed = opt.Outage.Set() && opt.Outcomes == nil && !opt.FailAll && !now.Before(opt.Outage.To) && a.No == 1 && !a.Probe
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
		if opt.Upstream != nil {
			b, why := opt.Upstream.Observe(a.Outcome, a.End)
			a.Breaker, a.BreakerWhy = b, joinWhy(a.BreakerWhy, why)
		}
		a.RefreshAt, a.Disabled, a.Reason = s.RefreshAt, s.Disabled, s.DisabledReason
		plan.Attempts = append(plan.Attempts, a)
	}
}

// joinWhy joins two transitions' texts, either may be "".
func joinWhy(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
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
