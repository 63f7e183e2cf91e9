package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/upstream"
	"github.com/lib/pq"
)

// upstreamOf is the upstream a definition names: its own, or the host of
// its input URL (docs/design.md, U1).
func upstreamOf(d Definition) string {
	if d.Upstream != "" {
		return d.Upstream
	}
	return upstream.Name(d.InputURL)
}

// followUpstream is the upstream of an edited definition: the one the edit
// set, else the host of the new input URL when the old upstream was the
// host of the old one (a default follows its URL), else the old name.
func followUpstream(before, after Definition) string {
	if after.Upstream != before.Upstream && after.Upstream != "" {
		return after.Upstream
	}
	if before.Upstream == "" || before.Upstream == upstream.Name(before.InputURL) {
		return upstream.Name(after.InputURL)
	}
	return before.Upstream
}

// upstreamColumns are an upstream row's state and configuration.
const upstreamColumns = `name, config, configured, breaker, failures, window_start, window_attempts, window_failures,
	prev_attempts, prev_failures, opens, next_probe, probes_left, tokens, tokens_at, releasing, released_at,
	blocked_until, changed_at`

type dbUpstream struct {
	Name           string       `db:"name"`
	Config         []byte       `db:"config"`
	Configured     bool         `db:"configured"`
	Breaker        string       `db:"breaker"`
	Failures       int          `db:"failures"`
	WindowStart    sql.NullTime `db:"window_start"`
	WindowAttempts int          `db:"window_attempts"`
	WindowFailures int          `db:"window_failures"`
	PrevAttempts   int          `db:"prev_attempts"`
	PrevFailures   int          `db:"prev_failures"`
	Opens          int          `db:"opens"`
	NextProbe      sql.NullTime `db:"next_probe"`
	ProbesLeft     int          `db:"probes_left"`
	Tokens         float64      `db:"tokens"`
	TokensAt       sql.NullTime `db:"tokens_at"`
	Releasing      bool         `db:"releasing"`
	ReleasedAt     sql.NullTime `db:"released_at"`
	BlockedUntil   sql.NullTime `db:"blocked_until"`
	ChangedAt      sql.NullTime `db:"changed_at"`
	// Only in the operators' list.
	Parked   int64 `db:"parked"`
	InFlight int64 `db:"in_flight"`
}

func (d dbUpstream) upstream() (*upstream.Upstream, error) {
	cfg, err := upstream.ParseConfig(d.Config)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: stored %w", d.Name, err)
	}
	return &upstream.Upstream{Name: d.Name, Config: cfg, InFlight: int(d.InFlight), State: upstream.State{
		Breaker: upstream.BreakerState(d.Breaker), Failures: d.Failures, WindowStart: nullTime(d.WindowStart),
		Attempts: d.WindowAttempts, FailuresInWindow: d.WindowFailures, PrevAttempts: d.PrevAttempts, PrevFailures: d.PrevFailures,
		Opens: d.Opens, NextProbe: nullTime(d.NextProbe), ProbesLeft: d.ProbesLeft, Tokens: d.Tokens, TokensAt: nullTime(d.TokensAt),
		Releasing: d.Releasing, ReleasedAt: nullTime(d.ReleasedAt), BlockedUntil: nullTime(d.BlockedUntil), ChangedAt: nullTime(d.ChangedAt),
	}}, nil
}

