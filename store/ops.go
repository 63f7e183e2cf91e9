package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/bigtables/bigtables/refresh"
)

// duePredicate is the claim's condition for a row to start (not running,
// disabled, paused or parked): the predicate of the partial indexes
// bigtables_due and bigtables_due_upstream.
const duePredicate = "attempt_uid IS NULL AND NOT disabled_until_update AND NOT paused AND parked_at IS NULL"

// phasePredicate is refresh.State.Phase in SQL: each phase's rows, the
// phases disjoint. Paused, disabled, running, idle and retrying rows are
// found through partial indexes (bigtables_paused, bigtables_disabled,
// bigtables_running, bigtables_idle, bigtables_failing: a retrying record
// has failed since its last success); waiting rows are most of a table.
var phasePredicate = map[refresh.Phase]string{
	refresh.PhasePaused:   "paused",
	refresh.PhaseDisabled: "disabled_until_update AND NOT paused",
	refresh.PhaseRunning:  "attempt_uid IS NOT NULL AND NOT disabled_until_update AND NOT paused",
	refresh.PhaseParked:   "parked_at IS NOT NULL AND attempt_uid IS NULL AND NOT disabled_until_update AND NOT paused",
	refresh.PhaseIdle:     "refresh_at IS NULL AND " + duePredicate,
	refresh.PhaseRetrying: "failing_since IS NOT NULL AND attempt_no > 0 AND refresh_at IS NOT NULL AND " + duePredicate,
	refresh.PhaseWaiting:  "attempt_no = 0 AND refresh_at IS NOT NULL AND " + duePredicate,
}

// Phases are the phases List and Overview know, in the order people read
// them.
var Phases = []refresh.Phase{refresh.PhaseWaiting, refresh.PhaseRunning, refresh.PhaseRetrying,
	refresh.PhaseDisabled, refresh.PhasePaused, refresh.PhaseIdle, refresh.PhaseParked}

// Ping checks that PostgreSQL answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping PostgreSQL: %w", err)
	}
	return nil
}

// DueLag returns how late the oldest due record is: now minus its
// refresh_at, 0 when nothing is due. It reads one entry of the due index.
func (s *Store) DueLag(ctx context.Context) (time.Duration, error) {
	var lag sql.NullFloat64
	err := s.db.GetContext(ctx, &lag, `SELECT extract(epoch FROM COALESCE($1::timestamptz, now()) - min(refresh_at))
		FROM bigtables WHERE `+duePredicate+` AND refresh_at <= COALESCE($1::timestamptz, now())`, s.clockParam())
	if err != nil {
		return 0, fmt.Errorf("read due lag: %w", err)
	}
	return time.Duration(max(lag.Float64, 0) * float64(time.Second)), nil
}

// CountParked counts the records in phase parked (held back by their
// upstream's open breaker), from the partial index bigtables_parked: its
// cost is the number of parked rows.
func (s *Store) CountParked(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.GetContext(ctx, &n, "SELECT count(*) FROM bigtables WHERE "+phasePredicate[refresh.PhaseParked]); err != nil {
		return 0, fmt.Errorf("count parked records: %w", err)
	}
	return n, nil
}

// Overview is the state of the table for operators.
type Overview struct {
	// Total is the number of records: PostgreSQL's estimate (pg_class,
	// kept by ANALYZE and autovacuum) unless TotalExact.
	Total      int64
	TotalExact bool
	// Phases counts records by phase. Every phase but waiting is an exact
	// count read from its partial index; waiting is Total less the
	// others, so it is exact only when Total is.
	Phases map[refresh.Phase]int64
	// Failing counts the records that failed since their last success
	// (exact, from bigtables_failing).
	Failing int64
	// Due counts the records due and not started (exact, from
	// bigtables_due); DueLag is how late the oldest of them is.
	Due    int64
	DueLag time.Duration
}

// exactBelow is the table size under which Overview counts exactly:
// cheaper than trusting an estimate that ANALYZE has not made yet.
const exactBelow = 100_000

