package store

import (
	"context"
	"fmt"
	"time"
)

// pruneOlder deletes up to $3 history rows finished before now - $2
// microseconds, oldest first, found through the index on finished_at and
// deleted by ctid.
const pruneOlder = `
DELETE FROM bigtable_attempts WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM bigtable_attempts
    WHERE finished_at < COALESCE($1::timestamptz, now()) - $2 * interval '1 microsecond'
    ORDER BY finished_at
    LIMIT $3))`

// PruneAttemptsOlder deletes up to limit history rows of attempts that
// finished more than age ago, oldest first, and returns how many it deleted.
// Each call is one bounded step: call it again while it returns limit.
func (s *Store) PruneAttemptsOlder(ctx context.Context, age time.Duration, limit int) (int, error) {
	if age <= 0 || limit <= 0 {
		return 0, fmt.Errorf("prune history: age %v and limit %d must be positive", age, limit)
	}
	res, err := s.db.ExecContext(ctx, pruneOlder, s.clockParam(), age.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("prune history older than %v: %w", age, err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// pruneBeyond takes the records after $1 in uid order ($2 of them), and
// deletes up to $4 history rows of theirs beyond each one's $3 newest. It
// returns the records read, the last uid read and the rows deleted.
const pruneBeyond = `
WITH recs AS (
    SELECT uid FROM bigtables WHERE uid > $1 ORDER BY uid LIMIT $2
), over AS (
    SELECT recs.uid FROM recs
    WHERE (SELECT count(*) FROM (SELECT 1 FROM bigtable_attempts AS c WHERE c.uid = recs.uid OFFSET $3 LIMIT 1) AS x) > 0
), doomed AS (
    SELECT h.ctid FROM over AS recs CROSS JOIN LATERAL (
        SELECT a.ctid FROM bigtable_attempts AS a WHERE a.uid = recs.uid
        ORDER BY a.finished_at DESC, a.attempt_no DESC OFFSET $3
    ) AS h
    LIMIT $4
), gone AS (
    DELETE FROM bigtable_attempts WHERE ctid = ANY(ARRAY(SELECT ctid FROM doomed)) RETURNING 1
)
SELECT (SELECT count(*) FROM recs), COALESCE((SELECT max(uid) FROM recs), ''), (SELECT count(*) FROM gone)`

// PruneAttemptsBeyond walks the records in uid order, records at a time
// starting after the uid after, and deletes up to limit history rows of
// theirs beyond each record's keep newest. It returns how many rows it
// deleted and where the next step starts: the same place when it hit limit
// (more may be left there), "" after the last record (the walk starts
// over). Each call is one bounded step, reading the history of at most
// records records through the history's primary key.
func (s *Store) PruneAttemptsBeyond(ctx context.Context, keep int, after string, records, limit int) (deleted int, next string, err error) {
	if keep <= 0 || records <= 0 || limit <= 0 {
		return 0, after, fmt.Errorf("prune history: keep %d, records %d and limit %d must be positive", keep, records, limit)
	}
	var read int
	var last string
	if err := s.db.QueryRowContext(ctx, pruneBeyond, after, records, keep, limit).Scan(&read, &last, &deleted); err != nil {
		return 0, after, fmt.Errorf("prune history beyond %d per record after %q: %w", keep, after, err)
	}
	switch {
	case deleted >= limit:
		next = after
	case read < records:
		next = ""
	default:
		next = last
	}
	return deleted, next, nil
}