// LockUpstreams locks the upstream rows with the given names (creating
// those that have none, with the default configuration) in name order,
// after the records' rows every caller has locked first, so two
// transactions cannot deadlock on them. Each upstream's InFlight is the
// number of attempts running for it when it has a max_in_flight (0
// otherwise: nothing reads it). Empty names are left out. The lock order
// is docs/design.md, U2.
func (tx *Tx) LockUpstreams(ctx context.Context, names []string) (map[string]*upstream.Upstream, error) {
	seen := map[string]bool{}
	var sorted []string
	for _, n := range names {
		if n != "" && !seen[n] {
			seen[n] = true
			sorted = append(sorted, n)
		}
	}
	out := make(map[string]*upstream.Upstream, len(sorted))
	if len(sorted) == 0 {
		return out, nil
	}
	sort.Strings(sorted)
	if _, err := tx.tx.ExecContext(ctx, `INSERT INTO upstreams (name, updated_at)
		SELECT n, $2 FROM unnest($1::text[]) AS n ORDER BY n ON CONFLICT (name) DO NOTHING`, pq.StringArray(sorted), tx.now); err != nil {
		return nil, fmt.Errorf("lock upstreams: create rows: %w", err)
	}
	var rows []dbUpstream
	if err := tx.tx.SelectContext(ctx, &rows, "SELECT "+upstreamColumns+
		" FROM upstreams WHERE name = ANY($1) ORDER BY name FOR UPDATE", pq.StringArray(sorted)); err != nil {
		return nil, fmt.Errorf("lock upstreams: %w", err)
	}
	var capped []string
	for _, r := range rows {
		u, err := r.upstream()
		if err != nil {
			return nil, fmt.Errorf("lock upstreams: %w", err)
		}
		out[u.Name] = u
		if u.Config.MaxInFlight > 0 {
			capped = append(capped, u.Name)
		}
	}
	if len(capped) > 0 {
		var counts []struct {
			Name string `db:"upstream"`
			N    int    `db:"n"`
		}
		if err := tx.tx.SelectContext(ctx, &counts, `SELECT upstream, count(*) AS n FROM bigtables
			WHERE attempt_uid IS NOT NULL AND upstream = ANY($1) GROUP BY upstream`, pq.StringArray(capped)); err != nil {
			return nil, fmt.Errorf("count attempts in flight: %w", err)
		}
		for _, c := range counts {
			out[c.Name].InFlight = c.N
		}
	}
	return out, nil
}

// GuardedUpstreams returns, of the given names, those whose upstream may
// hold a start back or must count it: a breaker that is not closed, a
// release in progress, a max_in_flight or a rate (the generated column
// limited, migration 012). The others (no row, or a closed breaker without
// limits) start every due record and change nothing when they do, so a
// tick need not lock them: it would only serialize the ticks and batches
// of one busy upstream. It reads without locking.
func (tx *Tx) GuardedUpstreams(ctx context.Context, names []string) ([]string, error) {
	var out []string
	if len(names) == 0 {
		return out, nil
	}
	if err := tx.tx.SelectContext(ctx, &out, `SELECT name FROM upstreams WHERE name = ANY($1)
		AND (breaker <> 'closed' OR releasing OR limited)`, pq.StringArray(names)); err != nil {
		return nil, fmt.Errorf("find guarded upstreams: %w", err)
	}
	return out, nil
}

// SaveUpstreams writes the state of upstreams this transaction locked.
func (tx *Tx) SaveUpstreams(ctx context.Context, ups map[string]*upstream.Upstream) error {
	if len(ups) == 0 {
		return nil
	}
	n := len(ups)
	name, breaker := make([]string, 0, n), make([]string, 0, n)
	ints := make([][]int64, 7)  // failures, window_attempts, window_failures, prev_attempts, prev_failures, opens, probes_left
	times := make([][]int64, 6) // window_start, next_probe, tokens_at, released_at, blocked_until, changed_at
	tokens, releasing := make([]float64, 0, n), make([]bool, 0, n)
	for _, u := range ups {
		s := u.State
		name, breaker = append(name, u.Name), append(breaker, string(s.Current()))
		for i, v := range []int{s.Failures, s.Attempts, s.FailuresInWindow, s.PrevAttempts, s.PrevFailures, s.Opens, s.ProbesLeft} {
			ints[i] = append(ints[i], int64(v))
		}
		for i, v := range []time.Time{s.WindowStart, s.NextProbe, s.TokensAt, s.ReleasedAt, s.BlockedUntil, s.ChangedAt} {
			times[i] = append(times[i], micros(v))
		}
		tokens, releasing = append(tokens, s.Tokens), append(releasing, s.Releasing)
	}
	q := `UPDATE upstreams AS u SET breaker = v.breaker, failures = v.failures, window_attempts = v.wa, window_failures = v.wf,
		prev_attempts = v.pa, prev_failures = v.pf, opens = v.opens, probes_left = v.probes,
		window_start = ` + usTime("v.ws") + `, next_probe = ` + usTime("v.np") + `, tokens_at = ` + usTime("v.ta") + `,
		released_at = ` + usTime("v.ra") + `, blocked_until = ` + usTime("v.bu") + `, changed_at = ` + usTime("v.ca") + `,
		tokens = v.tokens, releasing = v.releasing, updated_at = $17
	FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::int[], $6::int[], $7::int[], $8::int[], $9::int[],
		$10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[], $16::float8[], $18::bool[])
		AS v(name, breaker, failures, wa, wf, pa, pf, opens, probes, ws, np, ta, ra, bu, ca, tokens, releasing)
	WHERE u.name = v.name`
	args := []any{pq.StringArray(name), pq.StringArray(breaker)}
	for _, a := range ints {
		args = append(args, pq.Int64Array(a))
	}
	for _, a := range times {
		args = append(args, pq.Int64Array(a))
	}
	args = append(args, pq.Float64Array(tokens), tx.now, pq.BoolArray(releasing))
	if _, err := tx.tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("save %d upstreams: %w", n, err)
	}
	return nil
}

