package scheduler

import (
	"context"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

// expiry is what a tick does with a claimed row, as far as its running
// attempt's deadline is concerned.
type expiry int

const (
	notExpired     expiry = iota // no attempt runs, or its deadline is ahead
	holdExpired                  // past its deadline, but not yet decided: its result or its push's fate is unknown
	timeOutExpired               // past its deadline: fails with reason "timeout" (T3)
	redriveExpired               // past its deadline, and its job was never pushed, or too late to be used: the start is undone and made again (T8)
)

// decideExpired decides the fate of a row's expired attempt. An attempt is
// timed out only once the watermark allows it (opt.timeoutUpTo). Then, if
// the row records the push token of the tick that started it, the answer
// of queue.SettlePushes for that token (opt.pushes) decides: a push that
// never landed means no worker ever had the job (a scheduler killed between
// its commit and its push, a push lost on the way, Redis restarted without
// its data), so the start is redriven instead of burning an attempt; so is
// one that landed too late for a worker to use it (the rule of lateStarts,
// which the pushing scheduler may not have applied yet: it undoes such
// starts right after its push, and this closes the window before that
// undo); a push that landed in time times out as usual. When Redis could not be asked (the token
// is absent from opt.pushes) the timeout is held, but no longer than up to
// opt.unknownPushUpTo (MaxResultWait past the deadline). A row without a
// token (started before tokens were recorded) times out as before.
func decideExpired(row store.Row, now time.Time, opt planOptions) expiry {
	st := row.State
	switch {
	case !st.TimedOut(now):
		return notExpired
	case st.DeadlineAt.After(opt.timeoutUpTo):
		return holdExpired // its result may still be waiting for a poller
	case row.PushToken == "":
		return timeOutExpired
	}
	landed, known := opt.pushes[row.PushToken]
	switch {
	case known && (landed.IsZero() || unusable(st.StartedAt, st.DeadlineAt, landed)):
		return redriveExpired
	case known:
		return timeOutExpired
	case st.DeadlineAt.After(opt.unknownPushUpTo):
		return holdExpired
	default:
		return timeOutExpired
	}
}

// unusable reports whether a job of an attempt started at startedAt with
// the given deadline, landed in the input list at landed (Redis' clock),
// had less than minUsable of its timeout left.
func unusable(startedAt, deadline, landed time.Time) bool {
	return deadline.Sub(landed) < time.Duration(float64(deadline.Sub(startedAt))*minUsable)
}

// redrive undoes a start whose job was never pushed: the attempt is
// cleared, attempt_no goes back to what it was before the start, and the
// record is due at once, so the same tick starts it again with a new
// attempt (and a full timeout). Nothing else of the state changed at the
// start, so nothing else is restored.
func redrive(st refresh.State, now time.Time) refresh.State {
	st.AttemptUID, st.StartedAt, st.DeadlineAt = "", time.Time{}, time.Time{}
	st.AttemptNo = max(st.AttemptNo-1, 0)
	st.RefreshAt = now
	return st
}

// redriven is a start a tick undid because its job was never pushed.
type redriven struct {
	uid        string
	attemptUID string
	attemptNo  int
}

// expiredTokens returns the distinct push tokens of the claimed rows whose
// attempt the tick may time out at now (deadline at or before upTo).
func expiredTokens(rows []store.Row, now, upTo time.Time) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rows {
		if r.PushToken == "" || seen[r.PushToken] || !r.TimedOut(now) || r.DeadlineAt.After(upTo) {
			continue
		}
		seen[r.PushToken] = true
		out = append(out, r.PushToken)
	}
	return out
}

// settleTimeout bounds the one round trip that asks Redis which pushes
// landed: the claimed rows stay locked meanwhile.
const settleTimeout = 3 * time.Second

// settle asks Redis which of the expired rows' pushes landed. On error
// the answer is nil: those timeouts are held (bounded by MaxResultWait).
func (s *Scheduler) settle(ctx context.Context, rows []store.Row, now, upTo time.Time) (map[string]time.Time, error) {
	tokens := expiredTokens(rows, now, upTo)
	if len(tokens) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	return s.settlePushes(ctx, tokens)
}

// pushTokenTTL is how long a tick's push token must stay in Redis: until
// the last of its attempts may be timed out (its deadline plus
// MaxResultWait), and a margin for a late tick. A token that expired
// earlier would make a timed-out attempt look never pushed.
func pushTokenTTL(starts []start, maxResultWait time.Duration) time.Duration {
	var longest time.Duration
	for _, st := range starts {
		longest = max(longest, st.job.DeadlineAt.Sub(st.startedAt))
	}
	return longest + maxResultWait + pushTokenMargin
}

// pushTokenMargin is how long a push token outlives the latest moment one
// of its attempts may be timed out.
const pushTokenMargin = 10 * time.Minute
