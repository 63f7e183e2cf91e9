// Package store owns bigtables' PostgreSQL schema and every SQL statement:
// versioned migrations embedded in the binary, records and their attempt
// history, and the batched claim and write statements of the scheduler and
// poller. It knows nothing of Redis and decides no transition: the new
// states come from package refresh, computed by the callers, or, for the
// manual save (Update), by refresh.Update under the row's lock.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"time"

	"github.com/bigtables/bigtables/internal/redact"
	"github.com/bigtables/bigtables/refresh"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// SQLSTATE codes the store tells apart
// (https://www.postgresql.org/docs/current/errcodes-appendix.html).
const (
	uniqueViolation    = "23505" // a record with the uid exists
	invalidCatalogName = "3D000" // the database does not exist
	undefinedTable     = "42P01" // the schema has not been migrated yet
)

// pgCode returns the SQLSTATE of a PostgreSQL error anywhere in err's
// chain, or "" for any other error.
func pgCode(err error) string {
	var pe *pq.Error
	if errors.As(err, &pe) {
		return string(pe.Code)
	}
	return ""
}

// Errors callers can test with errors.Is.
var (
	// ErrNotFound means no record has the uid.
	ErrNotFound = errors.New("no such record")
	// ErrExists means a record with the uid already exists.
	ErrExists = errors.New("record already exists")
	// ErrBadURL means Open was given a URL that is not a PostgreSQL URL:
	// retrying cannot help.
	ErrBadURL = errors.New("not a PostgreSQL URL")
)

type badURLError struct{ msg string }

func (e badURLError) Error() string        { return e.msg }
func (e badURLError) Is(target error) bool { return target == ErrBadURL }

// Store is a PostgreSQL connection pool with bigtables' statements.
type Store struct {
	db *sqlx.DB
	// clock, when set, replaces PostgreSQL's now() as the time of every
	// transition and bookkeeping column (see WithClock).
	clock func() time.Time
}

// WithClock returns a Store on the same pool whose transactions take their
// now from clock instead of PostgreSQL's now(): tests move time forward
// instead of sleeping past a deadline. Production code leaves it unset, so
// every process shares the database's clock. Closing either Store closes
// the pool.
func (s *Store) WithClock(clock func() time.Time) *Store {
	c := *s
	c.clock = clock
	return &c
}

// clockParam is the injected time as a query parameter, or nil for the
// database's own: statements read it as COALESCE($n::timestamptz, now()).
func (s *Store) clockParam() any {
	if s.clock == nil {
		return nil
	}
	return s.clockNow()
}

// clockNow reads the injected clock at PostgreSQL's precision.
func (s *Store) clockNow() time.Time {
	return s.clock().UTC().Truncate(time.Microsecond)
}

// Open connects to PostgreSQL. A URL without connect_timeout gets 5 seconds,
// because lib/pq's dialling ignores the context. Errors never contain the
// password.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	dsn, err := withConnectTimeout(rawURL)
	if err != nil {
		return nil, err
	}
	db, err := sqlx.Open("postgres", dsn)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", redact.URL(rawURL), err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to database %s: %w", redact.URL(rawURL), err)
	}
	return &Store{db: db}, nil
}

// Close closes the pool.
func (s *Store) Close() error { return s.db.Close() }

