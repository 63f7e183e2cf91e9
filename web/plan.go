package web

import (
	"fmt"
	"html/template"
	"time"

	"github.com/bigtables/bigtables/refresh"
)

// clock is how the dashboard writes an instant: UTC, to the second.
func clock(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// planned returns the next n planned refreshes after now (the schedule's
// occurrences, shifted by the record's spread offset when r is the
// record's: Rules.ForRecord).
func planned(r refresh.Rules, now time.Time, n int) []time.Time {
	var out []time.Time
	t := now
	for range n {
		t = r.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// whatNext says, from the record's current state at now, what the state
// machine does next and after each outcome of the next attempt: the real
// transitions (refresh.Rules) applied to a copy of the state, so the text
// cannot drift from what the scheduler and poller do.
func whatNext(r refresh.Rules, s refresh.State, now time.Time) []string {
	limit := r.Policy.RetryStrategy().Attempts()
	of := func(n int) string {
		if limit > 0 {
			return fmt.Sprintf("attempt %d of %d", n, limit)
		}
		return fmt.Sprintf("attempt %d", n)
	}
	timeout := time.Duration(r.Policy.Timeout)
	const draw = 0.5 // the middle of a randomized strategy's range
	after := func(next refresh.State, step refresh.Step) string {
		switch {
		case next.Disabled:
			return fmt.Sprintf("the record is disabled (%s): %q", step, next.DisabledReason)
		case next.RefreshAt.IsZero():
			return fmt.Sprintf("nothing is planned (%s)", step)
		}
		return fmt.Sprintf("retry at %s, %s (%s)", clock(next.RefreshAt), of(next.AttemptNo+1), step)
	}
	succeed := func(next refresh.State) string {
		if next.RefreshAt.IsZero() {
			return "nothing more is planned (no further occurrence of the schedule)"
		}
		return "the next refresh is the planned one at " + clock(next.RefreshAt)
	}
	switch s.Phase() {
	case refresh.PhasePaused:
		if s.RefreshAt.IsZero() {
			return []string{"Paused: nothing starts until it is resumed; nothing is planned after that."}
		}
		return []string{fmt.Sprintf("Paused: nothing starts until it is resumed. Resumed, it starts at %s (at once if that has passed), as %s.",
			clock(s.RefreshAt), of(s.AttemptNo+1))}
	case refresh.PhaseDisabled:
		return []string{fmt.Sprintf("Disabled: %q. Re-enabling resets the attempt count and starts %s at once.", s.DisabledReason, of(1))}
	case refresh.PhaseRunning:
		out := []string{fmt.Sprintf("%s is running since %s; its deadline is %s.", capital(of(s.AttemptNo)), clock(s.StartedAt), clock(s.DeadlineAt))}
		if ok, err := r.Succeed(s, now, refresh.ReceivedAt(now), s.AttemptUID); err == nil {
			out = append(out, "If it succeeds now, "+succeed(ok)+".")
		}
		if next, step, err := r.Fail(s, now, refresh.ReceivedAt(now), s.AttemptUID, refresh.Failure{Draw: draw}); err == nil {
			out = append(out, "If it fails now, "+after(next, step)+".")
		}
		if next, step, err := r.TimeOut(s, s.DeadlineAt, draw); err == nil {
			out = append(out, fmt.Sprintf("If no answer comes by %s, it times out: %s.", clock(s.DeadlineAt), after(next, step)))
		}
		return out
	case refresh.PhaseIdle:
		return []string{"Nothing is planned: refresh now or re-enable starts it."}
	case refresh.PhaseParked:
		return []string{fmt.Sprintf("Parked: its upstream's breaker is open, so it was not started and no attempt was burned; "+
			"it keeps its attempt count and its refresh time (%s). It starts as %s when the breaker lets it: as a probe after the cool-down, "+
			"or when the parked records are released after the breaker closes.", clock(s.RefreshAt), of(s.AttemptNo+1))}
	}
	at := s.RefreshAt
	if at.Before(now) {
		at = now
	}
	started, err := r.Start(s, at, "next")
	if err != nil {
		return []string{"Cannot simulate the next attempt: " + err.Error()}
	}
	out := []string{fmt.Sprintf("Next: %s starts at %s, deadline %s.", of(started.AttemptNo), clock(at), clock(started.DeadlineAt))}
	run := min(time.Minute, timeout/2)
	if ok, err := r.Succeed(started, at.Add(run), refresh.ReceivedAt(at.Add(run)), started.AttemptUID); err == nil {
		out = append(out, "If it succeeds, "+succeed(ok)+".")
	}
	if next, step, err := r.Fail(started, at.Add(run), refresh.ReceivedAt(at.Add(run)), started.AttemptUID, refresh.Failure{Draw: draw}); err == nil {
		out = append(out, fmt.Sprintf("If it fails (after %s), %s.", refresh.HumanDuration(run), after(next, step)))
	}
	if next, step, err := r.TimeOut(started, started.DeadlineAt, draw); err == nil {
		out = append(out, fmt.Sprintf("If it times out at %s, %s.", clock(started.DeadlineAt), after(next, step)))
	}
	return out
}

func capital(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

var funcs = template.FuncMap{
	"clock":     clock,
	"recordURL": recordURL,
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		d := now.Sub(t).Round(time.Second)
		if d < 0 {
			return "in " + refresh.HumanDuration(-d)
		}
		if d == 0 {
			return "now"
		}
		return refresh.HumanDuration(d) + " ago"
	},
	"dur": func(d time.Duration) string {
		if d <= 0 {
			return "0 s"
		}
		return d.Round(time.Millisecond).String()
	},
	"phaseURL": func(p refresh.Phase) template.URL {
		return template.URL("/records?phase=" + string(p))
	},
}
