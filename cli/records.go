package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/schedule"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

func runMigrate(ctx context.Context, e env, args []string) error {
	var cfg Config
	fs := flagSet(e, "migrate", "migrate [flags]", &cfg)
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	// Not withStore: migrate is what brings the schema up to date.
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return missingDatabase(err, cfg.DatabaseURL)
	}
	defer st.Close()
	applied, err := st.Migrate(ctx)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(e.stdout, "database schema is up to date")
	}
	for _, m := range applied {
		fmt.Fprintf(e.stdout, "applied migration %s\n", m.Name)
	}
	return nil
}

// defFlags are the flags that set a record's definition and policy.
type defFlags struct {
	inputURL, schedule, timeout, retries, onExhausted, giveUpAfter, refreshAt, policy string
	strategy, expr, upstream                                                          string
	align, anyScheme                                                                  bool
}

// register registers the policy flags (add, update, plan, explain).
func (d *defFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.schedule, "schedule", "", "RFC 5545 schedule `TEXT`: DTSTART and RRULE lines (a literal \\n between them works); empty: one-off")
	fs.StringVar(&d.timeout, "timeout", "", "how long one attempt may run, `D`: 90s, PT5M, \"10 minutes\"; from 1s to 7 days (default 1h)")
	fs.StringVar(&d.retries, "retries", "", "delays after failures 1, 2, ... (`D,D,...`): 0,1m,5m (default 0,1m,5m,15m,30m,1h); empty for none")
	fs.BoolVar(&d.align, "align", true, "keep retries aligned with the schedule")
	fs.StringVar(&d.onExhausted, "on-exhausted", "", "when retries run out: `disable|wait_next` (default disable)")
	fs.StringVar(&d.giveUpAfter, "give-up-after", "", "disable after failing this long (`D`) without a success, e.g. \"1 week\"; up to 10 years (default never)")
	fs.StringVar(&d.policy, "policy", "", "whole policy as JSON, or a file holding it (`JSON|FILE`); other flags override its fields")
	fs.StringVar(&d.strategy, "strategy", "", "retry strategy `S`: JSON, or e.g. \"exponential initial=5s max=5m max_attempts=7 jitter=full\" (see README)")
	fs.StringVar(&d.expr, "expr", "", "policy as sentences (\"Allow 1 hour to complete\\nOn the first failure, retry immediately\"), or a file holding them (`TEXT|FILE`)")
}

// registerRecord registers the flags of a stored record besides its
// policy (add, update).
func (d *defFlags) registerRecord(fs *flag.FlagSet) {
	fs.StringVar(&d.inputURL, "input-url", "", "what the worker refreshes from: an absolute `URL`")
	fs.BoolVar(&d.anyScheme, "any-scheme", false, "accept an --input-url of any scheme (ftp://, s3://, ...): your workers handle it; the reference worker fetches only http:// and https://")
	fs.StringVar(&d.refreshAt, "refresh-at", "now", "first refresh: an RFC 3339 time (`T`) or now")
	fs.StringVar(&d.upstream, "upstream", "", "the upstream whose breaker and limits the record obeys (`NAME`; default: the host of --input-url; empty: back to it)")
}

