package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/schedule"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// rulesFromFlags builds the definition and policy the flags describe, with
// schedules lacking DTSTART starting at start.
func rulesFromFlags(e env, d *defFlags, set map[string]bool, start time.Time) (store.Definition, refresh.Rules, error) {
	pol, err := defaultPolicy(e)
	if err != nil {
		return store.Definition{}, refresh.Rules{}, err
	}
	var def store.Definition
	if err := d.apply(set, &def, &pol, start); err != nil {
		return store.Definition{}, refresh.Rules{}, err
	}
	sch, err := schedule.Parse(def.Schedule, start)
	if err != nil {
		return store.Definition{}, refresh.Rules{}, usagef("schedule: %v", err)
	}
	return def, refresh.Rules{Schedule: sch, Policy: pol}, nil
}

func runPlan(ctx context.Context, e env, args []string) error {
	var cfg Config
	var d defFlags
	var start, outcomes, format, outage, breaker string
	var failAll bool
	var seed uint64
	var run time.Duration
	var limit int
	fs := flagSet(e, "plan", "plan [policy flags] --start T (--outcomes success,failure,timeout,... | --fail-all) [--outage START/DURATION] [--breaker SPEC] [--seed N] [--format table|json|mermaid]", &cfg)
	d.register(fs)
	fs.StringVar(&start, "start", "now", "when the record is first due: an RFC 3339 time (`T`) or now")
	fs.StringVar(&outcomes, "outcomes", "", "the attempts' `OUTCOMES` in order: success, failure, timeout, not_retryable, each optionally :duration (failure:10m), and a failure's :kind and :retry_after (failure:rate_limited:30s)")
	fs.BoolVar(&failAll, "fail-all", false, "every attempt fails, until the policy gives up")
	fs.Uint64Var(&seed, "seed", 1, "random seed for randomized strategies: the same seed gives the same plan")
	fs.StringVar(&format, "format", "table", "output `FORMAT`: table, json or mermaid (a Gantt chart)")
	fs.DurationVar(&run, "run", time.Minute, "how long an attempt runs before success or failure")
	fs.IntVar(&limit, "limit", 200, "stop after this many attempts")
	fs.StringVar(&outage, "outage", "", "the upstream is down from START for DURATION (`START/DURATION`: 2024-03-04T00:00:00Z/2h, or START/END): every attempt starting in it fails, and the upstream's breaker parks the record (--outcomes, if given, are for the other attempts; else they succeed)")
	fs.StringVar(&breaker, "breaker", "", "the upstream's breaker, as upstream set --breaker takes it (`SPEC`: \"consecutive=2 cool-down=10m\"; keys not given keep the defaults; off); default: the default breaker")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	set := setFlags(fs)
	t0 := time.Now().UTC().Truncate(time.Second)
	if start != "now" {
		var err error
		if t0, err = time.Parse(time.RFC3339, start); err != nil {
			return usagef("--start %q: expected an RFC 3339 time (2024-03-04T06:00:00Z) or now", start)
		}
	}
	opt := refresh.SimOptions{FailAll: failAll, Run: run, Limit: limit}
	switch {
	case set["outage"] && failAll:
		return usagef("--outage with --fail-all: the outage's attempts fail anyway; give --outcomes for the others, or nothing (they succeed)")
	case set["outage"]:
		var err error
		if opt.Outage, err = parseOutage(outage); err != nil {
			return usagef("--outage %v", err)
		}
	case (outcomes == "") == !failAll:
		return usagef("give --outcomes or --fail-all (one of them), or --outage")
	}
	var sim *simBreaker
	if set["outage"] || set["breaker"] {
		b := upstream.DefaultConfig().Breaker
		if set["breaker"] {
			if err := parseBreaker(breaker, &b); err != nil {
				return usagef("--breaker: %v", err)
			}
		}
		if err := (upstream.Config{Breaker: b}).Validate(); err != nil {
			return usageError{"--breaker: " + err.Error()}
		}
		sim = newSimBreaker(b)
		opt.Upstream = sim
	}
	if outcomes != "" {
		var err error
		if opt.Outcomes, err = refresh.ParseOutcomes(outcomes); err != nil {
			return usagef("--outcomes: %v", err)
		}
	}
	switch format {
	case "table", "json", "mermaid":
	default:
		return usagef("--format %q: expected table, json or mermaid", format)
	}
	if run <= 0 || limit < 1 || limit > 10_000 {
		return usagef("--run must be positive and --limit from 1 to 10000")
	}
	_, rules, err := rulesFromFlags(e, &d, set, t0)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	opt.Draw = rng.Float64
	plan := refresh.Simulate(rules, t0, opt)
	loc := t0.Location()
	switch format {
	case "json":
		v := planJSON(plan, loc)
		if sim != nil {
			b := sim.u.Config.Breaker
			v.Breaker = &b
		}
		if opt.Outage.Set() {
			v.Outage = &outageView{From: opt.Outage.From.In(loc).Format(time.RFC3339), To: opt.Outage.To.In(loc).Format(time.RFC3339)}
		}
		return writeJSON(e, v)
	case "mermaid":
		writeMermaid(e, plan, loc, opt.Outage)
		return nil
	}
	clock := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.In(loc).Format("2006-01-02 15:04:05")
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if sim == nil {
		fmt.Fprintln(tw, "#\tSTART\tDEADLINE\tOUTCOME\tAT\tREFRESH_AT\tWHY")
	} else {
		fmt.Fprintln(tw, "#\tSTART\tDEADLINE\tOUTCOME\tAT\tREFRESH_AT\tBREAKER\tWHY")
	}
	attempts, parked := 0, 0
	for _, a := range plan.Attempts {
		if a.Parked {
			parked++
		} else {
			attempts++
		}
		if sim == nil {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.No, clock(a.Start), clock(a.Deadline), outcomeText(a), clock(a.End), clock(a.RefreshAt), a.Why)
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.No, clock(a.Start), clock(a.Deadline), outcomeText(a), clock(a.End), clock(a.RefreshAt), a.Breaker, planWhy(a))
	}
	tw.Flush()
	fmt.Fprintf(e.stdout, "\n%d attempt(s)", attempts)
	if sim != nil {
		fmt.Fprintf(e.stdout, ", parked %d time(s)", parked)
	}
	fmt.Fprintf(e.stdout, "; final state: %s\n", finalState(plan.Final, loc))
	fmt.Fprintf(e.stdout, "stopped: %s\n", plan.Stopped)
	return nil
}