func withConnectTimeout(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", badURLError{fmt.Sprintf("database URL %s: expected postgres://user:password@host:port/dbname?sslmode=disable", redact.URL(rawURL))}
	}
	q := u.Query()
	if q.Get("connect_timeout") == "" {
		q.Set("connect_timeout", "5")
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// Definition is what a person sets on a record.
type Definition struct {
	InputURL string
	// Schedule is canonical schedule text ("" for one-off records).
	Schedule string
	// Policy is the policy's canonical JSON.
	Policy []byte
	// Upstream names the upstream whose breaker and limits the record
	// obeys; "" means the host of InputURL (upstream.Name).
	Upstream string
}

// Row is one record: its definition, its refresh state and bookkeeping.
type Row struct {
	UID string
	Definition
	refresh.State
	StatusMessage string
	// StatusAt is when the status message was drained from the output list
	// (Redis's time); zero if unknown. An older status is not applied over it.
	StatusAt time.Time
	// PushToken is the token of the push that carries the running
	// attempt's job (the tick's, see queue.PushJobsOnceFor); "" when no
	// attempt runs or it was started without one. Save writes it only
	// while an attempt runs.
	PushToken string
	// ParkedAt is when the record was parked by its upstream's open
	// breaker; zero when it is not parked.
	ParkedAt time.Time
	// CreatedAt and UpdatedAt are zero in rows read by ClaimDue and Lock.
	CreatedAt time.Time
	UpdatedAt time.Time

	// tid is the row version's ctid when the row was read under a lock in
	// a transaction (ClaimDue, Lock): Save finds it by ctid, without a
	// second index lookup. The lock keeps the ctid valid until the write.
	tid string
}

// dbRow is Row as PostgreSQL returns it.
type dbRow struct {
	UID            string         `db:"uid"`
	InputURL       string         `db:"input_url"`
	Schedule       string         `db:"schedule"`
	Policy         []byte         `db:"policy"`
	RefreshAt      sql.NullTime   `db:"refresh_at"`
	AttemptUID     sql.NullString `db:"attempt_uid"`
	AttemptNo      int            `db:"attempt_no"`
	StartedAt      sql.NullTime   `db:"started_at"`
	DeadlineAt     sql.NullTime   `db:"deadline_at"`
	FailingSince   sql.NullTime   `db:"failing_since"`
	LastDelayMs    int64          `db:"last_delay_ms"`
	Disabled       bool           `db:"disabled_until_update"`
	DisabledReason sql.NullString `db:"disabled_reason"`
	StatusMessage  sql.NullString `db:"status_message"`
	StatusAt       sql.NullTime   `db:"status_at"`
	Paused         bool           `db:"paused"`
	PushToken      sql.NullString `db:"push_token"`
	Upstream       string         `db:"upstream"`
	ParkedAt       sql.NullTime   `db:"parked_at"`
	CreatedAt      sql.NullTime   `db:"created_at"` // not in locked reads
	UpdatedAt      sql.NullTime   `db:"updated_at"` // not in locked reads
	Tid            string         `db:"tid"`        // only in locked reads
}

// stateColumns are what a transition needs: definition and state.
const stateColumns = `uid, input_url, schedule, policy, refresh_at, attempt_uid, attempt_no, started_at,
	deadline_at, failing_since, last_delay_ms, disabled_until_update, disabled_reason, status_message, status_at, paused, push_token, upstream, parked_at`

// rowColumns are the whole record.
const rowColumns = stateColumns + `, created_at, updated_at`

// lockedColumns are read under a lock on the hot paths (ClaimDue, Lock):
// stateColumns plus the version's ctid, for Save; the bookkeeping times are
// left out (two timestamps fewer to send and parse per row).
const lockedColumns = stateColumns + `, ctid::text AS tid`

func nullTime(t sql.NullTime) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

func (r dbRow) row() Row {
	return Row{
		UID:        r.UID,
		Definition: Definition{InputURL: r.InputURL, Schedule: r.Schedule, Policy: r.Policy, Upstream: r.Upstream},
		State: refresh.State{
			RefreshAt:      nullTime(r.RefreshAt),
			AttemptUID:     r.AttemptUID.String,
			AttemptNo:      r.AttemptNo,
			StartedAt:      nullTime(r.StartedAt),
			DeadlineAt:     nullTime(r.DeadlineAt),
			FailingSince:   nullTime(r.FailingSince),
			LastDelay:      time.Duration(r.LastDelayMs) * time.Millisecond,
			Disabled:       r.Disabled,
			DisabledReason: r.DisabledReason.String,
			Paused:         r.Paused,
			Parked:         r.ParkedAt.Valid,
		},
		ParkedAt:      nullTime(r.ParkedAt),
		StatusMessage: r.StatusMessage.String,
		StatusAt:      nullTime(r.StatusAt),
		PushToken:     r.PushToken.String,
		CreatedAt:     nullTime(r.CreatedAt),
		UpdatedAt:     nullTime(r.UpdatedAt),
		tid:           r.Tid,
	}
}

// scanRows reads rows; capHint is how many are expected (batches are large,
// and growing a slice of rows by appending dominated the poller's garbage).
func scanRows(rows *sqlx.Rows, capHint int) ([]Row, error) {
	defer rows.Close()
	out := make([]Row, 0, capHint)
	var r dbRow
	for rows.Next() {
		r = dbRow{}
		if err := rows.StructScan(&r); err != nil {
			return nil, err
		}
		out = append(out, r.row())
	}
	return out, rows.Err()
}

// micros renders a time for a bigint[] parameter read back with usTime:
// microseconds since the Unix epoch, -1 for NULL. Integers cost PostgreSQL
// far less to read than timestamp text, which matters in 1,000-row batches.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return -1
	}
	return t.UnixMicro()
}

// orNull returns v, or nil (sent as a NULL array) when every value is the
// column's zero (-1 for times): see saveStates.
func orNull[T comparable](v []T, zero T) []T {
	for _, x := range v {
		if x != zero {
			return v
		}
	}
	return nil
}

// usTime is the SQL that turns a micros value back into a timestamptz.
func usTime(col string) string {
	return "CASE WHEN " + col + " < 0 THEN NULL ELSE 'epoch'::timestamptz + " + col + " * interval '1 microsecond' END"
}

