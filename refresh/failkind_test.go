package refresh

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The new policy fields: each is read, validated with a precise error, and
// written back.
func TestPolicyCustomerFields(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"retries":[0,"1m"],"final_reason":"thumbnail creation failed","notify":"https://hooks.example.com/bt",
		"notify_final":true,"max_retry_after":"1h","on_kind":{"bad_input":"final","rate_limited":{"strategy":{"kind":"exponential"}}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.FinalReason != "thumbnail creation failed" || p.Notify != "https://hooks.example.com/bt" || !p.NotifyFinal ||
		p.MaxRetryAfter != Duration(time.Hour) || len(p.Retries) != 2 || p.Retries[0] != 0 {
		t.Errorf("ParsePolicy = %+v", p)
	}
	if !p.OnKind["bad_input"].Final || p.OnKind["rate_limited"].Strategy == nil {
		t.Fatalf("on_kind = %+v", p.OnKind)
	}
	// The exponential strategy's defaults where fields are left out.
	if st := *p.OnKind["rate_limited"].Strategy; st.Initial != Duration(5*time.Second) || st.Multiplier != 2 ||
		st.Max != Duration(300*time.Second) || st.MaxAttempts != 5 {
		t.Errorf("exponential defaults = %+v; want 5 attempts, 5s initial, x2, at most 300s", st)
	}
	back, err := ParsePolicy(p.JSON(), nil)
	if err != nil || string(back.JSON()) != string(p.JSON()) {
		t.Errorf("round trip: %s -> %s, %v", p.JSON(), back.JSON(), err)
	}
	if !strings.Contains(string(p.JSON()), `"on_kind":{"bad_input":"final","rate_limited":{"strategy":{"kind":"exponential","initial":"5s","multiplier":2,"max":"5m","max_attempts":5}}}`) {
		t.Errorf("JSON = %s", p.JSON())
	}

	bad := []struct{ in, want string }{
		{`{"retries":[5]}`, "a bare number is accepted only for 0"},
		{`{"notify":"ftp://example.com/x"}`, `notify "ftp://example.com/x": expected an http:// or https:// URL`},
		{`{"notify":"https:///path"}`, "has no host"},
		{`{"notify":"https://user:secret@example.com/"}`, "holds a user or password"},
		{`{"notify":"not a url"}`, "expected an http:// or https:// URL"},
		{`{"notify_final":"yes"}`, "notify_final"},
		{`{"final_reason":"` + strings.Repeat("x", 501) + `"}`, "final_reason: longer than 500 characters"},
		{`{"final_reason":"two\nlines"}`, "final_reason: contains a control character"},
		{`{"on_kind":{"bad_input":"never"}}`, `on_kind value "never": expected "final" or {"strategy": {...}}`},
		{`{"on_kind":{"bad_input":{"retries":["1m"]}}}`, `expected "final" or {"strategy": {...}}`},
		{`{"on_kind":{"rate limited":"final"}}`, `on_kind: kind "rate limited": expected no spaces`},
		{`{"on_kind":{"x":{"strategy":{"kind":"fix","ms":1}}}}`, `on_kind "x": invalid policy: strategy fix: max_retry is required`},
		{`{"on_kind":{"x":{"strategy":{"kind":"fibonacci","unit":"1m"}}}}`, `on_kind "x": strategy fibonacci without max_attempts retries forever`},
		{`{"strategy":{"kind":"fibonacci","unit":"1m"}}`, "strategy fibonacci without max_attempts retries forever: set give_up_after"},
		{`{"max_retry_after":"31 days"}`, "max_retry_after 744h: expected from 0s (the default, 1 day) to 30 days"},
		{`{"notes":["a\u0000b"]}`, "notes[0]: contains a control character"},
	}
	for _, tt := range bad {
		_, err := ParsePolicy([]byte(tt.in), nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("ParsePolicy(%s) error = %v; want ErrInvalidPolicy containing %q", tt.in, err, tt.want)
		}
	}
	// on_kind replaces the base's map rather than merging into it.
	base, _ := ParsePolicy([]byte(`{"on_kind":{"a":"final"}}`), nil)
	if q, err := ParsePolicy([]byte(`{"on_kind":{"b":"final"}}`), &base); err != nil || len(q.OnKind) != 1 || !q.OnKind["b"].Final || len(base.OnKind) != 1 {
		t.Errorf("on_kind over a base = %+v, %v; base %+v", q.OnKind, err, base.OnKind)
	}
	// Fibonacci without a count runs when give_up_after bounds it.
	f, err := ParsePolicy([]byte(`{"strategy":{"kind":"fibonacci","unit":"1m"},"give_up_after":"1 week"}`), nil)
	if err != nil || f.RetryStrategy().Attempts() != 0 {
		t.Fatalf("unbounded fibonacci with give_up_after: %+v, %v", f, err)
	}
	if d, ok := f.RetryStrategy().Delay(Input{Failure: 40}); !ok || d != MaxDelay {
		t.Errorf("fibonacci delay after failure 40 = %v, %v; want it to go on, capped at %v", d, ok, MaxDelay)
	}
	// The compact form takes the defaults too.
	if st, err := ParseStrategy("exponential"); err != nil || st.Attempts() != 5 {
		t.Errorf(`ParseStrategy("exponential") = %+v, %v; want 5 attempts`, st, err)
	}
}

// The seed's exponential example: 5 s, 10 s, 20 s, 40 s, then the fifth
// failure ends the retries.
func TestExponentialDefaults(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"strategy":{"kind":"exponential"}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := 1; k <= 5; k++ {
		d, ok := p.RetryStrategy().Delay(Input{Failure: k})
		if !ok {
			got = append(got, "exhausted")
			break
		}
		got = append(got, FormatDuration(d))
	}
	if strings.Join(got, " ") != "5s 10s 20s 40s exhausted" {
		t.Errorf("delays %v", got)
	}
	long, _ := ParseStrategy("exponential max_attempts=9")
	if d, _ := long.Delay(Input{Failure: 7}); d != 300*time.Second {
		t.Errorf("delay after failure 7 = %v; want the 300s cap", d)
	}
	// An initial delay above the default cap keeps no cap, not one below it.
	if big, _ := ParseStrategy("exponential initial=10m"); big.Max != 0 {
		t.Errorf("exponential initial=10m: max %v; want none", big.Max)
	}
}

func TestDefaultFinalReason(t *testing.T) {
	for _, tt := range []struct {
		n    int
		err  string
		want string
	}{
		{7, "GET: 503 Service Unavailable", "Cannot refresh BigTable after 7 attempts: GET: 503 Service Unavailable"},
		{1, "timeout", "Cannot refresh BigTable after 1 attempt: timeout"},
		{3, "  ", "Cannot refresh BigTable after 3 attempts"},
		{2, strings.Repeat("é", 400), "Cannot refresh BigTable after 2 attempts: " + strings.Repeat("é", 299) + "…"},
	} {
		if got := DefaultFinalReason(tt.n, tt.err); got != tt.want {
			t.Errorf("DefaultFinalReason(%d, %.20q) = %q; want %q", tt.n, tt.err, got, tt.want)
		}
	}
}

// Failures by kind and retry_after, through the pure transition.
func TestFailByKind(t *testing.T) {
	running := func(no int, started string) State {
		return State{AttemptUID: "a", AttemptNo: no, StartedAt: at(started), DeadlineAt: at(started).Add(time.Hour)}
	}
	kinds := policy(time.Hour, defaultDelays)
	kinds.OnKind = map[string]KindRule{
		"bad_input":    {Final: true},
		"rate_limited": {Strategy: &Strategy{Kind: KindFix, Ms: 120_000, MaxRetry: intp(3)}},
	}
	withReason := kinds
	withReason.FinalReason = "thumbnail creation failed"
	capped := kinds
	capped.MaxRetryAfter = Duration(10 * time.Minute)
	tests := []struct {
		name       string
		p          Policy
		state      State
		now        time.Time
		f          Failure
		want       Decision
		wantRef    time.Time
		wantReason string
		wantKind   string
		wantRA     bool
	}{
		{"a kind not listed takes the policy's strategy", kinds, running(2, "06:10"), at("06:12"),
			Failure{Kind: "upstream_5xx"}, Retry, at("06:13"), "", "", false},
		{"a kind's own strategy", kinds, running(1, "06:00"), at("06:10"),
			Failure{Kind: "rate_limited"}, Retry, at("06:12"), "", "rate_limited", false},
		{"the kind's strategy counts the shared attempt_no", kinds, running(4, "06:00"), at("06:10"),
			Failure{Kind: "rate_limited"}, Exhausted, time.Time{}, "Cannot refresh BigTable after 4 attempts", "rate_limited", false},
		{"a final kind disables at once", kinds, running(1, "06:00"), at("06:10"),
			Failure{Kind: "bad_input", Message: "HTTP 404"}, NotRetryable, time.Time{}, "Cannot refresh BigTable after 1 attempt: HTTP 404", "bad_input", false},
		{"final_reason when the worker gives none", withReason, running(7, "08:00"), at("08:30"),
			Failure{Message: "boom"}, Exhausted, time.Time{}, "thumbnail creation failed", "", false},
		{"the worker's reason wins over final_reason", withReason, running(1, "06:00"), at("06:01"),
			Failure{NotRetryable: true, Reason: "Provided URL is invalid: x"}, NotRetryable, time.Time{}, "Provided URL is invalid: x", "", false},
		{"retry_after sets the delay", kinds, running(1, "06:00"), at("06:10"),
			Failure{RetryAfter: at("06:40")}, Retry, at("06:40"), "", "", true},
		{"retry_after with a kind", kinds, running(1, "06:00"), at("06:10"),
			Failure{Kind: "rate_limited", RetryAfter: at("06:11")}, Retry, at("06:11"), "", "rate_limited", true},
		{"retry_after in the past: at once", kinds, running(2, "06:00"), at("06:10"),
			Failure{RetryAfter: at("06:00")}, Retry, at("06:10"), "", "", true},
		{"retry_after is capped by max_retry_after", capped, running(1, "06:00"), at("06:10"),
			Failure{RetryAfter: at("09:00")}, Retry, at("06:20"), "", "", true},
		{"retry_after is capped by a day by default", kinds, running(1, "06:00"), at("06:10"),
			Failure{RetryAfter: at("06:10").Add(72 * time.Hour)}, AlignedAfter, at("16:00"), "", "", true},
		{"retry_after stays aligned with the schedule", kinds, running(1, "06:00"), at("06:10"),
			Failure{RetryAfter: at("15:30")}, AlignedOverlap, at("16:00"), "", "", true},
		{"retry_after does not revive exhausted retries", kinds, running(7, "08:00"), at("08:30"),
			Failure{RetryAfter: at("08:31")}, Exhausted, time.Time{}, "Cannot refresh BigTable after 7 attempts", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, step, err := Rules{twiceADay, tt.p}.Fail(tt.state, tt.now, ReceivedAt(tt.now), "a", tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if step.Decision != tt.want || !got.RefreshAt.Equal(tt.wantRef) || got.DisabledReason != tt.wantReason ||
				step.Kind != tt.wantKind || step.FromRetryAfter != tt.wantRA {
				t.Errorf("Fail = %s refresh_at %v %q kind %q retry_after %v; want %s %v %q kind %q retry_after %v",
					step.Decision, got.RefreshAt, got.DisabledReason, step.Kind, step.FromRetryAfter,
					tt.want, tt.wantRef, tt.wantReason, tt.wantKind, tt.wantRA)
			}
		})
	}
}

func intp(n int) *int { return &n }

func TestParseOutcomesKinds(t *testing.T) {
	got, err := ParseOutcomes("failure:10m,failure:rate_limited:30s,failure:upstream_5xx,failure:retry_after=0s:after=2m,not_retryable:bad_input,timeout,success")
	if err != nil {
		t.Fatal(err)
	}
	want := []SimOutcome{
		{Kind: OutcomeFailure, After: 10 * time.Minute},
		{Kind: OutcomeFailure, FailureKind: "rate_limited", RetryAfter: 30 * time.Second, HasRetryAfter: true},
		{Kind: OutcomeFailure, FailureKind: "upstream_5xx"},
		{Kind: OutcomeFailure, After: 2 * time.Minute, HasRetryAfter: true},
		{Kind: OutcomeNotRetryable, FailureKind: "bad_input"},
		{Kind: OutcomeTimeout}, {Kind: OutcomeSuccess},
	}
	if len(got) != len(want) {
		t.Fatalf("ParseOutcomes = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("outcome %d = %+v; want %+v", i, got[i], want[i])
		}
	}
	if s := got[1].String(); s != "failure:rate_limited:30s" {
		t.Errorf("String = %q", s)
	}
	for in, msg := range map[string]string{
		"timeout:rate_limited":     "only a failure has a kind",
		"failure:colour=red":       `"colour=red": expected after=, kind= or retry_after=`,
		"failure:retry_after=soon": "retry_after",
		"failure:rate limited":     "expected no spaces",
	} {
		if _, err := ParseOutcomes(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseOutcomes(%q) = %v; want %q", in, err, msg)
		}
	}
}

// A plan with kinds: the rate-limited failure waits its retry_after, the
// bad input is final with the policy's reason.
func TestSimulateKinds(t *testing.T) {
	p := policy(time.Hour, defaultDelays)
	p.OnKind = map[string]KindRule{"bad_input": {Final: true}}
	p.FinalReason = "thumbnail creation failed"
	outs, _ := ParseOutcomes("failure:rate_limited:30m,failure:bad_input")
	plan := Simulate(Rules{twiceADay, p}, at("06:00"), SimOptions{Outcomes: outs})
	if len(plan.Attempts) != 2 {
		t.Fatalf("plan %+v", plan)
	}
	a, b := plan.Attempts[0], plan.Attempts[1]
	if a.FailureKind != "rate_limited" || a.RetryAfter == nil || !a.RefreshAt.Equal(at("06:31")) ||
		a.Why != "retry after 30m [the worker's retry_after]" {
		t.Errorf("first attempt %+v", a)
	}
	if !b.Disabled || b.Reason != "thumbnail creation failed" || b.Why != "not retryable: disabled [kind bad_input]" {
		t.Errorf("second attempt %+v", b)
	}
}