// outcomeText is an attempt's outcome as --outcomes writes it, with the
// failure's kind and retry_after: failure:rate_limited:30s.
func outcomeText(a refresh.PlannedAttempt) string {
	if a.Parked {
		return "PARKED"
	}
	o := refresh.SimOutcome{Kind: a.Outcome, FailureKind: a.FailureKind}
	if a.RetryAfter != nil {
		o.RetryAfter, o.HasRetryAfter = *a.RetryAfter, true
	}
	return o.String()
}

func finalState(s refresh.State, loc *time.Location) string {
	switch {
	case s.Disabled:
		return fmt.Sprintf("%s (%q), attempt_no %d", s.Phase(), s.DisabledReason, s.AttemptNo)
	case s.RefreshAt.IsZero():
		return fmt.Sprintf("%s, attempt_no %d", s.Phase(), s.AttemptNo)
	}
	return fmt.Sprintf("%s, refresh_at %s, attempt_no %d", s.Phase(), s.RefreshAt.In(loc).Format(time.RFC3339), s.AttemptNo)
}

// planWhy is a plan row's WHY with the upstream's part: a probe, the
// breaker's transitions.
func planWhy(a refresh.PlannedAttempt) string {
	why := a.Why
	if a.Probe {
		why = "probe: " + why
	}
	if a.InOutage {
		why = "outage: " + why
	}
	return joinTexts([]string{why, a.BreakerWhy})
}

// planView is plan --format json.
type planView struct {
	Attempts []plannedAttempt `json:"attempts"`
	Final    finalView        `json:"final"`
	Stopped  string           `json:"stopped"`
	// Outage and Breaker are the simulated upstream's (--outage,
	// --breaker), absent without them.
	Outage  *outageView       `json:"outage,omitempty"`
	Breaker *upstream.Breaker `json:"breaker,omitempty"`
}

