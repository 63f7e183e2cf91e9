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
)

func init() {
	commands["plan"] = command{"simulate a policy on a clock and print every attempt", runPlan}
	commands["explain"] = command{"print a record's or a policy's rules as sentences", runExplain}
}

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
	var start, outcomes, format string
	var failAll bool
	var seed uint64
	var run time.Duration
	var limit int
	fs := flagSet(e, "plan", "plan [policy flags] --start T (--outcomes success,failure,timeout,... | --fail-all) [--seed N] [--format table|json|mermaid]", &cfg)
	d.register(fs)
	fs.StringVar(&start, "start", "now", "when the record is first due: RFC 3339 time or now")
	fs.StringVar(&outcomes, "outcomes", "", "the attempts' outcomes in order: success, failure, timeout, not_retryable, each optionally :duration (failure:10m)")
	fs.BoolVar(&failAll, "fail-all", false, "every attempt fails, until the policy gives up")
	fs.Uint64Var(&seed, "seed", 1, "random seed for randomized strategies: the same seed gives the same plan")
	fs.StringVar(&format, "format", "table", "table, json or mermaid (a Gantt chart)")
	fs.DurationVar(&run, "run", time.Minute, "how long an attempt runs before success or failure")
	fs.IntVar(&limit, "limit", 200, "stop after this many attempts")
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
	if (outcomes == "") == !failAll {
		return usagef("give --outcomes or --fail-all (one of them)")
	}
	opt := refresh.SimOptions{FailAll: failAll, Run: run, Limit: limit}
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
		return writeJSON(e, planJSON(plan, loc))
	case "mermaid":
		writeMermaid(e, plan, loc)
		return nil
	}
	clock := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.In(loc).Format("2006-01-02 15:04:05")
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tSTART\tDEADLINE\tOUTCOME\tAT\tREFRESH_AT\tWHY")
	for _, a := range plan.Attempts {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.No, clock(a.Start), clock(a.Deadline), a.Outcome, clock(a.End), clock(a.RefreshAt), a.Why)
	}
	tw.Flush()
	fmt.Fprintf(e.stdout, "\n%d attempt(s); final state: %s\n", len(plan.Attempts), finalState(plan.Final, loc))
	fmt.Fprintf(e.stdout, "stopped: %s\n", plan.Stopped)
	return nil
}

func finalState(s refresh.State, loc *time.Location) string {
	switch {
	case s.Disabled:
		return fmt.Sprintf("disabled (%q), attempt_no %d", s.DisabledReason, s.AttemptNo)
	case s.RefreshAt.IsZero():
		return fmt.Sprintf("idle, attempt_no %d", s.AttemptNo)
	}
	return fmt.Sprintf("refresh_at %s, attempt_no %d", s.RefreshAt.In(loc).Format(time.RFC3339), s.AttemptNo)
}

func planJSON(p refresh.Plan, loc *time.Location) map[string]any {
	attempts := make([]map[string]any, 0, len(p.Attempts))
	at := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t.In(loc).Format(time.RFC3339)
	}
	for _, a := range p.Attempts {
		m := map[string]any{
			"attempt_no": a.No, "start": at(a.Start), "deadline": at(a.Deadline), "outcome": a.Outcome,
			"end": at(a.End), "refresh_at": at(a.RefreshAt), "why": a.Why, "disabled": a.Disabled,
		}
		if a.Step.Decision != "" {
			m["decision"] = a.Step.Decision
			m["delay"] = refresh.FormatDuration(a.Step.Delay)
		}
		attempts = append(attempts, m)
	}
	final := map[string]any{"refresh_at": at(p.Final.RefreshAt), "attempt_no": p.Final.AttemptNo,
		"disabled_until_update": p.Final.Disabled, "disabled_reason": jsonText(p.Final.DisabledReason, p.Final.Disabled)}
	return map[string]any{"attempts": attempts, "final": final, "stopped": p.Stopped}
}

// writeMermaid prints a Gantt chart like the seed's.
func writeMermaid(e env, p refresh.Plan, loc *time.Location) {
	w := e.stdout
	ts := func(t time.Time) string { return t.In(loc).Format("2006-01-02T15:04:05") }
	fmt.Fprintln(w, "gantt")
	fmt.Fprintf(w, "    title %d attempt(s): %s\n", len(p.Attempts), strings.ReplaceAll(p.Stopped, ":", " -"))
	fmt.Fprintln(w, "    dateFormat YYYY-MM-DDTHH:mm:ss")
	fmt.Fprintln(w, "    axisFormat %H:%M")
	for i, a := range p.Attempts {
		name := "Refresh"
		if a.No > 1 {
			name = fmt.Sprintf("Retry %d", a.No-1)
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
		fmt.Fprintln(e.stdout, "- "+line)
	}
	if set["policy"] || len(pos) == 1 {
		b, _ := json.Marshal(json.RawMessage(pol.JSON()))
		fmt.Fprintf(e.stdout, "# policy %s\n", b)
	}
	return nil
}
