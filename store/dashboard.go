package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/bigtables/bigtables/refresh"
)

// The dashboard's reads. Each one reads an index range of its own bounded
// by a limit or a time window: none counts or scans the whole table, so a
// page costs the same with ten records or ten million.

// PageSort orders Page.
type PageSort string

// The orders of Page.
const (
	// SortUID pages in uid order (the primary key).
	SortUID PageSort = "uid"
	// SortNext pages by next refresh (refresh_at), soonest first, then uid.
	// Without a phase it covers the records a scheduler will start (waiting
	// and retrying), read in order from the due index; running, paused,
	// disabled and idle records are in it only when their phase is asked.
	SortNext PageSort = "next"
)

// PageQuery selects one page of records.
type PageQuery struct {
	// Prefix keeps the uids that start with it.
	Prefix string
	// Phase keeps one phase; "" any (see SortNext).
	Phase refresh.Phase
	Sort  PageSort
	// AfterUID and AfterAt are the last row of the previous page (keyset
	// paging): AfterAt is its refresh_at, for SortNext (zero: none, which
	// sorts last).
	AfterUID string
	AfterAt  time.Time
	// Limit caps the rows, 1 to 500; 0 means 50.
	Limit int
}

// PageRow is one record of a page with its last finished attempt.
type PageRow struct {
	Row
	// LastOutcome is the last finished attempt's outcome ("" if none),
	// LastFinished when it finished and LastMessage its message.
	LastOutcome  Outcome
	LastFinished time.Time
	LastMessage  string
}

// prefixUpper returns the smallest string greater than every string with
// the prefix, in byte order, or "" when there is none (all bytes 0xff).
func prefixUpper(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}