// outageView is plan --outage in JSON.
type outageView struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// plannedAttempt is one attempt of a plan; times are RFC 3339 in the
// plan's zone, null when there is none.
type plannedAttempt struct {
	AttemptNo int     `json:"attempt_no"`
	Start     *string `json:"start"`
	Deadline  *string `json:"deadline"`
	Outcome   string  `json:"outcome"`
	End       *string `json:"end"`
	RefreshAt *string `json:"refresh_at"`
	Why       string  `json:"why"`
	Disabled  bool    `json:"disabled"`
	// Kind and RetryAfter are what the worker reported with its failure.
	Kind       string  `json:"kind,omitempty"`
	RetryAfter *string `json:"retry_after,omitempty"`
	// Decision and Delay are the retry decision after a failure;
	// DelayFrom says where the delay came from: strategy, on_kind or
	// retry_after.
	Decision  string `json:"decision,omitempty"`
	Delay     string `json:"delay,omitempty"`
	DelayFrom string `json:"delay_from,omitempty"`
	// Parked: the record fell due while its upstream's breaker was open
	// (outcome "parked"): no attempt started, attempt_no and refresh_at
	// kept; end is when it was released. Probe: the attempt was a
	// half-open breaker's probe. InOutage: it started in --outage.
	// Breaker is the breaker's state after the row, BreakerWhy its
	// transitions. All absent without --outage or --breaker.
	Parked     bool   `json:"parked,omitempty"`
	Probe      bool   `json:"probe,omitempty"`
	InOutage   bool   `json:"in_outage,omitempty"`
	Breaker    string `json:"breaker,omitempty"`
	BreakerWhy string `json:"breaker_why,omitempty"`
}

// finalView is the record's state after the last attempt of a plan.
type finalView struct {
	Phase          refresh.Phase `json:"phase"`
	RefreshAt      *string       `json:"refresh_at"`
	AttemptNo      int           `json:"attempt_no"`
	Disabled       bool          `json:"disabled_until_update"`
	DisabledReason *string       `json:"disabled_reason"`
}

func planJSON(p refresh.Plan, loc *time.Location) planView {
	at := func(t time.Time) *string {
		if t.IsZero() {
			return nil
		}
		s := t.In(loc).Format(time.RFC3339)
		return &s
	}
	v := planView{Attempts: make([]plannedAttempt, 0, len(p.Attempts)), Stopped: p.Stopped, Final: finalView{
		Phase: p.Final.Phase(), RefreshAt: at(p.Final.RefreshAt), AttemptNo: p.Final.AttemptNo,
		Disabled: p.Final.Disabled, DisabledReason: jsonText(p.Final.DisabledReason, p.Final.Disabled)}}
	for _, a := range p.Attempts {
		pa := plannedAttempt{AttemptNo: a.No, Start: at(a.Start), Deadline: at(a.Deadline), Outcome: a.Outcome,
			End: at(a.End), RefreshAt: at(a.RefreshAt), Why: a.Why, Disabled: a.Disabled,
			Parked: a.Parked, Probe: a.Probe, InOutage: a.InOutage, Breaker: a.Breaker, BreakerWhy: a.BreakerWhy}
		pa.Kind = a.FailureKind
		if a.RetryAfter != nil {
			ra := refresh.FormatDuration(*a.RetryAfter)
			pa.RetryAfter = &ra
		}
		if a.Step.Decision != "" {
			pa.Decision, pa.Delay = string(a.Step.Decision), refresh.FormatDuration(a.Step.Delay)
			switch {
			case a.Step.FromRetryAfter:
				pa.DelayFrom = "retry_after"
			case a.Step.Kind != "":
				pa.DelayFrom = "on_kind"
			default:
				pa.DelayFrom = "strategy"
			}
		}
		v.Attempts = append(v.Attempts, pa)
	}
	return v
}

