package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/schedule"
	"github.com/bigtables/bigtables/store"
)

// applyMargin absorbs clock granularity only. Lateness is judged by when a
// result reached Redis, so any result pushed before its attempt's deadline
// must be applied however long the pollers take. A push's time here is read
// after its RPUSH returned, so Redis stored it no later; Redis, PostgreSQL
// and this process read one machine clock, and PostgreSQL keeps
// microseconds (rounding, not truncating): a millisecond covers it.
const applyMargin = time.Millisecond

type attemptRow struct {
	AttemptUID string    `db:"attempt_uid"`
	UID        string    `db:"uid"`
	AttemptNo  int       `db:"attempt_no"`
	Outcome    string    `db:"outcome"`
	Decision   string    `db:"decision"`
	StartedAt  time.Time `db:"started_at"`
	Message    string    `db:"message"`
	FinishedAt time.Time `db:"finished_at"`
}

// normRaw is a raw value as it reads back from a dead letter: JSON encoding
// replaces invalid UTF-8.
func normRaw(s string) string {
	b, _ := json.Marshal(s)
	var out string
	json.Unmarshal(b, &out)
	return out
}

// check reads the final state and checks every invariant.
func (r *run) check(ctx context.Context) (Report, error) {
	rep := Report{Seed: r.cfg.Seed, Records: r.cfg.Records, Faults: r.faults, Pushed: map[string]int{}, Refusal: r.refusal}
	var history []attemptRow
	if err := r.db.SelectContext(ctx, &history, `SELECT attempt_uid, uid, attempt_no, outcome, decision, COALESCE(message, '') AS message, started_at, finished_at
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
	rows, err := r.st.List(ctx, store.ListOptions{Limit: r.cfg.Records + len(r.unreadable) + 1})
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
	lossTo := r.redisDown[1]
	// A garbage or poison value pushed before Redis came back may have been
	// dead-lettered into the Redis that was lost.
	lostDeadLetter := func(t time.Time) bool { return !r.redisDown[0].IsZero() && !t.After(lossTo) }

	inv := func(name string) *Invariant {
		rep.Invariants = append(rep.Invariants, Invariant{Name: name})
		return &rep.Invariants[len(rep.Invariants)-1]
	}

	// 1. Every result pushed is accounted for: applied, stale (its attempt
	// ended otherwise, or its start was undone) or dead-lettered.
	acc := inv("every result pushed is applied, stale or dead-lettered; garbage and poison are dead-lettered (poison may be applied cleaned)")
	failurePushed := map[string]bool{}
	expectedDead := map[string]bool{}
	undone := map[string]bool{}
	for _, p := range r.pushed {
		rep.Pushed[p.kind]++
		acc.Checked++
		h, ok := byAttempt[p.attempt]
		switch p.kind {
		case "garbage":
			expectedDead[normRaw(p.raw)] = true
			if !dead[normRaw(p.raw)] && !lostDeadLetter(p.at) {
				acc.Violations = append(acc.Violations, fmt.Sprintf("garbage pushed at %s is not in the dead-letter list", p.at.Format(time.RFC3339Nano)))
			}
			continue
		case "poison":
			expectedDead[normRaw(p.raw)] = true
			if p.want == "failure" {
				failurePushed[p.attempt] = true
			}
			switch {
			case dead[normRaw(p.raw)], lostDeadLetter(p.at), p.want == "success or stale":
			case ok && h.Outcome == p.want: // cleaned and applied
			default:
				acc.Violations = append(acc.Violations, fmt.Sprintf("poison result for attempt %s of %s is neither dead-lettered nor applied (attempt ended as %q): %q",
					p.attempt, p.uid, h.Outcome, protocol.Clip(p.raw, 160)))
			}
			continue
		case "failure", "not_retryable":
			failurePushed[p.attempt] = true
		}
		if !ok {
			// The attempt never ended: its start was undone (the push was
			// reported failed although it landed), so its result is stale.
			undone[p.attempt] = true
		}
	}
	rep.UndoneStarts = len(undone)
	for raw := range dead {
		acc.Checked++
		if !expectedDead[raw] {
			acc.Violations = append(acc.Violations, "a result that is neither garbage nor poison was dead-lettered: "+protocol.Clip(raw, 120))
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
		if _, ok := r.unreadable[row.UID]; ok {
			continue
		}
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
	// 4. Rows nobody can read are disabled, not retried at every tick.
	parked := inv("rows with an unreadable schedule or policy end disabled with the parse error as reason, never started")
	for _, row := range rows {
		want, ok := r.unreadable[row.UID]
		if !ok {
			continue
		}
		parked.Checked++
		switch {
		case !row.Disabled || !strings.Contains(row.DisabledReason, want):
			parked.Violations = append(parked.Violations, fmt.Sprintf("%s: disabled %v with reason %q; want disabled with a reason showing %q", row.UID, row.Disabled, row.DisabledReason, want))
		case row.Running() || len(byUID[row.UID]) > 0:
			parked.Violations = append(parked.Violations, fmt.Sprintf("%s: unreadable, yet %d attempts ran", row.UID, len(byUID[row.UID])))
		}
	}
	if parked.Checked != len(r.unreadable) {
		parked.Violations = append(parked.Violations, fmt.Sprintf("%d unreadable rows written, %d found", len(r.unreadable), parked.Checked))
	}

	// 5. A poller id held by a live poller is refused.
	dup := inv("a second poller with a live poller's id is refused (exits non-zero, naming the id)")
	dup.Checked = r.faults[faultDuplicateID] + len(r.duplicateViolations)
	dup.Violations = append(dup.Violations, r.duplicateViolations...)

	// 6. Each job reaches the workers once. A push whose reply was lost as
	// Redis was killed is retried into the new, empty Redis, which no longer
	// knows the push's token: a copy popped before the kill and one after
	// the restart are Redis's lost data, not a duplicate push.
	once := inv("each attempt's job reaches the workers at most once")
	popsOf := map[string][]time.Time{}
	for _, p := range r.pops {
		popsOf[p.attempt] = append(popsOf[p.attempt], p.at)
	}
	for a, ts := range popsOf {
		once.Checked++
		if len(ts) < 2 {
			continue
		}
		slices.SortFunc(ts, time.Time.Compare)
		if len(ts) == 2 && !r.redisDown[0].IsZero() && ts[0].Before(r.redisDown[0]) && ts[1].After(r.redisDown[1]) {
			continue
		}
		var at []string
		for _, t := range ts {
			at = append(at, t.Format("15:04:05.000"))
		}
		once.Violations = append(once.Violations, fmt.Sprintf("the job of attempt %s reached the workers %d times, at %s (Redis restarted empty %s-%s)",
			a, len(ts), strings.Join(at, ", "), r.redisDown[0].Format("15:04:05.000"), r.redisDown[1].Format("15:04:05.000")))
	}

	// 7. Our faults burn no attempt.
	burn := inv("no attempt burned by our faults: results pushed before the deadline are applied, jobs reach a worker before it")
	j := judge(history, r.pushed, r.pops, r.redisDown, r.proxy.forwarded(), r.schedulerKills)
	burn.Checked = len(history)
	burn.Violations = j.burned
	rep.Burned, rep.LostWithRedis = len(j.burned), j.lost

	for i := range rep.Invariants {
		if n := len(rep.Invariants[i].Violations); n > 20 {
			rep.Invariants[i].Violations = append(rep.Invariants[i].Violations[:20], fmt.Sprintf("... and %d more", n-20))
		}
	}
	return rep, nil
}
