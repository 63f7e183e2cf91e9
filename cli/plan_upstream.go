package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/upstream"
)

// parseOutage reads plan --outage: START/DURATION (2024-03-04T00:00:00Z/30m)
// or START/END, both RFC 3339 times.
func parseOutage(s string) (refresh.SimOutage, error) {
	from, rest, ok := strings.Cut(s, "/")
	if !ok {
		return refresh.SimOutage{}, fmt.Errorf("%q: expected START/DURATION (2024-03-04T00:00:00Z/30m) or START/END", s)
	}
	start, err := time.Parse(time.RFC3339, from)
	if err != nil {
		return refresh.SimOutage{}, fmt.Errorf("%q: start %q: expected an RFC 3339 time (2024-03-04T00:00:00Z)", s, from)
	}
	end, err := time.Parse(time.RFC3339, rest)
	if err != nil {
		d, derr := refresh.ParseDuration(rest)
		if derr != nil {
			return refresh.SimOutage{}, fmt.Errorf("%q: %q: expected a duration (30m, 2h) or an RFC 3339 end time", s, rest)
		}
		end = start.Add(d)
	}
	if !end.After(start) {
		return refresh.SimOutage{}, fmt.Errorf("%q: the outage must end after it starts", s)
	}
	return refresh.SimOutage{From: start, To: end}, nil
}

// simBreaker is the record's upstream in plan: the real pure breaker
// (package upstream) on the simulated clock, with no limits (plan has one
// record: max-in-flight and rate would hold nothing back). It sees only the
// simulated record's attempts, so a failure-rate threshold counts only
// them, and the record is its upstream's only probe.
type simBreaker struct {
	u *upstream.Upstream
}

func newSimBreaker(b upstream.Breaker) *simBreaker {
	return &simBreaker{u: &upstream.Upstream{Name: "plan", Config: upstream.Config{Breaker: b}}}
}

// transitionText describes a breaker transition for the plan.
func transitionText(tr *upstream.Transition) string {
	if tr == nil {
		return ""
	}
	out := fmt.Sprintf("breaker %s: %s", tr.To, tr.Why)
	if tr.CoolDown > 0 {
		out += ", cool-down " + refresh.FormatDuration(tr.CoolDown)
	}
	return out
}

// Admit does what a tick does for the due record (docs/design.md, U5-U8):
// the upstream's wake (an open breaker whose cool-down is over turns
// half-open and releases the parked record as its probe), then Admit. A
// parked record is released at the breaker's next probe.
func (b *simBreaker) Admit(now time.Time) refresh.SimAdmission {
	var why []string
	if b.u.State.Waking() {
		_, tr := b.u.Wake(now, 1)
		why = append(why, transitionText(tr))
		// Nothing else is parked: a release in progress ends at once.
		b.u.Released(false)
	}
	v, tr := b.u.Admit(now)
	why = append(why, transitionText(tr))
	a := refresh.SimAdmission{Start: v != upstream.Park, Breaker: string(b.u.State.Current()), Why: joinTexts(why)}
	if v == upstream.Park {
		a.Release = b.u.State.NextProbe
	} else {
		a.Probe = b.u.State.Breaker == upstream.HalfOpen
	}
	return a
}

// Observe counts an attempt as the scheduler (timeouts) and the poller
// (results) do (docs/design.md, U3): a not-retryable failure is the
// record's own and does not count.
func (b *simBreaker) Observe(outcome string, end time.Time) (string, string) {
	o := upstream.Failed
	switch outcome {
	case refresh.OutcomeSuccess:
		o = upstream.Succeeded
	case refresh.OutcomeNotRetryable:
		o = upstream.Uncounted
	}
	tr := b.u.Observe(o, end)
	return string(b.u.State.Current()), transitionText(tr)
}

func joinTexts(parts []string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}