// apply sets on def and pol what the flags that were given say. set names
// the flags given on the command line. Every value is validated before
// anything is written.
func (d *defFlags) apply(set map[string]bool, def *store.Definition, pol *refresh.Policy, now time.Time) error {
	if set["input-url"] {
		if err := refresh.ValidateInputURL(d.inputURL); err != nil {
			return usageError{err.Error()}
		}
		if err := checkScheme(d.inputURL, d.anyScheme); err != nil {
			return err
		}
		def.InputURL = d.inputURL
	}
	if set["upstream"] {
		if err := validUpstreamName(d.upstream, true); err != nil {
			return usagef("--upstream: %v", err)
		}
		def.Upstream = d.upstream
		if def.Upstream == "" {
			def.Upstream = upstream.Name(def.InputURL)
		}
	}
	if set["schedule"] {
		s, err := schedule.Parse(d.schedule, now)
		if err == nil {
			err = s.Validate()
		}
		if err != nil {
			return usagef("--schedule: %v", err)
		}
		def.Schedule = s.String()
	}
	if set["policy"] {
		text, err := textOrFile(d.policy, func(s string) bool { return strings.HasPrefix(strings.TrimSpace(s), "{") })
		if err != nil {
			return usagef("--policy: expected a JSON object or a file holding one: %v", err)
		}
		p, err := refresh.ParsePolicy([]byte(text), pol)
		if err != nil {
			return usagef("--policy: %v", err)
		}
		*pol = p
	}
	if set["expr"] {
		text, err := textOrFile(d.expr, func(s string) bool { return strings.Contains(s, "\n") || strings.Contains(s, " ") })
		if err != nil {
			return usagef("--expr: %v", err)
		}
		r, err := refresh.ParseReadable(text, pol)
		if err != nil {
			return usagef("--expr: %v", err)
		}
		*pol = r.Policy
		if r.Schedule != "" && !set["schedule"] {
			s, err := schedule.Parse(r.Schedule, now)
			if err == nil {
				err = s.Validate()
			}
			if err != nil {
				return usagef("--expr: %v", err)
			}
			def.Schedule = s.String()
		}
	}
	if set["retries"] && set["strategy"] {
		return usagef("give --retries (a list of delays) or --strategy, not both")
	}
	if set["strategy"] {
		st, err := refresh.ParseStrategy(d.strategy)
		if err != nil {
			return usagef("--strategy: %v", err)
		}
		pol.SetStrategy(st)
	}
	if set["timeout"] {
		t, err := refresh.TimeoutRange.Parse(d.timeout)
		if err != nil {
			return usagef("--timeout: %v", err)
		}
		pol.Timeout = refresh.Duration(t)
	}
	if set["retries"] {
		r, err := refresh.ParseDelays(d.retries)
		if err != nil {
			return usagef("--retries: %v", err)
		}
		pol.SetStrategy(refresh.ListStrategy(r...))
	}
	if set["align"] {
		pol.Align = d.align
	}
	if set["on-exhausted"] {
		pol.OnExhausted = refresh.OnExhausted(d.onExhausted)
	}
	if set["give-up-after"] {
		g, err := refresh.GiveUpRange.Parse(d.giveUpAfter)
		if err != nil {
			return usagef("--give-up-after: %v", err)
		}
		pol.GiveUpAfter = refresh.Duration(g)
	}
	if err := pol.Validate(); err != nil {
		return usageError{err.Error()}
	}
	def.Policy = pol.JSON()
	return nil
}

// checkScheme refuses an input URL that the reference worker cannot fetch
// (it speaks http and https only), unless anyScheme says the workers
// handle it.
func checkScheme(rawURL string, anyScheme bool) error {
	scheme, _, _ := strings.Cut(rawURL, ":")
	switch strings.ToLower(scheme) {
	case "http", "https":
		return nil
	}
	if anyScheme {
		return nil
	}
	return usagef("--input-url %q: the reference worker (bigtables worker) fetches only http:// and https:// URLs; add --any-scheme if your workers handle %s://", rawURL, scheme)
}

// textOrFile returns s if isText(s), else the contents of the file s names.
func textOrFile(s string, isText func(string) bool) (string, error) {
	if isText(s) {
		return s, nil
	}
	b, err := os.ReadFile(s)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// refreshTime reads --refresh-at: nil for now.
func (d *defFlags) refreshTime() (*time.Time, error) {
	if d.refreshAt == "" || d.refreshAt == "now" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, d.refreshAt)
	if err != nil {
		return nil, usagef("--refresh-at %q: expected an RFC 3339 time (e.g. 2024-03-04T06:00:00Z) or now", d.refreshAt)
	}
	return &t, nil
}

func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// defaultPolicy is the configured default policy: BIGTABLES_DEFAULT_POLICY
// (JSON) over the built-in default.
func defaultPolicy(e env) (refresh.Policy, error) {
	p := refresh.DefaultPolicy()
	if text := e.getenv("BIGTABLES_DEFAULT_POLICY"); text != "" {
		var err error
		if p, err = refresh.ParsePolicy([]byte(text), &p); err != nil {
			return refresh.Policy{}, usagef("BIGTABLES_DEFAULT_POLICY: %v", err)
		}
	}
	return p, nil
}

func runAdd(ctx context.Context, e env, args []string) error {
	var cfg Config
	var d defFlags
	var uid string
	fs := flagSet(e, "add", "add --uid U --input-url URL [flags]", &cfg)
	fs.StringVar(&uid, "uid", "", "the record's id, `U` (required)")
	d.registerRecord(fs)
	d.register(fs)
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	set := setFlags(fs)
	if err := refresh.ValidateUID(uid); err != nil {
		return usagef("--uid: %v", err)
	}
	if !set["input-url"] {
		return usagef("--input-url is required")
	}
	pol, err := defaultPolicy(e)
	if err != nil {
		return err
	}
	var def store.Definition
	if err := d.apply(set, &def, &pol, time.Now()); err != nil {
		return err
	}
	at, err := d.refreshTime()
	if err != nil {
		return err
	}
	return cfg.withStore(ctx, func(st *store.Store) error {
		row, err := st.Add(ctx, uid, def, at)
		if err != nil {
			return err
		}
		return writeJSON(e, recordJSON(row, nil))
	})
}

