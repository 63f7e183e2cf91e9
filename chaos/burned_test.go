package chaos

import (
	"strings"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	deadline := at(10)
	timeout := attemptRow{AttemptUID: "a", UID: "c1", Outcome: "timeout", StartedAt: at(0), FinishedAt: at(11)}
	success := timeout
	success.Outcome = "success"
	pushAt := func(kind string, s float64) push {
		return push{attempt: "a", uid: "c1", kind: kind, at: at(s), deadline: deadline}
	}
	popAt := func(s float64) pop { return pop{attempt: "a", at: at(s), deadline: deadline} }
	restart := [2]time.Time{at(5), at(7)} // Redis killed at 5 s, back at 7 s
	for _, tc := range []struct {
		name      string
		h         attemptRow
		pushed    []push
		pops      []pop
		redisDown [2]time.Time
		forwarded map[string]time.Time
		kills     []time.Time
		burned    string // a fragment of the one burned attempt's line; "" if none
		lost      int
	}{
		{name: "success applied", h: success, pushed: []push{pushAt("success", 1)}, pops: []pop{popAt(0.1)}},
		{name: "success pushed 0.5 s before the deadline ends as timeout", h: timeout, pushed: []push{pushAt("success", 9.5)}, pops: []pop{popAt(0.1)},
			burned: "although a success was pushed 500ms before its deadline"},
		{name: "failure in time ends as timeout", h: timeout, pushed: []push{pushAt("not_retryable", 2)}, pops: []pop{popAt(0.1)}, burned: "not_retryable"},
		{name: "late answer: the timeout is right", h: timeout, pushed: []push{pushAt("late", 10.3)}, pops: []pop{popAt(0.1)}},
		{name: "garbage and poison: the worker's fault", h: timeout, pushed: []push{pushAt("garbage", 1), pushAt("poison", 1)}, pops: []pop{popAt(0.1)}},
		{name: "worker never answers", h: timeout, pops: []pop{popAt(0.1)}},
		{name: "job reached a worker after its deadline", h: timeout, pops: []pop{popAt(10.2)}, burned: "reached a worker 200ms after its deadline"},
		{name: "a duplicate copy late, the first in time", h: timeout, pops: []pop{popAt(12), popAt(0.1)}},
		{name: "job never reached a worker", h: timeout, burned: "never reached a worker: its push never reached Redis"},
		{name: "job never reached a worker, a scheduler killed meanwhile", h: timeout, kills: []time.Time{at(0.01)}, burned: "(a scheduler was killed right after the start)"},
		{name: "job pushed, never reached a worker", h: timeout, forwarded: map[string]time.Time{"a": at(0.25)}, burned: "although its push reached Redis 250ms after the start"},
		{name: "job lost with Redis's data", h: timeout, redisDown: restart, forwarded: map[string]time.Time{"a": at(0.1)}, lost: 1},
		{name: "job never pushed is not excused by the restart", h: timeout, redisDown: restart, burned: "its push never reached Redis"},
		{name: "job pushed after Redis came back is not excused", h: timeout, redisDown: restart, forwarded: map[string]time.Time{"a": at(7.5)},
			burned: "although its push reached Redis 7.5s after the start"},
		{name: "result lost with Redis's data", h: timeout, pushed: []push{pushAt("success", 1)}, pops: []pop{popAt(0.1)}, redisDown: restart, lost: 1},
		{name: "result pushed after Redis came back is not excused", h: timeout, pushed: []push{pushAt("success", 8)}, pops: []pop{popAt(0.1)},
			redisDown: restart, burned: "success"},
		{name: "attempt timed out before Redis was killed is not excused", h: attemptRow{AttemptUID: "a", UID: "c1", Outcome: "timeout", StartedAt: at(0), FinishedAt: at(4)},
			pushed: []push{pushAt("success", 1)}, pops: []pop{popAt(0.1)}, redisDown: [2]time.Time{at(4.5), at(6)}, burned: "success"},
	} {
		j := judge([]attemptRow{tc.h}, tc.pushed, tc.pops, tc.redisDown, tc.forwarded, tc.kills)
		switch {
		case tc.burned == "" && len(j.burned) > 0:
			t.Errorf("%s: burned %q; want none", tc.name, j.burned)
		case tc.burned != "" && (len(j.burned) != 1 || !strings.Contains(j.burned[0], tc.burned)):
			t.Errorf("%s: burned %q; want one line with %q", tc.name, j.burned, tc.burned)
		}
		if j.lost != tc.lost {
			t.Errorf("%s: %d lost with Redis's data; want %d", tc.name, j.lost, tc.lost)
		}
	}
}