// Now returns the database's clock, the one clock every process agrees on
// (or the injected clock, see WithClock).
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if s.clock != nil {
		return s.clockNow(), nil
	}
	var now time.Time
	if err := s.db.GetContext(ctx, &now, "SELECT now()"); err != nil {
		return time.Time{}, fmt.Errorf("read database clock: %w", err)
	}
	return now.UTC(), nil
}

const insertRecord = `
INSERT INTO bigtables (uid, input_url, schedule, policy, refresh_at, created_at, updated_at, upstream)
VALUES ($1, $2, $3, $4, COALESCE($5::timestamptz, $6::timestamptz, now()), COALESCE($6::timestamptz, now()), COALESCE($6::timestamptz, now()), $7)
RETURNING ` + rowColumns

// Add creates a record. refreshAt nil means now (the database's clock); a
// zero time means nothing planned.
func (s *Store) Add(ctx context.Context, uid string, def Definition, refreshAt *time.Time) (Row, error) {
	var at any
	if refreshAt != nil {
		if refreshAt.IsZero() {
			return Row{}, errors.New("add record: refresh_at must be a time or now")
		}
		at = refreshAt.UTC()
	}
	var r dbRow
	err := s.db.GetContext(ctx, &r, insertRecord, uid, def.InputURL, def.Schedule, string(def.Policy), at, s.clockParam(), upstreamOf(def))
	if err != nil {
		if pgCode(err) == uniqueViolation {
			return Row{}, fmt.Errorf("add record %q: %w", uid, ErrExists)
		}
		return Row{}, fmt.Errorf("add record %q: %w", uid, err)
	}
	return r.row(), nil
}

// Get returns the record with the uid.
func (s *Store) Get(ctx context.Context, uid string) (Row, error) {
	var r dbRow
	err := s.db.GetContext(ctx, &r, "SELECT "+rowColumns+" FROM bigtables WHERE uid = $1", uid)
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, fmt.Errorf("get record %q: %w", uid, ErrNotFound)
	}
	if err != nil {
		return Row{}, fmt.Errorf("get record %q: %w", uid, err)
	}
	return r.row(), nil
}

// ListOptions filter List; the filters given all apply.
type ListOptions struct {
	DisabledOnly bool
	// Phase keeps the records in this phase (refresh.State.Phase); "" any.
	Phase refresh.Phase
	// Failing keeps the records that failed since their last success.
	Failing bool
	// Overdue keeps the records due (refresh_at passed) and not started:
	// waiting for a scheduler.
	Overdue bool
	// After returns records whose uid sorts after it (for paging).
	After string
	// Limit caps the rows returned; 0 means 1000.
	Limit int
}

// List returns records in uid order.
func (s *Store) List(ctx context.Context, opt ListOptions) ([]Row, error) {
	if opt.Limit <= 0 {
		opt.Limit = 1000
	}
	q := "SELECT " + rowColumns + " FROM bigtables WHERE uid > $1"
	if opt.DisabledOnly {
		q += " AND disabled_until_update"
	}
	if opt.Phase != "" {
		pred, ok := phasePredicate[opt.Phase]
		if !ok {
			return nil, fmt.Errorf("list records: unknown phase %q", opt.Phase)
		}
		q += " AND " + pred
	}
	if opt.Failing {
		q += " AND failing_since IS NOT NULL"
	}
	args := []any{opt.After, opt.Limit}
	if opt.Overdue {
		q += " AND " + duePredicate + " AND refresh_at <= COALESCE($3::timestamptz, now())"
		args = append(args, s.clockParam())
	}
	q += " ORDER BY uid LIMIT $2"
	rows, err := s.db.QueryxContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	out, err := scanRows(rows, opt.Limit)
	if err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	return out, nil
}

// Cancelled is the running attempt a manual update cancelled.
type Cancelled struct {
	AttemptUID string
	DeadlineAt time.Time
}

