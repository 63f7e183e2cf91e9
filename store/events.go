package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/lib/pq"
)

// EventType names a transition reported to the outside world (the
// transactional outbox, table bigtable_events).
type EventType string

// Event types. Each is written in the transaction of its transition, so an
// event exists exactly when its transition committed.
const (
	// EventDisabled: a final failure disabled the record (retries exhausted,
	// a not-retryable failure, or stored rules that cannot be read).
	EventDisabled EventType = "disabled"
	// EventGaveUp: the record failed for longer than give_up_after and was
	// disabled.
	EventGaveUp EventType = "gave_up"
	// EventRecovered: the first success after failures.
	EventRecovered EventType = "recovered"
	// EventReenabled: a person's update enabled a disabled record.
	EventReenabled EventType = "reenabled"
	// EventPaused, EventResumed and EventDeleted: a person paused,
	// resumed or deleted the record.
	EventPaused  EventType = "paused"
	EventResumed EventType = "resumed"
	EventDeleted EventType = "deleted"
	// EventBreakerOpened, EventBreakerHalfOpen and EventBreakerClosed: an
	// upstream's circuit breaker opened (from closed, or again from
	// half-open when a probe failed), turned half-open (its cool-down is
	// over: probes run) or closed (a probe succeeded: its parked records
	// are released). Event.Upstream names it; UID is empty. Written in the
	// transaction that moved the breaker (BreakerEvents).
	EventBreakerOpened   EventType = "breaker_opened"
	EventBreakerHalfOpen EventType = "breaker_half_open"
	EventBreakerClosed   EventType = "breaker_closed"
)

// EventTypes lists every event type, in the order people read them.
var EventTypes = []EventType{EventDisabled, EventGaveUp, EventRecovered, EventReenabled,
	EventPaused, EventResumed, EventDeleted, EventBreakerOpened, EventBreakerHalfOpen, EventBreakerClosed}

// Known reports whether t is one of EventTypes.
func (t EventType) Known() bool { return slices.Contains(EventTypes, t) }

// Breaker reports whether t is an upstream breaker's event (no record).
func (t EventType) Breaker() bool {
	return t == EventBreakerOpened || t == EventBreakerHalfOpen || t == EventBreakerClosed
}

// EventState is where an event's delivery stands.
type EventState string

// Event delivery states.
const (
	EventPending   EventState = "pending"   // to deliver (or being delivered, under a lease)
	EventDelivered EventState = "delivered" // every destination took it
	EventDead      EventState = "dead"      // the last retry failed; RequeueEvent sends it again
)

// Event is one reported transition and its delivery state.
type Event struct {
	// ID is assigned when the event is written: unique, increasing in
	// commit order only roughly (ids are drawn before commit). Receivers
	// de-duplicate deliveries by it.
	ID   int64
	Type EventType
	// UID is the record's; "" for an upstream's events.
	UID string
	// At is when the transition happened (the transaction's now); a zero
	// At given to WriteEvents means that now.
	At time.Time
	// Reason is the disabled reason (disabled, gave_up), or the reason a
	// re-enabled record had.
	Reason string
	// Attempts is the number of attempts that failed in a row (disabled,
	// gave_up), or that failed before the success (recovered).
	Attempts int
	// FailingSince is when the record's first failed attempt since its
	// last success started (disabled, gave_up, recovered).
	FailingSince time.Time
	// Upstream names the upstream of a breaker event.
	Upstream string
	// From and To are a breaker event's states (closed, open, half_open);
	// Why says what moved the breaker ("5 failures in a row", "a probe
	// failed", ...).
	From, To, Why string
	// CoolDown is how long an opened breaker stays open, and NextProbeAt
	// when it turns half-open (breaker_opened).
	CoolDown    time.Duration
	NextProbeAt time.Time
	// Parked counts the upstream's parked records when the breaker event
	// was written (at the end of its transaction's changes).
	Parked int
	// Message is free text for a person (optional).
	Message string

	// Delivery: read back, ignored by WriteEvents.
	State       EventState
	Tries       int       // delivery rounds that failed
	NextAt      time.Time // when it may be claimed next
	LastError   string
	DoneAt      time.Time // when it was delivered or declared dead
	DeliveredTo []string  // destinations served (opaque keys)
}