func runUpdate(ctx context.Context, e env, args []string) error {
	var cfg Config
	var d defFlags
	fs := flagSet(e, "update", "update U [flags]", &cfg)
	d.registerRecord(fs)
	d.register(fs)
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	log, err := cfg.logger(e)
	if err != nil {
		return err
	}
	set := setFlags(fs)
	at, err := d.refreshTime()
	if err != nil {
		return err
	}
	var row store.Row
	var cancelled *store.Cancelled
	err = cfg.withStore(ctx, func(st *store.Store) error {
		var err error
		row, cancelled, err = st.Update(ctx, pos[0], func(def *store.Definition) error {
			pol, err := refresh.ParsePolicy(def.Policy, nil)
			if err != nil {
				// The stored policy is unreadable: the update may replace it.
				if pol, err = defaultPolicy(e); err != nil {
					return err
				}
			}
			return d.apply(set, def, &pol, time.Now())
		}, at)
		return err
	})
	var ue usageError
	if errors.As(err, &ue) {
		return ue
	}
	if err != nil {
		return err
	}
	if cancelled != nil {
		// Tell the cancelled attempt's worker to stop (best effort: its
		// results are stale anyway).
		e.routeRedisLog(log)
		err := cfg.withQueue(ctx, func(q *queue.Queue) error {
			return q.Cancel(ctx, map[string]time.Time{cancelled.AttemptUID: cancelled.DeadlineAt})
		})
		if err != nil {
			log.Warn("could not tell the worker of the cancelled attempt to stop; it stops at its deadline", "attempt_uid", cancelled.AttemptUID, "err", err)
		}
	}
	return writeJSON(e, recordJSON(row, nil))
}

func runShow(ctx context.Context, e env, args []string) error {
	var cfg Config
	var history int
	fs := flagSet(e, "show", "show U [--history N]", &cfg)
	fs.IntVar(&history, "history", 0, "also print the last `N` finished attempts")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if history < 0 || history > 10_000 {
		return usagef("--history %d: expected 0 to 10000", history)
	}
	return cfg.withStore(ctx, func(st *store.Store) error {
		row, err := st.Get(ctx, pos[0])
		if err != nil {
			return err
		}
		var h []store.Attempt
		if history > 0 {
			if h, err = st.History(ctx, row.UID, history); err != nil {
				return err
			}
			if h == nil {
				h = []store.Attempt{}
			}
		}
		return writeJSON(e, recordJSON(row, h))
	})
}