// Update is the manual save of a record by a person. Under the row's lock it
// lets edit change the definition (an error from edit writes nothing), then
// applies refresh.Update: the record is enabled again, attempt_no reset, any
// running attempt cancelled (recorded in the history as "cancelled", and
// returned so its worker can be told), and refresh_at set to refreshAt, or
// now when nil. It returns the record as written.
func (s *Store) Update(ctx context.Context, uid string, edit func(*Definition) error, refreshAt *time.Time) (Row, *Cancelled, error) {
	var out Row
	var gone *Cancelled
	err := s.InTx(ctx, func(tx *Tx) error {
		rows, err := tx.Lock(ctx, []string{uid})
		if err != nil {
			return err
		}
		r, ok := rows[uid]
		if !ok {
			return ErrNotFound
		}
		before := r.Definition
		if err := edit(&r.Definition); err != nil {
			return err
		}
		r.Upstream = followUpstream(before, r.Definition)
		old := r.State
		var cancelled string
		r.State, cancelled = refresh.Update(r.State, tx.Now())
		if refreshAt != nil {
			r.RefreshAt = refreshAt.UTC().Truncate(time.Microsecond) // as PostgreSQL stores it
		}
		if cancelled != "" {
			gone = &Cancelled{AttemptUID: cancelled, DeadlineAt: old.DeadlineAt}
			err := tx.RecordAttempts(ctx, []Attempt{Ended(uid, old, tx.Now(), OutcomeCancelled, "cancelled by a manual update", "")})
			if err != nil {
				return err
			}
		}
		// The definition's write moves the row to a new version: Save
		// finds it by the ctid returned here.
		// It also ends a parking (refresh.Update cleared Parked).
		const q = `UPDATE bigtables SET input_url = $2, schedule = $3, policy = $4, upstream = $5, parked_at = NULL
			WHERE uid = $1 RETURNING ctid::text, created_at`
		r.ParkedAt = time.Time{}
		if err := tx.tx.QueryRowContext(ctx, q, uid, r.InputURL, r.Schedule, string(r.Policy), r.Upstream).Scan(&r.tid, &r.CreatedAt); err != nil {
			return fmt.Errorf("write definition: %w", err)
		}
		r.CreatedAt = r.CreatedAt.UTC()
		if err := tx.Save(ctx, []Row{r}); err != nil {
			return err
		}
		if old.Disabled {
			ev := Event{Type: EventReenabled, UID: uid, Reason: old.DisabledReason, Attempts: old.AttemptNo, FailingSince: old.FailingSince}
			if err := tx.WriteEvents(ctx, []Event{ev}); err != nil {
				return err
			}
		}
		r.UpdatedAt = tx.Now() // what Save wrote
		out = r
		return nil
	})
	if err != nil {
		return Row{}, nil, fmt.Errorf("update record %q: %w", uid, err)
	}
	return out, gone, nil
}

// Tx is a transaction with the database's clock (or the injected one) read
// at its start.
type Tx struct {
	tx  *sqlx.Tx
	now time.Time
}

// Now is the database's clock at the start of the transaction: the now of
// every transition applied in it.
func (tx *Tx) Now() time.Time { return tx.now }

// InTx runs fn in a READ COMMITTED transaction and commits it if fn
// returns nil.
func (s *Store) InTx(ctx context.Context, fn func(*Tx) error) error {
	return s.InTxWith(ctx, TxOptions{}, fn)
}

// TxOptions bound how long a transaction may wait for locks and hold them,
// so that a frozen process (stopped, paused, partitioned) costs only its own
// work. Zero fields keep the server's settings.
type TxOptions struct {
	// LockTimeout bounds each wait for a lock (lock_timeout): the statement
	// fails with SQLSTATE 55P03 instead of waiting behind a frozen holder.
	LockTimeout time.Duration
	// IdleTimeout ends the session of a transaction left idle this long
	// between statements (idle_in_transaction_session_timeout): a frozen
	// process's transaction rolls back and its locks are released.
	IdleTimeout time.Duration
	// StatementTimeout bounds each statement (statement_timeout).
	StatementTimeout time.Duration
}

