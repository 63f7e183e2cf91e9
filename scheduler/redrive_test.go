package scheduler

import (
	"testing"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

// The fate of an expired attempt: held while its result may still wait or
// while Redis cannot say whether its job was pushed (up to MaxResultWait),
// redriven when its push never landed (or too late to be used), timed out
// otherwise.
func TestDecideExpired(t *testing.T) {
	deadline := t0.Add(-time.Minute)
	withToken := func(tok string, st refresh.State) store.Row {
		r := row("r", policy(time.Minute), st)
		r.PushToken = tok
		return r
	}
	run := running("r", deadline.Add(-time.Minute), deadline)
	pushes := map[string]time.Time{
		"landed": deadline.Add(-50 * time.Second), // 50 s of its 1 m timeout left
		"late":   deadline.Add(-29 * time.Second), // less than half left: a worker could not use it
		"lost":   {},
	}
	opt := planOptions{timeoutUpTo: t0, pushes: pushes, unknownPushUpTo: t0.Add(-time.Hour)}
	tests := []struct {
		name string
		row  store.Row
		opt  planOptions
		want expiry
	}{
		{"nothing runs", withToken("", refresh.State{RefreshAt: t0}), opt, notExpired},
		{"deadline ahead", withToken("lost", running("r", t0, t0.Add(time.Second))), opt, notExpired},
		{"push landed: timeout", withToken("landed", run), opt, timeOutExpired},
		{"push never landed: redrive", withToken("lost", run), opt, redriveExpired},
		{"push landed too late to be used: redrive", withToken("late", run), opt, redriveExpired},
		{"no token (started before tokens): timeout", withToken("", run), opt, timeOutExpired},
		{"the watermark has not reached the deadline: held, even if never pushed",
			withToken("lost", run), planOptions{timeoutUpTo: deadline.Add(-time.Microsecond), pushes: pushes}, holdExpired},
		{"Redis could not be asked: held", withToken("lost", run),
			planOptions{timeoutUpTo: t0, unknownPushUpTo: deadline.Add(-time.Microsecond)}, holdExpired},
		{"Redis could not be asked for MaxResultWait: timeout", withToken("lost", run),
			planOptions{timeoutUpTo: t0, unknownPushUpTo: deadline}, timeOutExpired},
		{"token absent from the answer: held", withToken("other", run), opt, holdExpired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideExpired(tc.row, t0, tc.opt); got != tc.want {
				t.Errorf("decideExpired = %d; want %d", got, tc.want)
			}
		})
	}
}

// A redriven start leaves no history and burns no attempt: the same tick
// starts the record again with the same attempt_no, recording the tick's
// push token, and tells the lost attempt's worker (if any) to stop.
func TestPlanTickRedrives(t *testing.T) {
	deadline := t0.Add(-time.Minute)
	st := running("r", deadline.Add(-time.Minute), deadline)
	st.AttemptNo = 2
	st.FailingSince = t0.Add(-time.Hour)
	r := row("r", policy(time.Minute), st)
	r.PushToken = "lost"
	n := 0
	p, err := planTick([]store.Row{r}, t0, planOptions{
		rules: refresh.NewRulesCache(0).Get, draw: func() float64 { return 0 },
		newUID: func() string { n++; return "new-uid" }, timeoutUpTo: t0,
		pushToken: "tick-token", pushes: map[string]time.Time{"lost": {}}, unknownPushUpTo: t0.Add(-time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.redriven) != 1 || p.timedOut != 0 || len(p.ended) != 0 || p.held != 0 {
		t.Fatalf("plan %+v; want one redrive, no timeout, no history", p)
	}
	if d, ok := p.cancel["att-r"]; !ok || !d.Equal(deadline) {
		t.Errorf("cancel %v; want the lost attempt marked", p.cancel)
	}
	if len(p.starts) != 1 || len(p.save) != 1 {
		t.Fatalf("plan %+v; want the record started again in the same tick", p)
	}
	saved := p.save[0]
	if saved.AttemptUID != "new-uid" || saved.AttemptNo != 2 || !saved.StartedAt.Equal(t0) || !saved.DeadlineAt.Equal(t0.Add(time.Minute)) ||
		!saved.FailingSince.Equal(st.FailingSince) || saved.PushToken != "tick-token" {
		t.Errorf("saved %+v (token %q); want attempt 2 again, started now with a full timeout, the tick's token", saved.State, saved.PushToken)
	}
	if j := p.starts[0].job; j.AttemptNo != 2 || j.AttemptUID != "new-uid" {
		t.Errorf("job %+v; want attempt 2 again", j)
	}
}