// Page returns one page of records and whether more follow. The prefix is
// a range of the primary key (uid is compared byte by byte), the phase a
// predicate matching its partial index, and the order either the primary
// key or the due index on refresh_at: no page sorts the table.
func (s *Store) Page(ctx context.Context, q PageQuery) ([]PageRow, bool, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	if q.Limit > 500 {
		return nil, false, fmt.Errorf("page records: limit %d: at most 500", q.Limit)
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if q.Prefix != "" {
		where = append(where, "b.uid >= "+arg(q.Prefix))
		if hi := prefixUpper(q.Prefix); hi != "" {
			where = append(where, "b.uid < "+arg(hi))
		}
	}
	if q.Phase != "" {
		pred, ok := phasePredicate[q.Phase]
		if !ok {
			return nil, false, fmt.Errorf("page records: unknown phase %q", q.Phase)
		}
		where = append(where, pred)
	}
	var order string
	switch q.Sort {
	case SortUID, "":
		if q.AfterUID != "" {
			where = append(where, "b.uid > "+arg(q.AfterUID))
		}
		order = "b.uid"
	case SortNext:
		if q.Phase == "" {
			where = append(where, duePredicate, "refresh_at IS NOT NULL")
		}
		switch {
		case q.AfterUID == "":
		case q.AfterAt.IsZero(): // the previous page ended among the NULLs
			where = append(where, "refresh_at IS NULL AND b.uid > "+arg(q.AfterUID))
		default:
			at, uid := arg(q.AfterAt.UTC()), arg(q.AfterUID)
			where = append(where, fmt.Sprintf("(refresh_at > %s OR refresh_at IS NULL OR (refresh_at = %s AND b.uid > %s))", at, at, uid))
			if q.Phase == "" { // lets the due index start at the key
				where = append(where, "refresh_at >= "+at)
			}
		}
		order = "refresh_at NULLS LAST, b.uid"
	default:
		return nil, false, fmt.Errorf("page records: unknown sort %q: expected uid or next", q.Sort)
	}
	sqlWhere := ""
	for i, w := range where {
		if i == 0 {
			sqlWhere = " WHERE "
		} else {
			sqlWhere += " AND "
		}
		sqlWhere += "(" + w + ")"
	}
	// The last attempt of each of the page's rows: a probe of the history's
	// primary key (uid, attempt_uid) per row, after the page is cut.
	query := `SELECT p.*, l.outcome, l.finished_at, l.message FROM (
		SELECT ` + rowColumnsOf("b") + ` FROM bigtables AS b` + sqlWhere + ` ORDER BY ` + order + ` LIMIT ` + arg(q.Limit+1) + `
	) AS p LEFT JOIN LATERAL (
		SELECT outcome, finished_at, message FROM bigtable_attempts AS a WHERE a.uid = p.uid ORDER BY finished_at DESC LIMIT 1
	) AS l ON true ORDER BY ` + pageOuterOrder(q.Sort)
	rows, err := s.db.QueryxContext(ctx, query, args...)
	if err != nil {
		return nil, false, fmt.Errorf("page records: %w", err)
	}
	defer rows.Close()
	var out []PageRow
	for rows.Next() {
		var r dbRow
		var outcome, message sql.NullString
		var finished sql.NullTime
		dest := []any{&r.UID, &r.InputURL, &r.Schedule, &r.Policy, &r.RefreshAt, &r.AttemptUID, &r.AttemptNo, &r.StartedAt,
			&r.DeadlineAt, &r.FailingSince, &r.LastDelayMs, &r.Disabled, &r.DisabledReason, &r.StatusMessage, &r.StatusAt, &r.Paused,
			&r.Upstream, &r.ParkedAt, &r.CreatedAt, &r.UpdatedAt, &outcome, &finished, &message}
		if err := rows.Scan(dest...); err != nil {
			return nil, false, fmt.Errorf("page records: %w", err)
		}
		out = append(out, PageRow{Row: r.row(), LastOutcome: Outcome(outcome.String), LastFinished: nullTime(finished), LastMessage: message.String})
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("page records: %w", err)
	}
	more := len(out) > q.Limit
	if more {
		out = out[:q.Limit]
	}
	return out, more, nil
}

func pageOuterOrder(s PageSort) string {
	if s == SortNext {
		return "p.refresh_at NULLS LAST, p.uid"
	}
	return "p.uid"
}

// rowColumnsOf is rowColumns qualified by a table alias.
func rowColumnsOf(alias string) string {
	return alias + `.uid, ` + alias + `.input_url, ` + alias + `.schedule, ` + alias + `.policy, ` + alias + `.refresh_at, ` +
		alias + `.attempt_uid, ` + alias + `.attempt_no, ` + alias + `.started_at, ` + alias + `.deadline_at, ` +
		alias + `.failing_since, ` + alias + `.last_delay_ms, ` + alias + `.disabled_until_update, ` + alias + `.disabled_reason, ` +
		alias + `.status_message, ` + alias + `.status_at, ` + alias + `.paused, ` + alias + `.upstream, ` + alias + `.parked_at, ` +
		alias + `.created_at, ` + alias + `.updated_at`
}

// MinuteCounts are the attempts of one minute.
type MinuteCounts struct {
	Minute time.Time
	// Started counts the attempts that started in the minute (finished
	// since, or running now).
	Started int64
	// Succeeded, Failed (worker failures), TimedOut and Cancelled count
	// the attempts that finished in the minute, by outcome.
	Succeeded, Failed, TimedOut, Cancelled int64
}

// Activity returns the attempts per minute of the window ending at now
// (one entry per minute, oldest first, the last one the minute now is
// in): ActivityIn over the whole window, running attempts included.
func (s *Store) Activity(ctx context.Context, now time.Time, window time.Duration) ([]MinuteCounts, error) {
	end := now.UTC().Truncate(time.Minute).Add(time.Minute)
	from := end.Add(-window.Truncate(time.Minute))
	return s.ActivityIn(ctx, ActivityRange{From: from, FinishedFrom: from, End: end, Running: true})
}

// ActivityRange selects what ActivityIn counts; times are whole minutes.
type ActivityRange struct {
	// From and End bound the minutes returned, [From, End).
	From, End time.Time
	// FinishedFrom counts only the finished attempts with finished_at in
	// [FinishedFrom, End), both as finished and, when they started at or
	// after From, as started: so that the counts of disjoint finished
	// ranges add up, and a caller keeps the minutes that can no longer
	// change and reads only the recent ones.
	FinishedFrom time.Time
	// Running adds the running attempts that started in [From, End) to
	// Started.
	Running bool
}

// ActivityIn counts attempts per minute. It reads the history's index on
// finished_at for [FinishedFrom, End) and the running attempts from their
// partial index: its cost is the attempts of that range, whatever the size
// of the history or the table.
func (s *Store) ActivityIn(ctx context.Context, r ActivityRange) ([]MinuteCounts, error) {
	from, end := r.From.UTC(), r.End.UTC()
	if !from.Before(end) || from.Truncate(time.Minute) != from || end.Truncate(time.Minute) != end {
		return nil, fmt.Errorf("read activity: [%v, %v) is not a range of whole minutes", from, end)
	}
	n := int(end.Sub(from) / time.Minute)
	out := make([]MinuteCounts, n)
	for i := range out {
		out[i].Minute = from.Add(time.Duration(i) * time.Minute)
	}
	slot := func(t time.Time) int {
		if t.Before(from) || !t.Before(end) {
			return -1
		}
		return int(t.Sub(from) / time.Minute)
	}
	rows, err := s.db.QueryContext(ctx, `
		SELECT date_trunc('minute', finished_at), outcome, count(*) FROM bigtable_attempts
			WHERE finished_at >= $3 AND finished_at < $2 GROUP BY 1, 2
		UNION ALL
		SELECT date_trunc('minute', started_at), 'started', count(*) FROM bigtable_attempts
			WHERE finished_at >= $3 AND finished_at < $2 AND started_at >= $1 GROUP BY 1
		UNION ALL
		SELECT date_trunc('minute', started_at), 'started', count(*) FROM bigtables
			WHERE $4 AND attempt_uid IS NOT NULL AND started_at >= $1 AND started_at < $2 GROUP BY 1`, from, end, r.FinishedFrom.UTC(), r.Running)
	if err != nil {
		return nil, fmt.Errorf("read activity: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var minute time.Time
		var kind string
		var count int64
		if err := rows.Scan(&minute, &kind, &count); err != nil {
			return nil, fmt.Errorf("read activity: %w", err)
		}
		i := slot(minute.UTC())
		if i < 0 {
			continue
		}
		switch kind {
		case "started":
			out[i].Started += count
		case string(OutcomeSuccess):
			out[i].Succeeded += count
		case string(OutcomeFailure):
			out[i].Failed += count
		case string(OutcomeTimeout):
			out[i].TimedOut += count
		case string(OutcomeCancelled):
			out[i].Cancelled += count
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read activity: %w", err)
	}
	return out, nil
}

// FinalFailure is an attempt whose failure disabled its record, with the
// reason the record shows (empty once an update re-enabled it).
type FinalFailure struct {
	Attempt
	Reason string
}

// FinalFailures returns the most recent final failures that finished after
// since, newest first, at most limit. It walks the history's index on
// finished_at backwards from the newest and stops at since.
func (s *Store) FinalFailures(ctx context.Context, since time.Time, limit int) ([]FinalFailure, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT a.attempt_uid, a.uid, a.attempt_no, a.started_at, a.finished_at, a.outcome, a.message, a.decision,
		COALESCE(b.disabled_reason, '')
		FROM bigtable_attempts AS a LEFT JOIN bigtables AS b ON b.uid = a.uid AND b.disabled_until_update
		WHERE a.finished_at >= $1 AND a.decision = ANY($2)
		ORDER BY a.finished_at DESC LIMIT $3`, since.UTC(),
		fmt.Sprintf("{%s,%s,%s}", refresh.Exhausted, refresh.NotRetryable, refresh.GaveUp), limit)
	if err != nil {
		return nil, fmt.Errorf("read final failures: %w", err)
	}
	defer rows.Close()
	var list []FinalFailure
	for rows.Next() {
		var at FinalFailure
		var outcome string
		if err := rows.Scan(&at.AttemptUID, &at.UID, &at.AttemptNo, &at.StartedAt, &at.FinishedAt, &outcome, &at.Message, &at.Decision, &at.Reason); err != nil {
			return nil, fmt.Errorf("read final failures: %w", err)
		}
		at.Outcome, at.StartedAt, at.FinishedAt = Outcome(outcome), at.StartedAt.UTC(), at.FinishedAt.UTC()
		list = append(list, at)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read final failures: %w", err)
	}
	return list, nil
}