// Overview counts records by phase without reading the whole table: each
// count but waiting reads a partial index holding only its rows, so its
// cost is the number of such rows; the total is PostgreSQL's estimate,
// or an exact count for small tables (under 100,000 rows, or never
// analyzed).
func (s *Store) Overview(ctx context.Context) (Overview, error) {
	o := Overview{Phases: map[refresh.Phase]int64{}}
	var lag sql.NullFloat64
	var paused, disabled, running, idle, retrying, parked int64
	err := s.db.QueryRowContext(ctx, `SELECT
		(SELECT reltuples::bigint FROM pg_class WHERE oid = 'bigtables'::regclass),
		(SELECT count(*) FROM bigtables WHERE `+phasePredicate[refresh.PhasePaused]+`),
		(SELECT count(*) FROM bigtables WHERE `+phasePredicate[refresh.PhaseDisabled]+`),
		(SELECT count(*) FROM bigtables WHERE `+phasePredicate[refresh.PhaseRunning]+`),
		(SELECT count(*) FROM bigtables WHERE `+phasePredicate[refresh.PhaseIdle]+`),
		(SELECT count(*) FROM bigtables WHERE `+phasePredicate[refresh.PhaseRetrying]+`),
		(SELECT count(*) FROM bigtables WHERE `+phasePredicate[refresh.PhaseParked]+`),
		(SELECT count(*) FROM bigtables WHERE failing_since IS NOT NULL),
		(SELECT count(*) FROM bigtables WHERE `+duePredicate+` AND refresh_at <= COALESCE($1::timestamptz, now())),
		(SELECT extract(epoch FROM COALESCE($1::timestamptz, now()) - min(refresh_at)) FROM bigtables
			WHERE `+duePredicate+` AND refresh_at <= COALESCE($1::timestamptz, now()))`, s.clockParam()).
		Scan(&o.Total, &paused, &disabled, &running, &idle, &retrying, &parked, &o.Failing, &o.Due, &lag)
	if err != nil {
		return Overview{}, fmt.Errorf("read overview: %w", err)
	}
	if o.Total < exactBelow {
		if err := s.db.GetContext(ctx, &o.Total, "SELECT count(*) FROM bigtables"); err != nil {
			return Overview{}, fmt.Errorf("count records: %w", err)
		}
		o.TotalExact = true
	}
	o.DueLag = time.Duration(max(lag.Float64, 0) * float64(time.Second))
	o.Phases[refresh.PhasePaused], o.Phases[refresh.PhaseDisabled], o.Phases[refresh.PhaseRunning] = paused, disabled, running
	o.Phases[refresh.PhaseIdle], o.Phases[refresh.PhaseRetrying], o.Phases[refresh.PhaseParked] = idle, retrying, parked
	o.Phases[refresh.PhaseWaiting] = max(o.Total-paused-disabled-running-idle-retrying-parked, 0)
	return o, nil
}

// lockOne locks the record uid in tx, or returns ErrNotFound.
func (tx *Tx) lockOne(ctx context.Context, uid string) (Row, error) {
	rows, err := tx.Lock(ctx, []string{uid})
	if err != nil {
		return Row{}, err
	}
	r, ok := rows[uid]
	if !ok {
		return Row{}, ErrNotFound
	}
	return r, nil
}

// setPaused writes the paused column of a locked row and returns the row
// with its new version's ctid, for Save.
func (tx *Tx) setPaused(ctx context.Context, r Row, paused bool) (Row, error) {
	const q = `UPDATE bigtables SET paused = $2, updated_at = $3 WHERE ctid = $1::tid AND uid = $4 RETURNING ctid::text, created_at`
	if err := tx.tx.QueryRowContext(ctx, q, r.tid, paused, tx.now, r.UID).Scan(&r.tid, &r.CreatedAt); err != nil {
		return Row{}, fmt.Errorf("write paused: %w", err)
	}
	r.CreatedAt, r.UpdatedAt, r.Paused = r.CreatedAt.UTC(), tx.now, paused
	return r, nil
}

// unparkOne ends the parking of a locked row (refresh.Unpark: the time
// parked is taken off its failing time) and returns it with its new
// version's ctid.
func (tx *Tx) unparkOne(ctx context.Context, r Row) (Row, error) {
	r.State = refresh.Unpark(r.State, r.ParkedAt, tx.now)
	const q = `UPDATE bigtables SET parked_at = NULL WHERE ctid = $1::tid AND uid = $2 RETURNING ctid::text`
	if err := tx.tx.QueryRowContext(ctx, q, r.tid, r.UID).Scan(&r.tid); err != nil {
		return Row{}, fmt.Errorf("end parking: %w", err)
	}
	r.ParkedAt = time.Time{}
	return r, tx.Save(ctx, []Row{r})
}