// InTxWith is InTx with the given bounds. The transaction is READ COMMITTED
// whatever the database's default_transaction_isolation: every write is
// guarded by the row locks it takes, and a stricter level would fail
// concurrent batches with serialization errors (40001) instead of waiting.
func (s *Store) InTxWith(ctx context.Context, opt TxOptions, fn func(*Tx) error) error {
	sqlTx, err := s.db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer sqlTx.Rollback()
	tx := &Tx{tx: sqlTx}
	// One round trip reads the clock and sets the bounds, for this
	// transaction only. JIT compilation is off: our statements are short,
	// and a planner estimate over its threshold (the claim's, with many
	// limited upstreams) would compile one for hundreds of milliseconds.
	q := "SELECT now(), set_config('jit', 'off', true)"
	var args []any
	for _, set := range []struct {
		name string
		d    time.Duration
	}{{"lock_timeout", opt.LockTimeout}, {"idle_in_transaction_session_timeout", opt.IdleTimeout}, {"statement_timeout", opt.StatementTimeout}} {
		if set.d > 0 {
			args = append(args, max(set.d.Milliseconds(), 1))
			q += fmt.Sprintf(", set_config('%s', $%d::bigint::text, true)", set.name, len(args))
		}
	}
	dest := make([]any, 2+len(args))
	dest[0] = &tx.now
	for i := range dest[1:] {
		dest[i+1] = new(string)
	}
	if err := sqlTx.QueryRowContext(ctx, q, args...).Scan(dest...); err != nil {
		return fmt.Errorf("read database clock: %w", err)
	}
	if s.clock != nil {
		tx.now = s.clockNow()
	}
	tx.now = tx.now.UTC()
	if err := fn(tx); err != nil {
		return err
	}
	if err := sqlTx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// limitedUpstream is true for an upstream row u that has a limit
// (max_in_flight, rate: the generated column limited) and whose breaker is
// closed: the predicate of the partial index upstreams_limited.
const limitedUpstream = `u.limited AND u.breaker = 'closed'`

// claimDue reads the rows it locks whole, so no row is looked up twice; the
// due and expired sets are disjoint (attempt_uid NULL or not). $1 is now,
// $3 the latest deadline the caller times out (at most now).
//
// The due rows of a limited upstream (closed, with max_in_flight or a rate)
// are claimed apart, oldest first, at most as many as could start now: its
// free places in flight (counted on bigtables_running_upstream) and its
// tokens (refilled to now as upstream.Admit refills them, rounded up). The
// other due rows are claimed by refresh_at, passing over the limited and
// the blocked upstreams. So a limited upstream's backlog cannot fill the
// batch with rows that would only wait while the other upstreams' due rows
// queue behind it (docs/design.md, U10, U11). The count is read without
// the upstream's lock: it only bounds the claim; Admit decides under the
// lock. Upstreams whose breaker is not closed are claimed with the others,
// so their due rows are parked, not left in the due set.
const claimDue = `
WITH capped AS (
    SELECT u.name, least($2::bigint,
        CASE WHEN l.mif > 0 THEN l.mif - (SELECT count(*) FROM bigtables r WHERE r.upstream = u.name AND r.attempt_uid IS NOT NULL) ELSE $2::bigint END,
        CASE WHEN l.rate > 0 THEN ceil(least(l.burst, CASE WHEN u.tokens_at IS NULL THEN l.burst
            ELSE u.tokens + greatest(extract(epoch FROM $1 - u.tokens_at), 0) * l.rate END))::bigint ELSE $2::bigint END) AS n
    FROM upstreams u, LATERAL (SELECT COALESCE((u.config->>'max_in_flight')::int, 0) AS mif,
        COALESCE((u.config->>'rate')::float8, 0) AS rate,
        CASE WHEN COALESCE((u.config->>'burst')::float8, 0) > 0 THEN (u.config->>'burst')::float8
            ELSE greatest(1, COALESCE((u.config->>'rate')::float8, 0)) END AS burst) l
    WHERE ` + limitedUpstream + ` AND (u.blocked_until IS NULL OR u.blocked_until <= $1)
), limited AS (
    SELECT b.* FROM capped c CROSS JOIN LATERAL (
        SELECT ` + lockedColumns + ` FROM bigtables
        WHERE upstream = c.name AND ` + duePredicate + ` AND refresh_at <= $1
        ORDER BY refresh_at
        LIMIT greatest(c.n, 0)::bigint
        FOR UPDATE SKIP LOCKED) b
), due AS (
    SELECT ` + lockedColumns + ` FROM bigtables
    WHERE ` + duePredicate + ` AND refresh_at <= $1
        AND NOT EXISTS (SELECT 1 FROM upstreams u WHERE u.name = bigtables.upstream
            AND (u.blocked_until > $1 OR (` + limitedUpstream + `)))
    ORDER BY refresh_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT ` + lockedColumns + ` FROM bigtables
    WHERE attempt_uid IS NOT NULL AND deadline_at <= least($1, $3::timestamptz)
    ORDER BY deadline_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
SELECT * FROM (SELECT * FROM limited UNION ALL SELECT * FROM due ORDER BY refresh_at LIMIT $2) AS d
UNION ALL SELECT * FROM expired`

// ClaimDue locks and returns up to limit rows due to start and up to limit
// rows whose running attempt's deadline is at or before timeoutUpTo (and
// before the transaction's now): those the caller may time out. Attempts
// past their deadline but after timeoutUpTo are neither returned nor locked,
// so a poller applying their results does not wait on the scheduler. Rows
// locked by another transaction (another scheduler, a poller, a manual
// update) are skipped, so schedulers side by side never claim the same row.
func (tx *Tx) ClaimDue(ctx context.Context, limit int, timeoutUpTo time.Time) ([]Row, error) {
	rows, err := tx.tx.QueryxContext(ctx, claimDue, tx.now, limit, timeoutUpTo.UTC())
	if err != nil {
		return nil, fmt.Errorf("claim due rows: %w", err)
	}
	out, err := scanRows(rows, limit)
	if err != nil {
		return nil, fmt.Errorf("claim due rows: %w", err)
	}
	return out, nil
}

// CountExpiredAfter counts, up to limit, the running attempts whose deadline
// has passed (at or before the transaction's now) but is after t: the
// timeouts a caller that times out only up to t is holding back. It reads
// the index on running attempts, so it costs at most limit index entries.
func (tx *Tx) CountExpiredAfter(ctx context.Context, t time.Time, limit int) (int, error) {
	var n int
	err := tx.tx.GetContext(ctx, &n, `SELECT count(*) FROM (SELECT 1 FROM bigtables
		WHERE attempt_uid IS NOT NULL AND deadline_at <= $1 AND deadline_at > $2 LIMIT $3) AS held`, tx.now, t.UTC(), limit)
	if err != nil {
		return 0, fmt.Errorf("count held timeouts: %w", err)
	}
	return n, nil
}

// Lock locks and returns the rows with the given uids, keyed by uid; unknown
// uids are absent. Rows are locked in uid order, so concurrent batches cannot
// deadlock.
func (tx *Tx) Lock(ctx context.Context, uids []string) (map[string]Row, error) {
	sorted := append([]string(nil), uids...)
	sort.Strings(sorted)
	rows, err := tx.tx.QueryxContext(ctx,
		"SELECT "+lockedColumns+" FROM bigtables WHERE uid = ANY($1) ORDER BY uid FOR UPDATE", pq.StringArray(sorted))
	if err != nil {
		return nil, fmt.Errorf("lock rows: %w", err)
	}
	list, err := scanRows(rows, len(sorted))
	if err != nil {
		return nil, fmt.Errorf("lock rows: %w", err)
	}
	out := make(map[string]Row, len(list))
	for _, r := range list {
		out[r.UID] = r
	}
	return out, nil
}

// LockOrSkip locks and returns the rows with the given uids that no other
// transaction holds, keyed by uid, without waiting (FOR UPDATE SKIP LOCKED),
// and lists the uids of the rows it skipped because another transaction
// holds them. Unknown uids are in neither.
func (tx *Tx) LockOrSkip(ctx context.Context, uids []string) (rows map[string]Row, busy []string, err error) {
	sorted := append([]string(nil), uids...)
	sort.Strings(sorted)
	list, err := tx.selectRows(ctx,
		"SELECT "+lockedColumns+" FROM bigtables WHERE uid = ANY($1) ORDER BY uid FOR UPDATE SKIP LOCKED", sorted)
	if err != nil {
		return nil, nil, fmt.Errorf("lock rows: %w", err)
	}
	rows = make(map[string]Row, len(list))
	for _, r := range list {
		rows[r.UID] = r
	}
	if len(rows) == len(sorted) {
		return rows, nil, nil
	}
	var missing []string
	for _, uid := range sorted {
		if _, ok := rows[uid]; !ok {
			missing = append(missing, uid)
		}
	}
	// Missing rows are unknown or held by another transaction: a plain read
	// (which no lock blocks) tells them apart.
	if err := tx.tx.SelectContext(ctx, &busy, "SELECT uid FROM bigtables WHERE uid = ANY($1) ORDER BY uid", pq.StringArray(missing)); err != nil {
		return nil, nil, fmt.Errorf("find locked rows: %w", err)
	}
	return rows, busy, nil
}

func (tx *Tx) selectRows(ctx context.Context, query string, uids []string) ([]Row, error) {
	rows, err := tx.tx.QueryxContext(ctx, query, pq.StringArray(uids))
	if err != nil {
		return nil, err
	}
	return scanRows(rows, len(uids))
}

// saveStates takes one array per column. An array may be NULL when every
// row has the column's zero value (-1 for times, 0, false, the empty string): unnest pads
// it with NULLs, which read as that value, and PostgreSQL parses one array
// fewer (batches of starts or successes leave half the columns at zero).
var saveStates = `
UPDATE bigtables AS b SET
    refresh_at = ` + usTime("u.refresh_at") + `,
    attempt_uid = NULLIF(u.attempt_uid, ''),
    attempt_no = COALESCE(u.attempt_no, 0),
    started_at = ` + usTime("u.started_at") + `,
    deadline_at = ` + usTime("u.deadline_at") + `,
    failing_since = ` + usTime("u.failing_since") + `,
    last_delay_ms = COALESCE(u.last_delay_ms, 0),
    disabled_until_update = COALESCE(u.disabled, false),
    disabled_reason = CASE WHEN u.disabled THEN COALESCE(u.reason, '') END,
    status_message = NULLIF(u.status, ''),
    status_at = ` + usTime("u.status_at") + `,
    push_token = CASE WHEN u.attempt_uid <> '' THEN NULLIF(u.push_token, '') END,
    updated_at = $14
FROM unnest($1::text[], $2::bigint[], $3::text[], $4::int[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bool[], $9::text[], $10::text[], $11::bigint[], $12::tid[], $13::bigint[], $15::text[])
    AS u(uid, refresh_at, attempt_uid, attempt_no, started_at, deadline_at, failing_since, disabled, reason, status, last_delay_ms, tid, status_at, push_token)
WHERE b.ctid = u.tid AND b.uid = u.uid`

// Save writes the refresh state and status message of rows the transaction
// holds locked; not paused, which only Pause and Resume write. It writes them
// (read by ClaimDue or Lock in it) in one statement; each row is
// found by its ctid, which the lock keeps valid. Each uid may appear once.
func (tx *Tx) Save(ctx context.Context, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	uid, attemptUID, reason, status := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	refreshAt, startedAt, deadlineAt, failingSince := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	attemptNo, lastDelay, disabled, statusAt := make([]int64, n), make([]int64, n), make([]bool, n), make([]int64, n)
	tid, token := make([]string, n), make([]string, n)
	seen := make(map[string]bool, n)
	for i, r := range rows {
		if seen[r.UID] {
			return fmt.Errorf("save states: uid %q appears twice in one batch", r.UID)
		}
		if r.tid == "" {
			return fmt.Errorf("save states: record %q was not read under a lock in this transaction", r.UID)
		}
		seen[r.UID] = true
		tid[i] = r.tid
		uid[i], attemptUID[i], attemptNo[i] = r.UID, r.AttemptUID, int64(r.AttemptNo)
		refreshAt[i], startedAt[i] = micros(r.RefreshAt), micros(r.StartedAt)
		deadlineAt[i], failingSince[i] = micros(r.DeadlineAt), micros(r.FailingSince)
		disabled[i], reason[i], status[i] = r.Disabled, r.DisabledReason, r.StatusMessage
		lastDelay[i], statusAt[i] = r.LastDelay.Milliseconds(), micros(r.StatusAt)
		token[i] = r.PushToken
	}
	res, err := tx.tx.ExecContext(ctx, saveStates, pq.StringArray(uid), pq.Int64Array(orNull(refreshAt, -1)),
		pq.StringArray(orNull(attemptUID, "")), pq.Int64Array(orNull(attemptNo, 0)), pq.Int64Array(orNull(startedAt, -1)),
		pq.Int64Array(orNull(deadlineAt, -1)), pq.Int64Array(orNull(failingSince, -1)), pq.BoolArray(orNull(disabled, false)),
		pq.StringArray(orNull(reason, "")), pq.StringArray(orNull(status, "")), pq.Int64Array(orNull(lastDelay, 0)),
		pq.StringArray(tid), pq.Int64Array(orNull(statusAt, -1)), tx.now, pq.StringArray(orNull(token, "")))
	if err != nil {
		return fmt.Errorf("save %d states: %w", n, err)
	}
	if got, _ := res.RowsAffected(); got != int64(n) {
		return fmt.Errorf("save %d states: %d rows matched (a row changed since it was locked in this transaction)", n, got)
	}
	return nil
}

// Outcome is how an attempt ended, as recorded in its history.
type Outcome string

// Attempt outcomes.
const (
	OutcomeSuccess   Outcome = "success"   // the worker reported success
	OutcomeFailure   Outcome = "failure"   // the worker reported failure
	OutcomeTimeout   Outcome = "timeout"   // the deadline passed first
	OutcomeCancelled Outcome = "cancelled" // a manual update superseded it
)

// Attempt is one finished attempt in the history.
type Attempt struct {
	AttemptUID string    `json:"attempt_uid"`
	UID        string    `json:"uid"`
	AttemptNo  int       `json:"attempt_no"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Outcome    Outcome   `json:"outcome"`
	Message    string    `json:"message"`
	// Decision is the failure branch taken (refresh.Decision), if any.
	Decision string `json:"decision,omitempty"`
}

var insertAttempts = `
INSERT INTO bigtable_attempts (attempt_uid, uid, attempt_no, started_at, finished_at, outcome, message, decision)
SELECT a, u, n, ` + usTime("s") + `, ` + usTime("f") + `, o, COALESCE(m, ''), COALESCE(d, '')
FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[], $5::bigint[], $6::text[], $7::text[], $8::text[])
    AS t(a, u, n, s, f, o, m, d)`

// Ended returns the history row of the attempt that old was running on
// record uid, ended at now with the given outcome, message and failure
// decision ("" when no failure branch was taken).
func Ended(uid string, old refresh.State, now time.Time, outcome Outcome, message string, decision refresh.Decision) Attempt {
	return Attempt{
		AttemptUID: old.AttemptUID, UID: uid, AttemptNo: old.AttemptNo, StartedAt: old.StartedAt,
		FinishedAt: now, Outcome: outcome, Message: message, Decision: string(decision),
	}
}

// RecordAttempts appends finished attempts to the history in one statement.
func (tx *Tx) RecordAttempts(ctx context.Context, attempts []Attempt) error {
	if len(attempts) == 0 {
		return nil
	}
	n := len(attempts)
	a, u, o, m, d := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	no, s, f := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, at := range attempts {
		started := at.StartedAt
		if started.IsZero() {
			started = at.FinishedAt
		}
		a[i], u[i], no[i], s[i], f[i] = at.AttemptUID, at.UID, int64(at.AttemptNo), micros(started), micros(at.FinishedAt)
		o[i], m[i], d[i] = string(at.Outcome), at.Message, at.Decision
	}
	_, err := tx.tx.ExecContext(ctx, insertAttempts, pq.StringArray(a), pq.StringArray(u), pq.Int64Array(no),
		pq.Int64Array(s), pq.Int64Array(f), pq.StringArray(o), pq.StringArray(orNull(m, "")), pq.StringArray(orNull(d, "")))
	if err != nil {
		return fmt.Errorf("record %d attempts: %w", n, err)
	}
	return nil
}

// History returns the last limit finished attempts of a record, newest first.
func (s *Store) History(ctx context.Context, uid string, limit int) ([]Attempt, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT attempt_uid, uid, attempt_no, started_at, finished_at, outcome, message, decision
		FROM bigtable_attempts WHERE uid = $1 ORDER BY finished_at DESC, attempt_no DESC LIMIT $2`, uid, limit)
	if err != nil {
		return nil, fmt.Errorf("read history of %q: %w", uid, err)
	}
	defer rows.Close()
	var list []Attempt
	for rows.Next() {
		var at Attempt
		var outcome string
		if err := rows.Scan(&at.AttemptUID, &at.UID, &at.AttemptNo, &at.StartedAt, &at.FinishedAt, &outcome, &at.Message, &at.Decision); err != nil {
			return nil, fmt.Errorf("read history of %q: %w", uid, err)
		}
		at.Outcome, at.StartedAt, at.FinishedAt = Outcome(outcome), at.StartedAt.UTC(), at.FinishedAt.UTC()
		list = append(list, at)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read history of %q: %w", uid, err)
	}
	return list, nil
}