// eventPayload is the column payload: the optional fields of an event.
type eventPayload struct {
	Reason       string            `json:"reason,omitempty"`
	Attempts     int               `json:"attempts,omitempty"`
	FailingSince *time.Time        `json:"failing_since,omitempty"`
	Upstream     string            `json:"upstream,omitempty"`
	From         string            `json:"from,omitempty"`
	To           string            `json:"to,omitempty"`
	Why          string            `json:"why,omitempty"`
	CoolDown     *refresh.Duration `json:"cool_down,omitempty"`
	NextProbeAt  *time.Time        `json:"next_probe_at,omitempty"`
	Parked       int               `json:"parked,omitempty"`
	Message      string            `json:"message,omitempty"`
}

func (e Event) payload() ([]byte, error) {
	p := eventPayload{Reason: e.Reason, Attempts: e.Attempts, Upstream: e.Upstream,
		From: e.From, To: e.To, Why: e.Why, Parked: e.Parked, Message: e.Message}
	if !e.FailingSince.IsZero() {
		t := e.FailingSince.UTC()
		p.FailingSince = &t
	}
	if e.CoolDown > 0 {
		d := refresh.Duration(e.CoolDown)
		p.CoolDown = &d
	}
	if !e.NextProbeAt.IsZero() {
		t := e.NextProbeAt.UTC()
		p.NextProbeAt = &t
	}
	return json.Marshal(p)
}

var insertEvents = `
INSERT INTO bigtable_events (type, uid, at, payload, next_at)
SELECT t, u, ` + usTime("a") + `, p::jsonb, ` + usTime("a") + `
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS e(t, u, a, p)`

// WriteEvents appends events to the outbox in the transaction, in one
// statement: call it from the closure that writes their transitions, so
// the events commit or roll back with them. A zero At is the
// transaction's now. An unknown type is refused (and so is the
// transaction, when the caller returns the error).
func (tx *Tx) WriteEvents(ctx context.Context, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	n := len(events)
	t, u, p := make([]string, n), make([]string, n), make([]string, n)
	a := make([]int64, n)
	for i, e := range events {
		if !e.Type.Known() {
			return fmt.Errorf("write events: unknown event type %q", e.Type)
		}
		b, err := e.payload()
		if err != nil {
			return fmt.Errorf("write events: %w", err)
		}
		at := e.At
		if at.IsZero() {
			at = tx.now
		}
		t[i], u[i], a[i], p[i] = string(e.Type), e.UID, micros(at), string(b)
	}
	if _, err := tx.tx.ExecContext(ctx, insertEvents, pq.StringArray(t), pq.StringArray(u), pq.Int64Array(a), pq.StringArray(p)); err != nil {
		return fmt.Errorf("write %d events: %w", n, err)
	}
	return nil
}

// WriteEvent writes one event in a transaction of its own, for a
// transition that has no transaction of its own in PostgreSQL.
func (s *Store) WriteEvent(ctx context.Context, e Event) error {
	return s.InTx(ctx, func(tx *Tx) error { return tx.WriteEvents(ctx, []Event{e}) })
}

// eventColumns are read by every event query.
const eventColumns = `id, type, uid, at, payload, state, tries, next_at, last_error, done_at, delivered_to`

type dbEvent struct {
	ID          int64          `db:"id"`
	Type        string         `db:"type"`
	UID         string         `db:"uid"`
	At          time.Time      `db:"at"`
	Payload     []byte         `db:"payload"`
	State       string         `db:"state"`
	Tries       int            `db:"tries"`
	NextAt      time.Time      `db:"next_at"`
	LastError   string         `db:"last_error"`
	DoneAt      sql.NullTime   `db:"done_at"`
	DeliveredTo pq.StringArray `db:"delivered_to"`
	Claim       sql.NullString `db:"claim"`
	Policy      []byte         `db:"policy"`
}

func (d dbEvent) event() (Event, error) {
	var p eventPayload
	if err := json.Unmarshal(d.Payload, &p); err != nil {
		return Event{}, fmt.Errorf("event %d: payload: %w", d.ID, err)
	}
	e := Event{
		ID: d.ID, Type: EventType(d.Type), UID: d.UID, At: d.At.UTC(),
		Reason: p.Reason, Attempts: p.Attempts, Upstream: p.Upstream, Message: p.Message,
		From: p.From, To: p.To, Why: p.Why, Parked: p.Parked,
		State: EventState(d.State), Tries: d.Tries, NextAt: d.NextAt.UTC(), LastError: d.LastError,
		DoneAt: nullTime(d.DoneAt), DeliveredTo: []string(d.DeliveredTo),
	}
	if p.FailingSince != nil {
		e.FailingSince = p.FailingSince.UTC()
	}
	if p.CoolDown != nil {
		e.CoolDown = time.Duration(*p.CoolDown)
	}
	if p.NextProbeAt != nil {
		e.NextProbeAt = p.NextProbeAt.UTC()
	}
	return e, nil
}

