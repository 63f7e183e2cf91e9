package scheduler

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

var t0 = time.Date(2031, 3, 4, 12, 0, 0, 0, time.UTC)

func policy(timeout time.Duration, retries ...time.Duration) []byte {
	p := refresh.DefaultPolicy()
	p.Timeout = refresh.Duration(timeout)
	if retries != nil {
		p.Retries = []refresh.Duration{}
		for _, r := range retries {
			p.Retries = append(p.Retries, refresh.Duration(r))
		}
	}
	return p.JSON()
}

func row(uid string, pol []byte, st refresh.State) store.Row {
	return store.Row{UID: uid, Definition: store.Definition{InputURL: "http://x/" + uid, Policy: pol}, State: st}
}

func running(uid string, started, deadline time.Time) refresh.State {
	return refresh.State{AttemptUID: "att-" + uid, AttemptNo: 1, StartedAt: started, DeadlineAt: deadline}
}

func TestPlanTick(t *testing.T) {
	daily := "DTSTART:20310101T000000Z\nRRULE:FREQ=DAILY"
	badPolicy := []byte(`{"timeout": "forever"}`)
	tests := []struct {
		name  string
		rows  []store.Row
		upTo  time.Time
		check func(t *testing.T, p tickPlan)
	}{{
		name: "a due row starts",
		rows: []store.Row{func() store.Row {
			r := row("due", policy(time.Hour), refresh.State{RefreshAt: t0.Add(-time.Minute)})
			r.Schedule = daily
			return r
		}()},
		upTo: t0,
		check: func(t *testing.T, p tickPlan) {
			if len(p.starts) != 1 || len(p.save) != 1 || len(p.ended) != 0 || len(p.cancel) != 0 {
				t.Fatalf("plan %+v; want one start", p)
			}
			j := p.starts[0].job
			if j.BigTableUID != "due" || j.AttemptUID != "uid-1" || j.AttemptNo != 1 || !j.DeadlineAt.Equal(t0.Add(time.Hour)) || j.InputURL != "http://x/due" {
				t.Errorf("job %+v", j)
			}
			if !p.starts[0].prevRefreshAt.Equal(t0.Add(-time.Minute)) || !p.starts[0].startedAt.Equal(t0) {
				t.Errorf("start %+v; want the old refresh_at kept for an undo", p.starts[0])
			}
			if s := p.save[0].State; s.AttemptUID != "uid-1" || !s.RefreshAt.Equal(time.Date(2031, 3, 5, 0, 0, 0, 0, time.UTC)) {
				t.Errorf("saved %+v; want running, refresh_at the next day", s)
			}
		},
	}, {
		name: "an expired attempt times out and, with a retry delay of 0, starts again",
		rows: []store.Row{row("slow", policy(time.Minute), running("slow", t0.Add(-2*time.Minute), t0.Add(-time.Minute)))},
		upTo: t0.Add(-time.Minute),
		check: func(t *testing.T, p tickPlan) {
			if p.timedOut != 1 || len(p.starts) != 1 || p.held != 0 || p.disabled != 0 || len(p.events) != 0 {
				t.Fatalf("plan %+v; want a timeout and a start, no event", p)
			}
			want := store.Attempt{AttemptUID: "att-slow", UID: "slow", AttemptNo: 1, StartedAt: t0.Add(-2 * time.Minute),
				FinishedAt: t0, Outcome: store.OutcomeTimeout, Message: "timeout", Decision: string(refresh.RetryNoPlan)}
			if len(p.ended) != 1 || p.ended[0] != want {
				t.Errorf("ended %+v; want %+v", p.ended, want)
			}
			if d, ok := p.cancel["att-slow"]; !ok || !d.Equal(t0.Add(-time.Minute)) {
				t.Errorf("cancel %v; want the timed-out attempt with its deadline", p.cancel)
			}
			if p.starts[0].job.AttemptNo != 2 || len(p.save) != 1 {
				t.Errorf("restart %+v, %d saved", p.starts[0].job, len(p.save))
			}
		},
	}, {
		name: "a timeout that is a final failure disables",
		rows: []store.Row{row("last", policy(time.Minute, []time.Duration{}...), running("last", t0.Add(-2*time.Minute), t0.Add(-time.Minute)))},
		upTo: t0,
		check: func(t *testing.T, p tickPlan) {
			if p.timedOut != 1 || p.disabled != 1 || len(p.starts) != 0 || !p.save[0].Disabled {
				t.Errorf("plan %+v; want the record disabled", p)
			}
			want := store.Event{Type: store.EventDisabled, UID: "last", At: t0, Reason: "Cannot refresh BigTable after 1 attempt: timeout",
				Attempts: 1, FailingSince: t0.Add(-2 * time.Minute)}
			if len(p.events) != 1 || !reflect.DeepEqual(p.events[0], want) {
				t.Errorf("events %+v; want %+v", p.events, want)
			}
		},
	}, {
		name: "an expired attempt after the watermark is held: nothing changes",
		rows: []store.Row{row("wait", policy(time.Minute), running("wait", t0.Add(-2*time.Minute), t0.Add(-time.Minute)))},
		upTo: t0.Add(-time.Minute - time.Microsecond),
		check: func(t *testing.T, p tickPlan) {
			if p.held != 1 || p.timedOut != 0 || len(p.save)+len(p.ended)+len(p.starts)+len(p.cancel) != 0 {
				t.Errorf("plan %+v; want one held timeout and nothing else", p)
			}
		},
	}, {
		name: "unreadable rows are disabled, a running one's attempt ends as cancelled",
		rows: []store.Row{
			row("bad-due", badPolicy, refresh.State{RefreshAt: t0.Add(-time.Hour), AttemptNo: 2}),
			func() store.Row {
				r := row("bad-schedule", policy(time.Hour), running("bad-schedule", t0.Add(-2*time.Hour), t0.Add(-time.Hour)))
				r.Schedule = "RRULE:FREQ=SOMETIMES"
				return r
			}(),
			row("good", policy(time.Hour), refresh.State{RefreshAt: t0}),
		},
		upTo: t0,
		check: func(t *testing.T, p tickPlan) {
			if len(p.unreadable) != 2 || len(p.starts) != 1 || p.starts[0].job.BigTableUID != "good" || len(p.save) != 3 {
				t.Fatalf("plan %+v; want two disabled as unreadable and the good row started", p)
			}
			for i, want := range []string{"stored policy", "stored schedule"} {
				s := p.save[i].State
				if !s.Disabled || !strings.Contains(s.DisabledReason, want) || s.Running() || !s.RefreshAt.IsZero() || !s.DeadlineAt.IsZero() {
					t.Errorf("unreadable %s: %+v; want disabled with the %s's error, nothing running or planned", p.save[i].UID, s, want)
				}
				if p.unreadable[i].reason != s.DisabledReason {
					t.Errorf("unreadable reason %q; saved %q", p.unreadable[i].reason, s.DisabledReason)
				}
			}
			if p.save[0].AttemptNo != 2 {
				t.Errorf("attempt_no %d; want it kept", p.save[0].AttemptNo)
			}
			if len(p.events) != 2 || p.events[0].Type != store.EventDisabled || p.events[0].UID != "bad-due" ||
				p.events[0].Reason != p.save[0].DisabledReason || p.events[1].UID != "bad-schedule" {
				t.Errorf("events %+v; want a disabled event per unreadable row, with its reason", p.events)
			}
			if len(p.ended) != 1 || p.ended[0].Outcome != store.OutcomeCancelled || p.ended[0].AttemptUID != "att-bad-schedule" ||
				!strings.Contains(p.ended[0].Message, "stored schedule") {
				t.Errorf("ended %+v; want the running attempt cancelled with the reason", p.ended)
			}
			if _, ok := p.cancel["att-bad-schedule"]; !ok || len(p.cancel) != 1 {
				t.Errorf("cancel %v", p.cancel)
			}
		},
	}, {
		name: "an unreadable running row is held like any timeout",
		rows: []store.Row{row("bad-wait", badPolicy, running("bad-wait", t0.Add(-2*time.Minute), t0.Add(-time.Minute)))},
		upTo: t0.Add(-time.Hour),
		check: func(t *testing.T, p tickPlan) {
			if p.held != 1 || len(p.unreadable)+len(p.save)+len(p.ended) != 0 {
				t.Errorf("plan %+v; want it held, not disabled yet", p)
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			p, err := planTick(tc.rows, t0, planOptions{
				rules:       refresh.NewRulesCache(0).Get,
				draw:        func() float64 { return 0.5 },
				newUID:      func() string { n++; return fmt.Sprintf("uid-%d", n) },
				timeoutUpTo: tc.upTo,
			})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p)
		})
	}
}