// writeMermaid prints the plan as a Mermaid Gantt chart: a milestone at each
// start and end, a bar per attempt, a bar per parking and one for the
// outage, and a milestone at each transition of the breaker.
func writeMermaid(e env, p refresh.Plan, loc *time.Location, outage refresh.SimOutage) {
	w := e.stdout
	ts := func(t time.Time) string { return t.In(loc).Format("2006-01-02T15:04:05") }
	fmt.Fprintln(w, "gantt")
	n := 0
	for _, a := range p.Attempts {
		if !a.Parked {
			n++
		}
	}
	fmt.Fprintf(w, "    title %d attempt(s): %s\n", n, strings.ReplaceAll(p.Stopped, ":", " -"))
	fmt.Fprintln(w, "    dateFormat YYYY-MM-DDTHH:mm:ss")
	fmt.Fprintln(w, "    axisFormat %H:%M")
	if outage.Set() {
		fmt.Fprintf(w, "    🔥 Upstream outage : crit, %s, %ds\n", ts(outage.From), int(outage.To.Sub(outage.From).Seconds()))
	}
	breaker := func(a refresh.PlannedAttempt, i int, at time.Time) {
		if a.BreakerWhy != "" {
			fmt.Fprintf(w, "    ⚡ Breaker %s %d : milestone, %s, 0s\n", a.Breaker, i+1, ts(at))
		}
	}
	i := -1 // the attempt's index: parkings are not attempts
	for _, a := range p.Attempts {
		if a.Parked {
			fmt.Fprintf(w, "    ⏸️ Parked (attempt_no %d kept) : done, %s, %ds\n", a.No, ts(a.Start), max(int(a.End.Sub(a.Start).Seconds()), 1))
			breaker(a, i, a.Start)
			continue
		}
		i++
		name := "Refresh"
		if a.No > 1 {
			name = fmt.Sprintf("Retry %d", a.No-1)
		}
		if a.Probe {
			name = "Probe, " + name
		}
		fmt.Fprintf(w, "    🚀 Start %d : milestone, %s, 0s\n", i+1, ts(a.Start))
		fmt.Fprintf(w, "    ⚙️ %s (attempt %d) : %s, %ds\n", name, a.No, ts(a.Start), max(int(a.End.Sub(a.Start).Seconds()), 1))
		mark := map[string]string{refresh.OutcomeSuccess: "✅ Success", refresh.OutcomeTimeout: "⏰ Timeout"}[a.Outcome]
		if mark == "" {
			mark = "❌ Failure"
		}
		if a.Disabled {
			mark = "💥 Final failure"
		}
		fmt.Fprintf(w, "    %s %d : milestone, %s, 0s\n", mark, i+1, ts(a.End))
		breaker(a, i, a.End)
	}
}

func runExplain(ctx context.Context, e env, args []string) error {
	var cfg Config
	var d defFlags
	fs := flagSet(e, "explain", "explain [U | policy flags]", &cfg)
	d.register(fs)
	pos, err := parse(fs, args, -1)
	if err != nil {
		return err
	}
	set := setFlags(fs)
	var rule string
	var pol refresh.Policy
	switch {
	case len(pos) > 1:
		return usagef("expected at most one record uid")
	case len(pos) == 1:
		err := cfg.withStore(ctx, func(st *store.Store) error {
			row, err := st.Get(ctx, pos[0])
			if err != nil {
				return err
			}
			rule = row.Schedule
			pol, err = refresh.ParsePolicy(row.Policy, nil)
			return err
		})
		if err != nil {
			return err
		}
	default:
		def, rules, err := rulesFromFlags(e, &d, set, time.Now().UTC())
		if err != nil {
			return err
		}
		rule, pol = def.Schedule, rules.Policy
	}
	if first, after, ok := strings.Cut(rule, "\n"); ok {
		fmt.Fprintf(e.stdout, "# schedule from %s\n", first)
		rule = after
	}
	for _, line := range refresh.Explain(rule, pol) {
		text := strings.TrimLeft(line, " ")
		fmt.Fprintln(e.stdout, line[:len(line)-len(text)]+"- "+text)
	}
	if len(pos) == 1 && pol.Spread > 0 {
		// The record's own share of the spread (docs/design.md, U12).
		off := refresh.SpreadOffset(pos[0], time.Duration(pol.Spread))
		fmt.Fprintf(e.stdout, "# spread offset of %s: %s (added to each planned refresh)\n", pos[0], refresh.FormatDuration(off))
	}
	if set["policy"] || len(pos) == 1 {
		b, _ := json.Marshal(json.RawMessage(pol.JSON()))
		fmt.Fprintf(e.stdout, "# policy %s\n", b)
	}
	return nil
}