// EventFilter selects events for ListEvents; the filters given all apply.
type EventFilter struct {
	UID string // "" any record
	// Upstream selects the breaker events of this upstream ("" any).
	Upstream string
	Type     EventType  // "" any type
	State    EventState // "" any state
	// After returns events whose id is greater (for following).
	After int64
	// Last returns the newest Limit events (still in id order) instead
	// of the oldest.
	Last bool
	// Limit caps the events returned; 0 means 100.
	Limit int
}

// ListEvents returns events in id order.
func (s *Store) ListEvents(ctx context.Context, f EventFilter) ([]Event, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	q := "SELECT " + eventColumns + " FROM bigtable_events WHERE id > $1"
	args := []any{f.After, f.Limit}
	if f.UID != "" {
		args = append(args, f.UID)
		q += fmt.Sprintf(" AND uid = $%d", len(args))
	}
	if f.Upstream != "" {
		args = append(args, f.Upstream)
		q += fmt.Sprintf(" AND payload->>'upstream' = $%d", len(args))
	}
	if f.Type != "" {
		args = append(args, string(f.Type))
		q += fmt.Sprintf(" AND type = $%d", len(args))
	}
	if f.State != "" {
		args = append(args, string(f.State))
		q += fmt.Sprintf(" AND state = $%d", len(args))
	}
	order := "ASC"
	if f.Last {
		order = "DESC"
	}
	q += " ORDER BY id " + order + " LIMIT $2"
	rows, err := s.db.QueryxContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var d dbEvent
		if err := rows.StructScan(&d); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		e, err := d.event()
		if err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	if f.Last {
		slices.Reverse(out)
	}
	return out, nil
}

// Claimed is an event a notifier holds under a lease.
type Claimed struct {
	Event
	// Claim is the token of this claim: MarkEvent with another token (a
	// notifier whose lease ran out and whose event was claimed again)
	// changes nothing.
	Claim string
	// Policy is the record's policy JSON at the claim, nil when the
	// record no longer exists (or for an upstream's event).
	Policy []byte
}

// claimEvents takes up to $2 pending events whose next_at has come ($1 is
// now), oldest first, skipping those another notifier is claiming, and
// leases them: next_at moves $4 microseconds ahead, so a notifier that dies
// holding them leaves them to the others once the lease has run out.
const claimEvents = `
UPDATE bigtable_events AS e SET claim = $3, next_at = $1::timestamptz + $4 * interval '1 microsecond'
FROM (
    SELECT id FROM bigtable_events
    WHERE state = 'pending' AND next_at <= $1::timestamptz
    ORDER BY next_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
) AS c
WHERE e.id = c.id
RETURNING e.id, e.type, e.uid, e.at, e.payload, e.state, e.tries, e.next_at, e.last_error, e.done_at, e.delivered_to, e.claim,
    (SELECT b.policy FROM bigtables AS b WHERE b.uid = e.uid AND e.uid <> '') AS policy`

// ClaimEvents leases up to limit pending events that are due (never
// claimed, or their lease or retry delay over), oldest first, to the
// claimant token claim for lease. Notifiers side by side never claim the
// same event while its lease runs.
func (s *Store) ClaimEvents(ctx context.Context, claim string, limit int, lease time.Duration) ([]Claimed, error) {
	if claim == "" || limit <= 0 || lease <= 0 {
		return nil, fmt.Errorf("claim events: claim %q, limit %d and lease %v must be set", claim, limit, lease)
	}
	now, err := s.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim events: %w", err)
	}
	rows, err := s.db.QueryxContext(ctx, claimEvents, now, limit, claim, lease.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("claim events: %w", err)
	}
	defer rows.Close()
	var out []Claimed
	for rows.Next() {
		var d dbEvent
		if err := rows.StructScan(&d); err != nil {
			return nil, fmt.Errorf("claim events: %w", err)
		}
		e, err := d.event()
		if err != nil {
			return nil, fmt.Errorf("claim events: %w", err)
		}
		out = append(out, Claimed{Event: e, Claim: d.Claim.String, Policy: d.Policy})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim events: %w", err)
	}
	slices.SortFunc(out, func(a, b Claimed) int { return int(a.ID - b.ID) })
	return out, nil
}

// Delivery is how a claimed event's delivery round ended.
type Delivery struct {
	// State is EventDelivered, EventDead, or EventPending to retry at
	// RetryAt.
	State   EventState
	RetryAt time.Time
	// DeliveredTo lists every destination served so far.
	DeliveredTo []string
	// Error is why the round failed ("" when delivered); it must hold no
	// secret.
	Error string
}