func runList(ctx context.Context, e env, args []string) error {
	var cfg Config
	var disabled, asJSON bool
	var limit int
	var opt store.ListOptions
	var phase string
	fs := flagSet(e, "list", "list [--phase P] [--failing] [--overdue] [--disabled] [--json] [--limit N] [--after UID]", &cfg)
	fs.BoolVar(&disabled, "disabled", false, "only disabled records")
	fs.StringVar(&phase, "phase", "", "only records in this phase: waiting, running, retrying, disabled, paused, idle or parked")
	fs.BoolVar(&opt.Failing, "failing", false, "only records that failed since their last success")
	fs.BoolVar(&opt.Overdue, "overdue", false, "only records due and not started yet")
	fs.StringVar(&opt.After, "after", "", "start after this uid (the next page: the last uid printed)")
	fs.BoolVar(&asJSON, "json", false, "print a JSON array of records, as show does")
	fs.IntVar(&limit, "limit", 1000, "at most this many records per page, in uid order (1 to 100000)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if limit < 1 || limit > 100_000 {
		return usagef("--limit %d: expected 1 to 100000", limit)
	}
	if phase != "" {
		known := false
		for _, p := range store.Phases {
			known = known || string(p) == phase
		}
		if !known {
			return usagef("--phase %q: expected waiting, running, retrying, disabled, paused, idle or parked", phase)
		}
	}
	opt.DisabledOnly, opt.Phase, opt.Limit = disabled, refresh.Phase(phase), limit
	var rows []store.Row
	err := cfg.withStore(ctx, func(st *store.Store) error {
		var err error
		rows, err = st.List(ctx, opt)
		return err
	})
	if err != nil {
		return err
	}
	if len(rows) == limit {
		fmt.Fprintf(e.stderr, "more records may follow: --after %s\n", rows[len(rows)-1].UID)
	}
	if asJSON {
		out := make([]recordView, 0, len(rows))
		for _, r := range rows {
			out = append(out, recordJSON(r, nil))
		}
		return writeJSON(e, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UID\tSTATE\tATTEMPT\tREFRESH_AT\tINPUT_URL\tREASON")
	for _, r := range rows {
		at := "-"
		if !r.RefreshAt.IsZero() {
			at = r.RefreshAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.UID, r.Phase(), r.AttemptNo, at, r.InputURL, r.DisabledReason)
	}
	return tw.Flush()
}

// timeLayout is RFC 3339 with microseconds, PostgreSQL's precision.
const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

// jsonTime is a time as show prints it: nil (null) for a zero time (NULL).
func jsonTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(timeLayout)
	return &s
}

// jsonText is a text column as show prints it: nil (null) when absent.
func jsonText(s string, present bool) *string {
	if !present {
		return nil
	}
	return &s
}

// recordView is a record as add, update, show and list --json print it:
// the table's columns, in the table's order, with their names; NULLs are
// null.
type recordView struct {
	UID            string          `json:"uid"`
	InputURL       string          `json:"input_url"`
	Schedule       string          `json:"schedule"`
	Policy         json.RawMessage `json:"policy"`
	RefreshAt      *string         `json:"refresh_at"`
	AttemptUID     *string         `json:"attempt_uid"`
	AttemptNo      int             `json:"attempt_no"`
	StartedAt      *string         `json:"started_at"`
	DeadlineAt     *string         `json:"deadline_at"`
	FailingSince   *string         `json:"failing_since"`
	Disabled       bool            `json:"disabled_until_update"`
	DisabledReason *string         `json:"disabled_reason"`
	StatusMessage  *string         `json:"status_message"`
	CreatedAt      *string         `json:"created_at"`
	UpdatedAt      *string         `json:"updated_at"`
	Paused         bool            `json:"paused"`
	Upstream       string          `json:"upstream"`
	// ParkedAt is when an open breaker of its upstream parked the record.
	ParkedAt *string `json:"parked_at,omitempty"`
	// Phase is not a column: what list and the dashboard show, read from
	// the columns (refresh.State.Phase): waiting, running, retrying,
	// disabled, paused, idle or parked.
	Phase refresh.Phase `json:"phase"`
	// History is there only when asked for (show --history), [] if empty.
	History *[]attemptView `json:"history,omitempty"`
}

// attemptView is one finished attempt of show --history.
type attemptView struct {
	AttemptUID string        `json:"attempt_uid"`
	AttemptNo  int           `json:"attempt_no"`
	StartedAt  *string       `json:"started_at"`
	FinishedAt *string       `json:"finished_at"`
	Outcome    store.Outcome `json:"outcome"`
	Message    string        `json:"message"`
	Decision   string        `json:"decision"`
}

// recordJSON renders a row, with its history when history is not nil.
func recordJSON(r store.Row, history []store.Attempt) recordView {
	v := recordView{
		UID:            r.UID,
		InputURL:       r.InputURL,
		Schedule:       r.Schedule,
		Policy:         json.RawMessage(r.Policy),
		RefreshAt:      jsonTime(r.RefreshAt),
		AttemptUID:     jsonText(r.AttemptUID, r.AttemptUID != ""),
		AttemptNo:      r.AttemptNo,
		StartedAt:      jsonTime(r.StartedAt),
		DeadlineAt:     jsonTime(r.DeadlineAt),
		FailingSince:   jsonTime(r.FailingSince),
		Disabled:       r.Disabled,
		DisabledReason: jsonText(r.DisabledReason, r.Disabled),
		StatusMessage:  jsonText(r.StatusMessage, r.StatusMessage != ""),
		CreatedAt:      jsonTime(r.CreatedAt),
		UpdatedAt:      jsonTime(r.UpdatedAt),
		Paused:         r.Paused,
		Upstream:       r.Upstream,
		ParkedAt:       jsonTime(r.ParkedAt),
		Phase:          r.Phase(),
	}
	if history != nil {
		h := make([]attemptView, 0, len(history))
		for _, a := range history {
			h = append(h, attemptView{AttemptUID: a.AttemptUID, AttemptNo: a.AttemptNo, StartedAt: jsonTime(a.StartedAt),
				FinishedAt: jsonTime(a.FinishedAt), Outcome: a.Outcome, Message: a.Message, Decision: a.Decision})
		}
		v.History = &h
	}
	return v
}

func writeJSON(e env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
