package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/schedule"
	"github.com/bigtables/bigtables/store"
)

// applyMargin is how long before its deadline a result must have been pushed
// to be certain to apply despite poller kills: a killed poller's batch is
// recovered after its 2s lease, a restart takes up to 1s, and both pollers
// may be killed in a row. Workers answer within milliseconds of the 10s
// timeout's start, so nearly every result is checked.
const applyMargin = 8 * time.Second

type attemptRow struct {
	AttemptUID string    `db:"attempt_uid"`
	UID        string    `db:"uid"`
	AttemptNo  int       `db:"attempt_no"`
	Outcome    string    `db:"outcome"`
	Decision   string    `db:"decision"`
	Message    string    `db:"message"`
	FinishedAt time.Time `db:"finished_at"`
}

// check reads the final state and checks every invariant.
func (r *run) check(ctx context.Context) (Report, error) {
	rep := Report{Seed: r.cfg.Seed, Records: r.cfg.Records, Faults: r.faults, Pushed: map[string]int{}}
	var history []attemptRow
	if err := r.db.SelectContext(ctx, &history, `SELECT attempt_uid, uid, attempt_no, outcome, decision, COALESCE(message, '') AS message, finished_at
		FROM bigtable_attempts ORDER BY uid, finished_at, attempt_no`); err != nil {
		return rep, fmt.Errorf("read history: %w", err)
	}
	rep.Attempts = len(history)
	byAttempt := map[string]attemptRow{}
	byUID := map[string][]attemptRow{}
	for _, h := range history {
		byAttempt[h.AttemptUID] = h
		byUID[h.UID] = append(byUID[h.UID], h)
	}
	rows, err := r.st.List(ctx, store.ListOptions{Limit: r.cfg.Records + 1})
	if err != nil {
		return rep, err
	}
	deadRaw, err := r.rdb.LRange(ctx, r.names.Dead, 0, -1).Result()
	if err != nil {
		return rep, fmt.Errorf("read dead letters: %w", err)
	}
	dead := map[string]bool{}
	for _, d := range deadRaw {
		var env protocol.DeadLetter
		if json.Unmarshal([]byte(d), &env) == nil {
			dead[env.Raw] = true
		}
	}
	lossFrom, lossTo := r.redisDown[0].Add(-applyMargin), r.redisDown[1]
	inLossWindow := func(t time.Time) bool { return !r.redisDown[0].IsZero() && !t.Before(lossFrom) && !t.After(lossTo) }

	inv := func(name string) *Invariant {
		rep.Invariants = append(rep.Invariants, Invariant{Name: name})
		return &rep.Invariants[len(rep.Invariants)-1]
	}

	// 1. Every result pushed is accounted for: applied, stale (its attempt
	// ended otherwise) or dead-lettered; results pushed in good time outside
	// the Redis outage are applied.
	acc := inv("every result pushed is applied, stale or dead-lettered; none lost")
	failurePushed := map[string]bool{}
	for _, p := range r.pushed {
		rep.Pushed[p.kind]++
		acc.Checked++
		if p.kind == "garbage" {
			if !dead[p.raw] && p.at.After(lossTo) {
				acc.Violations = append(acc.Violations, fmt.Sprintf("garbage pushed at %s is not in the dead-letter list", p.at.Format(time.RFC3339Nano)))
			}
			continue
		}
		if p.kind == "failure" || p.kind == "not_retryable" {
			failurePushed[p.attempt] = true
		}
		h, ok := byAttempt[p.attempt]
		if !ok {
			if !inLossWindow(p.at) {
				acc.Violations = append(acc.Violations, fmt.Sprintf("%s result for attempt %s of %s: no trace of its attempt ending", p.kind, p.attempt, p.uid))
			}
			continue
		}
		want := map[string]string{"success": "success", "duplicate": "success", "late": "success", "failure": "failure", "not_retryable": "failure"}[p.kind]
		if p.at.Before(p.deadline.Add(-applyMargin)) && !inLossWindow(p.at) && h.Outcome != want {
			acc.Violations = append(acc.Violations, fmt.Sprintf("%s pushed %v before the deadline of attempt %s (%s) was not applied: it ended as %s",
				p.kind, p.deadline.Sub(p.at).Round(time.Millisecond), p.attempt, p.uid, h.Outcome))
		}
	}
	for raw := range dead {
		acc.Checked++
		if !strings.Contains(raw, `"refresh_attempt_uid": 42`) {
			acc.Violations = append(acc.Violations, "a result that is not garbage was dead-lettered: "+protocol.Clip(raw, 120))
		}
	}

	// 2. No attempt applied twice, and no failure our infrastructure made up:
	// every failure in the history is one a worker reported.
	twice := inv("no attempt applied twice; every recorded failure was reported by a worker (others end by timeout)")
	seen := map[string]bool{}
	for _, h := range history {
		twice.Checked++
		if seen[h.AttemptUID] {
			twice.Violations = append(twice.Violations, "attempt "+h.AttemptUID+" recorded twice")
		}
		seen[h.AttemptUID] = true
		if h.Outcome == "failure" && !failurePushed[h.AttemptUID] {
			twice.Violations = append(twice.Violations, fmt.Sprintf("attempt %s of %s recorded as failed but no worker reported a failure", h.AttemptUID, h.UID))
		}
	}

	// 3. attempt_no within the policy's maximum, nothing running past its
	// deadline, every record healthy or disabled with the right reason after
	// the right number of attempts.
	limits := inv("attempt_no within the policy's maximum; no running attempt past its deadline")
	states := inv("every record healthy on its schedule, or disabled with the right reason after the right number of attempts")
	now := time.Now()
	for _, row := range rows {
		limits.Checked++
		states.Checked++
		pol, err := refresh.ParsePolicy(row.Policy, nil)
		if err != nil {
			states.Violations = append(states.Violations, row.UID+": "+err.Error())
			continue
		}
		maxNo := pol.RetryStrategy().Attempts()
		if row.AttemptNo > maxNo {
			limits.Violations = append(limits.Violations, fmt.Sprintf("%s: attempt_no %d above the policy's %d", row.UID, row.AttemptNo, maxNo))
		}
		if row.Running() && row.DeadlineAt.Before(now.Add(-time.Second)) {
			limits.Violations = append(limits.Violations, fmt.Sprintf("%s: attempt running %v past its deadline", row.UID, now.Sub(row.DeadlineAt)))
		}
		hist := byUID[row.UID]
		switch {
		case row.Disabled && strings.HasPrefix(row.DisabledReason, "Provided URL is invalid: "):
			last := hist[len(hist)-1]
			if last.Decision != string(refresh.NotRetryable) || !failurePushed[last.AttemptUID] {
				states.Violations = append(states.Violations, fmt.Sprintf("%s: disabled as not retryable, but its last attempt was %s/%s", row.UID, last.Outcome, last.Decision))
			}
		case row.Disabled:
			lastErr := ""
			if len(hist) > 0 {
				lastErr = hist[len(hist)-1].Message
			}
			want := refresh.DefaultFinalReason(maxNo, lastErr)
			if row.DisabledReason != want || row.AttemptNo != maxNo || pol.OnExhausted == refresh.WaitNext {
				states.Violations = append(states.Violations, fmt.Sprintf("%s: disabled with %q at attempt_no %d; want %q (%s)", row.UID, row.DisabledReason, row.AttemptNo, want, pol.OnExhausted))
				break
			}
			// The last maxNo attempts all failed or timed out, numbered 1..maxNo.
			if len(hist) < maxNo {
				states.Violations = append(states.Violations, fmt.Sprintf("%s: disabled after %d recorded attempts; want %d", row.UID, len(hist), maxNo))
				break
			}
			for i, h := range hist[len(hist)-maxNo:] {
				if h.Outcome == "success" || h.AttemptNo != i+1 {
					states.Violations = append(states.Violations, fmt.Sprintf("%s: disabled, but attempt %d of its last %d was %s #%d", row.UID, i+1, maxNo, h.Outcome, h.AttemptNo))
					break
				}
			}
		case row.Schedule != "":
			sch, _ := schedule.Parse(row.Schedule, time.Time{})
			if row.RefreshAt.IsZero() || !sch.Next(row.RefreshAt.Add(-time.Second)).Equal(row.RefreshAt) && row.AttemptNo == 0 {
				states.Violations = append(states.Violations, fmt.Sprintf("%s: recurring but refresh_at %v is not on its schedule", row.UID, row.RefreshAt))
			}
		default:
			// One-off: refreshed (refresh_at empty, attempt_no 0) or a retry pending.
			if row.RefreshAt.IsZero() != (row.AttemptNo == 0) {
				states.Violations = append(states.Violations, fmt.Sprintf("%s: one-off with refresh_at %v and attempt_no %d", row.UID, row.RefreshAt, row.AttemptNo))
			}
		}
	}
	for i := range rep.Invariants {
		if n := len(rep.Invariants[i].Violations); n > 20 {
			rep.Invariants[i].Violations = append(rep.Invariants[i].Violations[:20], fmt.Sprintf("... and %d more", n-20))
		}
	}
	return rep, nil
}