// WakingUpstreams lists (up to limit) the upstreams whose breaker is open
// or half-open or whose parked records are being released: the scheduler
// wakes them at every tick. It reads a partial index of those rows only.
func (tx *Tx) WakingUpstreams(ctx context.Context, limit int) ([]string, error) {
	var names []string
	if err := tx.tx.SelectContext(ctx, &names, `SELECT name FROM upstreams WHERE breaker <> 'closed' OR releasing
		ORDER BY name LIMIT $1`, limit); err != nil {
		return nil, fmt.Errorf("list waking upstreams: %w", err)
	}
	return names, nil
}

// Park marks the given rows (locked by this transaction) parked at the
// transaction's now: they leave the due set, keeping attempt_no and
// refresh_at, until Unpark (docs/design.md, U5).
func (tx *Tx) Park(ctx context.Context, uids []string) error {
	if len(uids) == 0 {
		return nil
	}
	if _, err := tx.tx.ExecContext(ctx, `UPDATE bigtables SET parked_at = $2, updated_at = $2
		WHERE uid = ANY($1) AND parked_at IS NULL`, pq.StringArray(uids), tx.now); err != nil {
		return fmt.Errorf("park %d records: %w", len(uids), err)
	}
	return nil
}

// Unpark releases up to n parked records of the upstream, those due first
// first (skipping rows another transaction holds), and returns how many,
// and whether any is left parked (those skipped included). Paused records
// are passed over and not counted: Resume ends their parking.
// They are due again at once, with their attempt_no and refresh_at. The
// time parked is added to failing_since, so give_up_after (and strategies
// that grow with the time failing) count the record's own failures, not
// the upstream's outage: refresh.Unpark in SQL (docs/design.md, U8, U9).
// The rows are taken after the upstream's lock, with SKIP LOCKED, so the
// release never waits on a record (U2); left reports whether any parked
// row of the upstream remains, so a release ends only when none does.
func (tx *Tx) Unpark(ctx context.Context, name string, n int) (released int, left bool, err error) {
	if n > 0 {
		res, err := tx.tx.ExecContext(ctx, `UPDATE bigtables SET parked_at = NULL, updated_at = $3,
				failing_since = failing_since + greatest($3 - parked_at, interval '0')
			WHERE uid IN (SELECT uid FROM bigtables WHERE upstream = $1 AND parked_at IS NOT NULL AND NOT paused
				ORDER BY refresh_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, name, n, tx.now)
		if err != nil {
			return 0, false, fmt.Errorf("release parked records of %q: %w", name, err)
		}
		got, _ := res.RowsAffected()
		released = int(got)
	}
	if err := tx.tx.GetContext(ctx, &left, `SELECT EXISTS (SELECT 1 FROM bigtables WHERE upstream = $1 AND parked_at IS NOT NULL AND NOT paused)`,
		name); err != nil {
		return 0, false, fmt.Errorf("find parked records of %q: %w", name, err)
	}
	return released, left, nil
}

// SetUpstream stores an upstream's configuration (validated by the caller
// with upstream.Config.Validate), keeping its breaker's state.
func (s *Store) SetUpstream(ctx context.Context, name string, cfg upstream.Config) error {
	if name == "" {
		return fmt.Errorf("set upstream: the name is empty")
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("set upstream %q: %w", name, err)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("set upstream %q: %w", name, err)
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO upstreams (name, config, configured, updated_at)
		VALUES ($1, $2, true, COALESCE($3::timestamptz, now()))
		ON CONFLICT (name) DO UPDATE SET config = EXCLUDED.config, configured = true, updated_at = EXCLUDED.updated_at`,
		name, string(b), s.clockParam())
	if err != nil {
		return fmt.Errorf("set upstream %q: %w", name, err)
	}
	return nil
}

// UpstreamRow is an upstream as operators see it.
type UpstreamRow struct {
	upstream.Upstream
	// Configured is false for upstreams with the default configuration.
	Configured bool
	// Parked counts its parked records.
	Parked int64
	// WindowFailures estimates the failures in the breaker's window.
	WindowFailures int
}

// Upstreams lists the upstreams that have a row (configured, or whose
// breaker counted an attempt), by name, with their parked records and
// attempts in flight.
func (s *Store) Upstreams(ctx context.Context) ([]UpstreamRow, error) {
	var rows []dbUpstream
	err := s.db.SelectContext(ctx, &rows, "SELECT "+upstreamColumns+`,
		(SELECT count(*) FROM bigtables b WHERE b.upstream = u.name AND b.parked_at IS NOT NULL) AS parked,
		(SELECT count(*) FROM bigtables b WHERE b.upstream = u.name AND b.attempt_uid IS NOT NULL) AS in_flight
		FROM upstreams u ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list upstreams: %w", err)
	}
	now, err := s.Now(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]UpstreamRow, 0, len(rows))
	for _, r := range rows {
		u, err := r.upstream()
		if err != nil {
			return nil, fmt.Errorf("list upstreams: %w", err)
		}
		out = append(out, UpstreamRow{Upstream: *u, Configured: r.Configured, Parked: r.Parked, WindowFailures: u.WindowFailures(now)})
	}
	return out, nil
}

// BreakerEvent is the event of an upstream breaker's transition t, with
// the upstream's parked records counted after it (pure: see BreakerEvents).
func BreakerEvent(t upstream.Transition, parked int) Event {
	e := Event{Upstream: t.Upstream, At: t.At, From: string(t.From), To: string(t.To), Why: t.Why, Parked: parked}
	switch t.To {
	case upstream.Open:
		e.Type, e.CoolDown = EventBreakerOpened, t.CoolDown
		if t.CoolDown > 0 && !t.At.IsZero() {
			e.NextProbeAt = t.At.Add(t.CoolDown)
		}
		e.Message = fmt.Sprintf("breaker of upstream %s opened (%s): its due records are parked; probes in %s",
			t.Upstream, t.Why, refresh.FormatDuration(t.CoolDown))
	case upstream.HalfOpen:
		e.Type = EventBreakerHalfOpen
		e.Message = fmt.Sprintf("breaker of upstream %s half-open (%s); %d records parked", t.Upstream, t.Why, parked)
	default:
		e.Type = EventBreakerClosed
		e.Message = fmt.Sprintf("breaker of upstream %s closed (%s)", t.Upstream, t.Why)
		if parked > 0 {
			e.Message += fmt.Sprintf(": its %d parked records are released over time", parked)
		}
	}
	return e
}

// BreakerEvents returns the events of the breakers' transitions this
// transaction made, each with its upstream's parked records counted now
// (after the transaction's parks and releases): the caller writes them with
// WriteEvents in the same transaction, so an event exists exactly when its
// transition committed (README, "Events and webhooks").
func (tx *Tx) BreakerEvents(ctx context.Context, trs []upstream.Transition) ([]Event, error) {
	if len(trs) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(trs))
	for _, t := range trs {
		names = append(names, t.Upstream)
	}
	var counts []struct {
		Name string `db:"upstream"`
		N    int    `db:"n"`
	}
	if err := tx.tx.SelectContext(ctx, &counts, `SELECT upstream, count(*) AS n FROM bigtables
		WHERE parked_at IS NOT NULL AND upstream = ANY($1) GROUP BY upstream`, pq.StringArray(names)); err != nil {
		return nil, fmt.Errorf("count parked records of %d upstreams: %w", len(names), err)
	}
	parked := make(map[string]int, len(counts))
	for _, c := range counts {
		parked[c.Name] = c.N
	}
	out := make([]Event, 0, len(trs))
	for _, t := range trs {
		out = append(out, BreakerEvent(t, parked[t.Upstream]))
	}
	return out, nil
}

// BreakerLog is the message and attributes that log a breaker event (the
// scheduler and the poller log them once their transaction committed).
func (e Event) BreakerLog() (msg string, args []any) {
	args = []any{"upstream", e.Upstream, "from", e.From, "to", e.To, "why", e.Why, "parked", e.Parked}
	if e.Type == EventBreakerOpened {
		args = append(args, "cool_down", refresh.FormatDuration(e.CoolDown), "next_probe_at", e.NextProbeAt)
	}
	return "upstream breaker " + e.To, args
}