func TestTimeoutUpTo(t *testing.T) {
	for _, tc := range []struct {
		name      string
		watermark time.Time
		want      time.Time
	}{
		{"no watermark: only attempts past by the maximum wait", time.Time{}, t0.Add(-time.Hour)},
		{"pollers behind: the watermark", t0.Add(-time.Minute), t0.Add(-time.Minute)},
		{"watermark older than the maximum wait", t0.Add(-2 * time.Hour), t0.Add(-time.Hour)},
		{"watermark ahead of now (clocks apart): now", t0.Add(time.Minute), t0},
	} {
		if got := timeoutUpTo(t0, tc.watermark, time.Hour); !got.Equal(tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
	}
}

func TestLateStarts(t *testing.T) {
	mk := func(uid string, timeout time.Duration) start {
		s := start{startedAt: t0}
		s.job.BigTableUID, s.job.DeadlineAt = uid, t0.Add(timeout)
		return s
	}
	starts := []start{mk("hour", time.Hour), mk("ten", 10*time.Second), mk("two", 2*time.Second)}
	for _, tc := range []struct {
		landed time.Time
		want   string
	}{
		{t0.Add(50 * time.Millisecond), "[]"},
		{t0.Add(time.Second), "[]"}, // half of two's timeout left: still usable
		{t0.Add(time.Second + time.Microsecond), "[two]"},
		{t0.Add(5*time.Second + time.Microsecond), "[ten two]"},
		{t0.Add(3 * time.Second), "[two]"}, // after two's deadline
		{t0.Add(2 * time.Hour), "[hour ten two]"},
	} {
		var got []string
		for _, s := range lateStarts(starts, tc.landed) {
			got = append(got, s.job.BigTableUID)
		}
		if fmt.Sprint(got) != tc.want && !(tc.want == "[]" && got == nil) {
			t.Errorf("landed %v after the start: late %v; want %s", tc.landed.Sub(t0), got, tc.want)
		}
	}
}
