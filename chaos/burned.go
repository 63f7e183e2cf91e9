package chaos

import (
	"fmt"
	"sort"
	"time"
)

// judgement is what judge found: each attempt our faults burned, with why,
// and how many attempts were lost with Redis's data.
type judgement struct {
	burned []string
	lost   int
}

// answers are the kinds of result that end an attempt when applied.
var answers = map[string]bool{"success": true, "duplicate": true, "failure": true, "not_retryable": true}

// judge finds the attempts our own faults burned: attempts that ended as
// timeout although a worker pushed a success or failure for them before
// their deadline, and attempts whose job reached the workers only after its
// deadline, or never while Redis held it. An attempt whose job (forwarded
// to Redis before the kill, by the proxy's record) or result was in Redis
// when Redis was restarted empty (redisDown: when it was killed, when it
// answered again) is lost with Redis's data, not burned.
// For a job that never reached a worker, the line says whether a job for
// the attempt was forwarded to Redis (forwarded: when, by the proxy) and, if
// not, whether a scheduler was killed within pushWindow of the start
// (schedulerKills).
func judge(history []attemptRow, pushed []push, pops []pop, redisDown [2]time.Time, forwarded map[string]time.Time, schedulerKills []time.Time) judgement {
	inTime := map[string][]push{}
	for _, p := range pushed {
		if answers[p.kind] && p.at.Before(p.deadline.Add(-applyMargin)) {
			inTime[p.attempt] = append(inTime[p.attempt], p)
		}
	}
	firstPop := map[string]pop{}
	for _, p := range pops {
		if f, ok := firstPop[p.attempt]; !ok || p.at.Before(f.at) {
			firstPop[p.attempt] = p
		}
	}
	killed := redisDown[0]
	restarted := !killed.IsZero()
	var j judgement
	for _, h := range history {
		if h.Outcome != "timeout" {
			continue
		}
		endedAfterKill := restarted && !h.FinishedAt.Before(killed)
		if ps := inTime[h.AttemptUID]; len(ps) > 0 {
			allBeforeKill := true
			for _, p := range ps {
				allBeforeKill = allBeforeKill && restarted && p.at.Before(killed)
			}
			if allBeforeKill && endedAfterKill {
				j.lost++
				continue
			}
			p := ps[0]
			j.burned = append(j.burned, fmt.Sprintf("attempt %s of %s ended as timeout although a %s was pushed %v before its deadline",
				h.AttemptUID, h.UID, p.kind, p.deadline.Sub(p.at).Round(time.Millisecond)))
			continue
		}
		if p, ok := firstPop[h.AttemptUID]; ok {
			if p.at.After(p.deadline.Add(applyMargin)) {
				j.burned = append(j.burned, fmt.Sprintf("the job of attempt %s of %s reached a worker %v after its deadline",
					h.AttemptUID, h.UID, p.at.Sub(p.deadline).Round(time.Millisecond)))
			}
			continue
		}
		at, sent := forwarded[h.AttemptUID]
		if sent && restarted && at.Before(killed) && endedAfterKill {
			j.lost++ // it waited in the list Redis lost
			continue
		}
		why := ": its push never reached Redis"
		if sent {
			why = fmt.Sprintf(" although its push reached Redis %v after the start", at.Sub(h.StartedAt).Round(time.Millisecond))
		} else if killedDuring(schedulerKills, h.StartedAt, h.StartedAt.Add(pushWindow)) {
			why += " (a scheduler was killed right after the start)"
		}
		j.burned = append(j.burned, fmt.Sprintf("the job of attempt %s of %s never reached a worker%s", h.AttemptUID, h.UID, why))
	}
	sort.Strings(j.burned)
	return j
}

// pushWindow is how long after its start an attempt's push may still be
// under way: go-redis retries for about 1.7 s and the scheduler tries again.
const pushWindow = 5 * time.Second

// killedDuring reports whether a kill happened in [from, to].
func killedDuring(kills []time.Time, from, to time.Time) bool {
	for _, k := range kills {
		if !k.Before(from) && !k.After(to) {
			return true
		}
	}
	return false
}