// Pause holds the record (refresh.Pause): it is not started until Resume.
// Its running attempt, if any, is cancelled, recorded in the history as
// "cancelled" and returned so that its worker can be told.
func (s *Store) Pause(ctx context.Context, uid string) (Row, *Cancelled, error) {
	var out Row
	var gone *Cancelled
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := tx.lockOne(ctx, uid)
		if err != nil {
			return err
		}
		old := r.State
		var cancelled string
		r.State, cancelled = refresh.Pause(r.State, tx.Now())
		if cancelled != "" {
			gone = &Cancelled{AttemptUID: cancelled, DeadlineAt: old.DeadlineAt}
			if err := tx.RecordAttempts(ctx, []Attempt{Ended(uid, old, tx.Now(), OutcomeCancelled, "cancelled by a pause", "")}); err != nil {
				return err
			}
		}
		if r, err = tx.setPaused(ctx, r, true); err != nil {
			return err
		}
		out = r
		if !old.Paused {
			if err := tx.WriteEvents(ctx, []Event{{Type: EventPaused, UID: uid}}); err != nil {
				return err
			}
		}
		return tx.Save(ctx, []Row{r})
	})
	if err != nil {
		return Row{}, nil, fmt.Errorf("pause record %q: %w", uid, err)
	}
	return out, gone, nil
}

// Resume lifts a pause (refresh.Resume); resuming a record that is not
// paused changes nothing.
func (s *Store) Resume(ctx context.Context, uid string) (Row, error) {
	var out Row
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := tx.lockOne(ctx, uid)
		if err != nil {
			return err
		}
		was := r.Paused
		r.State = refresh.Resume(r.State)
		if out, err = tx.setPaused(ctx, r, false); err != nil {
			return err
		}
		if !was {
			return nil
		}
		if r.Parked {
			// A release passes over paused records (Unpark), so a
			// resumed one leaves its parking here, like a saved one:
			// due at its refresh_at, parked again by the next tick if
			// its upstream's breaker is still open (docs/design.md, U9).
			if out, err = tx.unparkOne(ctx, out); err != nil {
				return err
			}
		}
		return tx.WriteEvents(ctx, []Event{{Type: EventResumed, UID: uid}})
	})
	if err != nil {
		return Row{}, fmt.Errorf("resume record %q: %w", uid, err)
	}
	return out, nil
}

// RunNow makes the record due now without changing anything else
// (refresh.RunNow); a paused, disabled or running record is refused with
// the reason.
func (s *Store) RunNow(ctx context.Context, uid string) (Row, error) {
	var out Row
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := tx.lockOne(ctx, uid)
		if err != nil {
			return err
		}
		if r.State, err = refresh.RunNow(r.State, tx.Now()); err != nil {
			return err
		}
		if err := tx.Save(ctx, []Row{r}); err != nil {
			return err
		}
		r.UpdatedAt = tx.Now()
		out = r
		return nil
	})
	if err != nil {
		return Row{}, fmt.Errorf("run record %q now: %w", uid, err)
	}
	return out, nil
}

// deleteRecord deletes the record $1 and writes its deleted event (at $2,
// or now) in the same statement.
const deleteRecord = `
WITH gone AS (
    DELETE FROM bigtables WHERE uid = $1 RETURNING uid, attempt_uid, deadline_at
), ev AS (
    INSERT INTO bigtable_events (type, uid, at, next_at)
    SELECT 'deleted', uid, COALESCE($2::timestamptz, now()), COALESCE($2::timestamptz, now()) FROM gone
)
SELECT attempt_uid, deadline_at FROM gone`

// Delete deletes the record and its attempt history, and writes its
// deleted event in the same statement. It returns the attempt that was
// running, if any, so that its worker can be told.
func (s *Store) Delete(ctx context.Context, uid string) (*Cancelled, error) {
	var attempt sql.NullString
	var deadline sql.NullTime
	err := s.db.QueryRowContext(ctx, deleteRecord, uid, s.clockParam()).Scan(&attempt, &deadline)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("delete record %q: %w", uid, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("delete record %q: %w", uid, err)
	}
	if !attempt.Valid {
		return nil, nil
	}
	return &Cancelled{AttemptUID: attempt.String, DeadlineAt: deadline.Time.UTC()}, nil
}
