package scheduler

import (
	"fmt"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// planOptions are what a tick's decisions depend on besides the rows and
// now; each is a value or a pure function, so a plan is computed without
// a database, Redis or a clock.
type planOptions struct {
	// rules parses a row's stored schedule and policy.
	rules func(schedule string, policy []byte) (refresh.Rules, error)
	// draw returns uniform random numbers in [0, 1) for randomized retries.
	draw func() float64
	// newUID returns a new attempt uid.
	newUID func() string
	// timeoutUpTo is the latest deadline that may be timed out (see
	// timeoutUpTo): an attempt past its deadline but after it is held.
	timeoutUpTo time.Time
	// pushToken is the token of the tick's push, recorded on every start.
	pushToken string
	// pushes says, for the push tokens of the expired rows, when their push
	// landed, zero if never (see decideExpired); nil when Redis could not
	// be asked.
	pushes map[string]time.Time
	// unknownPushUpTo is the latest deadline timed out although whether its
	// job was pushed is unknown (now - MaxResultWait).
	unknownPushUpTo time.Time
	// upstreams are the locked upstreams of the rows, by name: their
	// breakers and limits decide the starts (see upstreams.go). A row whose
	// upstream is absent starts unlimited.
	upstreams map[string]*upstream.Upstream
}

// start is one attempt started by a tick: its job, and what undoing it
// needs.
type start struct {
	job           protocol.Job
	startedAt     time.Time
	prevRefreshAt time.Time // refresh_at before the start, restored by an undo
}

// unreadable is a row the tick disabled because its stored rules cannot be
// read (not to be confused with a row parked by its upstream's breaker).
type unreadable struct {
	uid    string
	reason string
}

// tickPlan is everything one tick decided, for the claim's transaction to
// write and for the code after the commit to push.
type tickPlan struct {
	save         []store.Row          // rows whose state changed, to write in the transaction
	ended        []store.Attempt      // attempts that ended (timed out, or ended by disabling an unreadable row), for the history
	starts       []start              // attempts started: their jobs go out after the commit
	cancel       map[string]time.Time // attempts that ended, by uid, with their deadlines: tell their workers to stop
	unreadable   []unreadable         // rows disabled because their rules cannot be read
	redriven     []redriven           // starts undone because their jobs were never pushed (started again)
	events       []store.Event        // the transitions' events, written in the same transaction
	upstreamPlan                      // rows parked by open breakers, held by limits, breaker transitions
	// timedOut counts attempts failed with "timeout", disabled the records
	// such a failure disabled, held the timeouts waiting for the pollers.
	timedOut, disabled, held int
}

// timeoutUpTo is the latest deadline a tick at now may time out. A result
// is on time when it reached the output list before its attempt's deadline,
// however late a poller applies it; the watermark is a time before which
// every result pushed has been applied. So an attempt whose deadline is at
// or before the watermark has had its on-time result applied if there was
// one, and may be timed out; a later one waits, but no longer than
// maxResultWait after its deadline (pollers down for good must not freeze
// every record).
func timeoutUpTo(now, watermark time.Time, maxResultWait time.Duration) time.Time {
	upTo := now.Add(-maxResultWait)
	if watermark.After(upTo) {
		upTo = watermark
	}
	if upTo.After(now) {
		upTo = now
	}
	return upTo
}

// planTick decides one tick over the claimed rows at now: it times out the
// expired attempts it may (holding the others), starts the due rows (or
// parks them when their upstream's breaker is open), and disables rows
// whose stored schedule or policy cannot be read, with the parse error as
// the reason, so they leave the due set instead of being claimed first at
// every tick. An unreadable row's running attempt ends as "cancelled". An error means a bug: a row that was due
// could not be started.
func planTick(rows []store.Row, now time.Time, opt planOptions) (tickPlan, error) {
	p := tickPlan{cancel: map[string]time.Time{}}
	for _, row := range rows {
		st := row.State
		exp := decideExpired(row, now, opt)
		if exp == holdExpired {
			p.held++ // its result, or its push, may still come
			continue
		}
		rules, err := opt.rules(row.Schedule, row.Policy)
		if err != nil {
			reason := unreadableReason(err)
			if st.Running() {
				p.ended = append(p.ended, store.Ended(row.UID, st, now, store.OutcomeCancelled, reason, ""))
				p.cancel[st.AttemptUID] = st.DeadlineAt
			}
			row.State = disableUnreadable(st, reason)
			p.events = append(p.events, store.TransitionEvents(row.UID, st, row.State, "", now)...)
			p.save = append(p.save, row)
			p.unreadable = append(p.unreadable, unreadable{uid: row.UID, reason: reason})
			continue
		}
		rules = rules.ForRecord(row.UID)
		changed := false
		if exp == redriveExpired {
			p.redriven = append(p.redriven, redriven{uid: row.UID, attemptUID: st.AttemptUID, attemptNo: st.AttemptNo})
			p.cancel[st.AttemptUID] = st.DeadlineAt // in case its job turns up after all
			st = redrive(st, now)
			changed = true
		}
		if exp == timeOutExpired {
			old := st
			var step refresh.Step
			st, step, err = rules.TimeOut(st, now, opt.draw())
			if err != nil {
				return tickPlan{}, fmt.Errorf("time out %s: %w", row.UID, err) // TimedOut was checked: a bug
			}
			p.timedOut++
			if st.Disabled {
				p.disabled++
			}
			p.ended = append(p.ended, store.Ended(row.UID, old, now, store.OutcomeTimeout, "timeout", step.Decision))
			p.events = append(p.events, store.TransitionEvents(row.UID, old, st, step.Decision, now)...)
			p.cancel[old.AttemptUID] = old.DeadlineAt
			p.observe(opt.upstreams, row.Upstream, now)
			changed = true
		}
		if st.Due(now) && p.admit(opt.upstreams, row, now) {
			prev := st.RefreshAt
			st, err = rules.Start(st, now, opt.newUID())
			if err != nil {
				return tickPlan{}, fmt.Errorf("start %s: %w", row.UID, err) // Due was checked: a bug
			}
			p.starts = append(p.starts, start{
				job: protocol.Job{BigTableUID: row.UID, AttemptUID: st.AttemptUID, InputURL: row.InputURL,
					AttemptNo: st.AttemptNo, DeadlineAt: st.DeadlineAt},
				startedAt: st.StartedAt, prevRefreshAt: prev,
			})
			row.PushToken = opt.pushToken
			changed = true
		}
		if changed {
			if !st.Running() {
				row.PushToken = ""
			}
			row.State = st
			p.save = append(p.save, row)
		}
	}
	return p, nil
}

// unreadableReason is the disabled reason of a row whose rules cannot be
// read.
func unreadableReason(err error) string {
	return fmt.Sprintf("Cannot refresh BigTable: its %v (a manual update with a valid schedule and policy re-enables it)", err)
}

// disableUnreadable disables a record whose rules cannot be read: no
// attempt runs and nothing is planned until a person updates it.
// attempt_no is kept.
func disableUnreadable(s refresh.State, reason string) refresh.State {
	s.AttemptUID, s.StartedAt, s.DeadlineAt = "", time.Time{}, time.Time{}
	s.RefreshAt = time.Time{}
	s.Disabled, s.DisabledReason = true, reason
	return s
}

// minUsable is the share of its timeout a job must still have when it lands
// in the input list for its attempt to count: a job that lands later (Redis
// down for a while, a slow retry) is undone and started again with its full
// timeout, instead of burning an attempt its worker could not use.
const minUsable = 0.5

// lateStarts returns the starts whose jobs, landed at landed (Redis' clock),
// have less than minUsable of their timeout left, or none. The database's
// and Redis' clocks must agree to well within half the shortest timeout.
func lateStarts(starts []start, landed time.Time) []start {
	var late []start
	for _, s := range starts {
		if unusable(s.startedAt, s.job.DeadlineAt, landed) {
			late = append(late, s)
		}
	}
	return late
}