// MarkEvent records a delivery round of an event claimed with token
// claim. It returns false, changing nothing, when the claim is no longer
// the event's (its lease ran out and another notifier claimed it, or it
// was already marked).
func (s *Store) MarkEvent(ctx context.Context, id int64, claim string, d Delivery) (bool, error) {
	switch d.State {
	case EventDelivered, EventDead:
	case EventPending:
		if d.RetryAt.IsZero() {
			return false, fmt.Errorf("mark event %d: a retry needs a time", id)
		}
	default:
		return false, fmt.Errorf("mark event %d: unknown state %q", id, d.State)
	}
	var retry any
	if !d.RetryAt.IsZero() {
		retry = d.RetryAt.UTC()
	}
	to := d.DeliveredTo
	if to == nil {
		to = []string{}
	}
	const q = `UPDATE bigtable_events SET state = $3, next_at = COALESCE($4::timestamptz, next_at), delivered_to = $5,
		last_error = $6, claim = NULL,
		tries = tries + CASE WHEN $3 = 'delivered' THEN 0 ELSE 1 END,
		done_at = CASE WHEN $3 = 'pending' THEN NULL ELSE COALESCE($7::timestamptz, now()) END
		WHERE id = $1 AND claim = $2 AND state = 'pending'`
	res, err := s.db.ExecContext(ctx, q, id, claim, string(d.State), retry, pq.StringArray(to), d.Error, s.clockParam())
	if err != nil {
		return false, fmt.Errorf("mark event %d %s: %w", id, d.State, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// ErrNoDeadEvent means RequeueEvent found no dead event with the id.
var ErrNoDeadEvent = errors.New("no dead event with this id")

// RequeueEvent makes a dead event pending again, due now, with its tries
// reset: it is delivered again to the destinations that did not take it.
func (s *Store) RequeueEvent(ctx context.Context, id int64) error {
	res, err := s.db.ExecContext(ctx, `UPDATE bigtable_events SET state = 'pending', tries = 0, claim = NULL,
		next_at = COALESCE($2::timestamptz, now()), done_at = NULL WHERE id = $1 AND state = 'dead'`, id, s.clockParam())
	if err != nil {
		return fmt.Errorf("requeue event %d: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("requeue event %d: %w", id, ErrNoDeadEvent)
	}
	return nil
}

// pruneEvents deletes up to $3 delivered or dead events that happened
// before now - $2 microseconds, oldest first. Pending events are never
// pruned: they are not delivered yet.
const pruneEvents = `
DELETE FROM bigtable_events WHERE id = ANY(ARRAY(
    SELECT id FROM bigtable_events
    WHERE at < COALESCE($1::timestamptz, now()) - $2 * interval '1 microsecond' AND state <> 'pending'
    ORDER BY at
    LIMIT $3))`

// PruneEventsOlder deletes up to limit delivered or dead events older than
// age, oldest first, and returns how many it deleted. Each call is one
// bounded step: call it again while it returns limit.
func (s *Store) PruneEventsOlder(ctx context.Context, age time.Duration, limit int) (int, error) {
	if age <= 0 || limit <= 0 {
		return 0, fmt.Errorf("prune events: age %v and limit %d must be positive", age, limit)
	}
	res, err := s.db.ExecContext(ctx, pruneEvents, s.clockParam(), age.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("prune events older than %v: %w", age, err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// TransitionEvents returns the events of one applied transition of record
// uid from old to cur at now, decided by d (refresh.Decision; "" when no
// failure branch was taken): disabled or gave_up when the record became
// disabled, recovered when a success ended a run of failures. It is pure,
// so the scheduler's and the poller's plans call it.
func TransitionEvents(uid string, old, cur refresh.State, d refresh.Decision, now time.Time) []Event {
	switch {
	case cur.Disabled && !old.Disabled:
		typ := EventDisabled
		if d == refresh.GaveUp {
			typ = EventGaveUp
		}
		return []Event{{Type: typ, UID: uid, At: now, Reason: cur.DisabledReason, Attempts: cur.AttemptNo, FailingSince: cur.FailingSince}}
	case !old.FailingSince.IsZero() && cur.FailingSince.IsZero() && !cur.Disabled && !old.Disabled:
		return []Event{{Type: EventRecovered, UID: uid, At: now, Attempts: old.AttemptNo - 1, FailingSince: old.FailingSince}}
	}
	return nil
}