// Started identifies a start to undo: the attempt and the refresh_at the row
// had before it.
type Started struct {
	UID        string
	AttemptUID string
	RefreshAt  time.Time
}

var undoStarts = `
UPDATE bigtables AS b SET
    attempt_uid = NULL, started_at = NULL, deadline_at = NULL, push_token = NULL,
    attempt_no = b.attempt_no - 1,
    refresh_at = ` + usTime("u.refresh_at") + `,
    updated_at = $4
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(uid, attempt_uid, refresh_at)
WHERE b.uid = u.uid AND b.attempt_uid = u.attempt_uid`

// UndoStarts reverts starts whose jobs could not be pushed, so an outage of
// our own does not burn an attempt. A row whose attempt changed since (a
// manual update, a result) is left alone. Rows are locked in uid order
// first, like every batch that locks rows, so an undo cannot deadlock with a
// poller. It returns the rows reverted.
func (s *Store) UndoStarts(ctx context.Context, starts []Started) (int, error) {
	if len(starts) == 0 {
		return 0, nil
	}
	uid, attempt, at := make([]string, len(starts)), make([]string, len(starts)), make([]int64, len(starts))
	for i, st := range starts {
		uid[i], attempt[i], at[i] = st.UID, st.AttemptUID, micros(st.RefreshAt)
	}
	var n int64
	err := s.InTx(ctx, func(tx *Tx) error {
		if _, err := tx.Lock(ctx, uid); err != nil {
			return err
		}
		res, err := tx.tx.ExecContext(ctx, undoStarts, pq.StringArray(uid), pq.StringArray(attempt), pq.Int64Array(at), tx.now)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("undo %d starts: %w", len(starts), err)
	}
	return int(n), nil
}

// Counts summarises the table for operators.
type Counts struct {
	Total, Running, Due, Disabled int
}

// Count returns how many records exist, run, are due and are disabled.
func (s *Store) Count(ctx context.Context) (Counts, error) {
	var c Counts
	err := s.db.QueryRowContext(ctx, `SELECT count(*),
		count(*) FILTER (WHERE attempt_uid IS NOT NULL),
		count(*) FILTER (WHERE `+duePredicate+` AND refresh_at <= COALESCE($1::timestamptz, now())),
		count(*) FILTER (WHERE disabled_until_update)
		FROM bigtables`, s.clockParam()).Scan(&c.Total, &c.Running, &c.Due, &c.Disabled)
	if err != nil {
		return Counts{}, fmt.Errorf("count records: %w", err)
	}
	return c, nil
}
