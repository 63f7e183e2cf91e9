package refresh

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/schedule"
)

// day is the date all timelines run on; at(hh:mm) is a time on it.
func at(hhmm string) time.Time {
	t, err := time.Parse("2006-01-02 15:04:05", "2024-03-04 "+hhmm+":00")
	if len(hhmm) > 5 {
		t, err = time.Parse("2006-01-02 15:04:05", "2024-03-04 "+hhmm)
	}
	if err != nil {
		panic(err)
	}
	return t
}

func mins(ds ...int) []Duration {
	out := []Duration{}
	for _, d := range ds {
		out = append(out, Duration(time.Duration(d)*time.Minute))
	}
	return out
}

var (
	twiceADay     = schedule.MustParse("DTSTART:20240101T060000Z\nRRULE:FREQ=DAILY;BYHOUR=6,16")
	every30m      = schedule.MustParse("DTSTART:20240101T000000Z\nRRULE:FREQ=MINUTELY;INTERVAL=30")
	at2PM         = schedule.MustParse("DTSTART:20240101T140000Z\nRRULE:FREQ=DAILY")
	defaultDelays = mins(0, 1, 5, 15, 30, 60)
)

func policy(timeout time.Duration, retries []Duration) Policy {
	return Policy{Timeout: Duration(timeout), Retries: retries, Align: true, OnExhausted: Disable}
}

func TestStart(t *testing.T) {
	tests := []struct {
		name      string
		rules     Rules
		state     State
		now       time.Time
		wantErr   error
		wantRef   time.Time
		wantNo    int
		wantDeadl time.Time
	}{
		{"06:00 start, deadline 07:00, next 16:00", Rules{twiceADay, policy(time.Hour, defaultDelays)},
			State{RefreshAt: at("06:00")}, at("06:00"), nil, at("16:00"), 1, at("07:00")},
		{"every 30m with 1h timeout: next after the deadline", Rules{every30m, policy(time.Hour, defaultDelays)},
			State{RefreshAt: at("08:00")}, at("08:00"), nil, at("09:30"), 1, at("09:00")},
		{"one-off record: nothing planned after", Rules{nil, policy(time.Minute, defaultDelays)},
			State{RefreshAt: at("10:00"), AttemptNo: 2}, at("10:05"), nil, time.Time{}, 3, at("10:06")},
		{"not yet due", Rules{twiceADay, policy(time.Hour, defaultDelays)},
			State{RefreshAt: at("06:00")}, at("05:59"), ErrNotDue, at("06:00"), 0, time.Time{}},
		{"disabled", Rules{twiceADay, policy(time.Hour, defaultDelays)},
			State{RefreshAt: at("06:00"), Disabled: true}, at("07:00"), ErrNotDue, at("06:00"), 0, time.Time{}},
		{"already running", Rules{twiceADay, policy(time.Hour, defaultDelays)},
			State{RefreshAt: at("06:00"), AttemptUID: "x", AttemptNo: 1}, at("07:00"), ErrNotDue, at("06:00"), 1, time.Time{}},
		{"nothing planned", Rules{twiceADay, policy(time.Hour, defaultDelays)},
			State{}, at("07:00"), ErrNotDue, time.Time{}, 0, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.rules.Start(tt.state, tt.now, "uid-1")
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Start error = %v; want %v", err, tt.wantErr)
			}
			if !got.RefreshAt.Equal(tt.wantRef) || got.AttemptNo != tt.wantNo || !got.DeadlineAt.Equal(tt.wantDeadl) {
				t.Errorf("Start = refresh_at %v attempt_no %d deadline %v; want %v %d %v",
					got.RefreshAt, got.AttemptNo, got.DeadlineAt, tt.wantRef, tt.wantNo, tt.wantDeadl)
			}
			if err == nil && (got.AttemptUID != "uid-1" || !got.StartedAt.Equal(tt.now)) {
				t.Errorf("Start = uid %q started %v; want uid-1, %v", got.AttemptUID, got.StartedAt, tt.now)
			}
		})
	}
}

func TestSucceed(t *testing.T) {
	r := Rules{every30m, policy(time.Hour, defaultDelays)}
	running := State{AttemptUID: "a", AttemptNo: 3, StartedAt: at("08:00"), DeadlineAt: at("09:00"),
		RefreshAt: at("09:30"), FailingSince: at("07:00")}
	got, err := r.Succeed(running, at("08:10"), ReceivedAt(at("08:10")), "a")
	if err != nil {
		t.Fatal(err)
	}
	// A 10-minute refresh with a 1h timeout every 30 min is next at
	// 08:30, not after the timeout.
	want := State{RefreshAt: at("08:30")}
	if got != want {
		t.Errorf("Succeed = %+v; want %+v", got, want)
	}
	if _, err := r.Succeed(running, at("08:10"), ReceivedAt(at("08:10")), "b"); !errors.Is(err, ErrStale) {
		t.Errorf("Succeed with another uid: err = %v; want ErrStale", err)
	}
	if _, err := r.Succeed(got, at("08:11"), ReceivedAt(at("08:11")), "a"); !errors.Is(err, ErrStale) {
		t.Errorf("replayed success: err = %v; want ErrStale", err)
	}
	// At or after the deadline the attempt has timed out: the result is late.
	if _, err := r.Succeed(running, at("09:00"), ReceivedAt(at("09:00")), "a"); !errors.Is(err, ErrLate) || !errors.Is(err, ErrStale) {
		t.Errorf("success at the deadline: err = %v; want ErrLate (a kind of ErrStale)", err)
	}
	if _, _, err := r.Fail(running, at("09:01"), ReceivedAt(at("09:01")), "a", Failure{}); !errors.Is(err, ErrLate) {
		t.Errorf("failure after the deadline: err = %v; want ErrLate", err)
	}
	if err := running.Status(ReceivedAt(at("09:01")), "a"); !errors.Is(err, ErrLate) {
		t.Errorf("status after the deadline: err = %v; want ErrLate", err)
	}
	if err := running.Status(ReceivedAt(at("08:59")), "a"); err != nil {
		t.Errorf("status before the deadline: %v", err)
	}
}

// Lateness is judged by when the result reached the output list, not by
// when it is applied: a success pushed before the deadline and applied long
// after it (a poller outage) is on time.
func TestReceivedLate(t *testing.T) {
	r := Rules{every30m, policy(time.Hour, defaultDelays)}
	running := State{AttemptUID: "a", AttemptNo: 1, StartedAt: at("08:00"), DeadlineAt: at("09:00"), RefreshAt: at("09:30")}
	tests := []struct {
		name string
		rcv  Received
		late bool
	}{
		{"pushed after 08:59, drained at 09:20", Received{After: at("08:59"), By: at("09:20"), MaxWait: time.Hour}, false},
		{"pushed after the deadline", Received{After: at("09:00"), By: at("09:01"), MaxWait: time.Hour}, true},
		{"drained at the bound", Received{After: at("08:00"), By: at("10:00"), MaxWait: time.Hour}, true},
		{"drained just within the bound", Received{After: at("08:00"), By: at("09:59"), MaxWait: time.Hour}, false},
		{"no lower bound known", Received{By: at("09:30"), MaxWait: time.Hour}, false},
		{"no bound at all", Received{By: at("23:00")}, false},
	}
	for _, tt := range tests {
		if got := tt.rcv.Late(running.DeadlineAt); got != tt.late {
			t.Errorf("%s: Late = %v; want %v", tt.name, got, tt.late)
		}
		// Applied at 09:45 (the poller's clock is past the deadline in every case).
		_, err := r.Succeed(running, at("09:45"), tt.rcv, "a")
		if late := errors.Is(err, ErrLate); late != tt.late || (err != nil && !late) {
			t.Errorf("%s: Succeed err = %v; want late %v", tt.name, err, tt.late)
		}
	}
	if (Received{After: at("23:00"), By: at("23:00")}).Late(time.Time{}) {
		t.Error("a zero deadline is never passed")
	}
}

func TestTimeOut(t *testing.T) {
	r := Rules{twiceADay, policy(time.Hour, defaultDelays)}
	running := State{AttemptUID: "a", AttemptNo: 1, StartedAt: at("06:00"), DeadlineAt: at("07:00"), RefreshAt: at("16:00")}
	if _, _, err := r.TimeOut(running, at("06:59"), 0); !errors.Is(err, ErrNotDue) {
		t.Errorf("TimeOut before the deadline: %v; want ErrNotDue", err)
	}
	got, step, err := r.TimeOut(running, at("07:00"), 0)
	if err != nil || step.Decision != Retry || !got.RefreshAt.Equal(at("07:00")) || got.Running() {
		t.Errorf("TimeOut = %+v, %v, %v; want an immediate retry", got, step, err)
	}
}

func TestFail(t *testing.T) {
	running := func(no int, started string) State {
		return State{AttemptUID: "a", AttemptNo: no, StartedAt: at(started), DeadlineAt: at(started).Add(time.Hour)}
	}
	noAlign := policy(2*time.Hour, mins(30))
	noAlign.Align = false
	waitNext := policy(time.Hour, defaultDelays)
	waitNext.OnExhausted = WaitNext
	tests := []struct {
		name       string
		rules      Rules
		state      State
		now        time.Time
		failure    Failure
		want       Decision
		wantRef    time.Time
		wantNo     int
		wantReason string
	}{
		{"worked example: retry at once", Rules{twiceADay, policy(time.Hour, defaultDelays)},
			running(1, "06:00"), at("06:10"), Failure{}, Retry, at("06:10"), 1, ""},
		{"second failure: 1 minute", Rules{twiceADay, policy(time.Hour, defaultDelays)},
			running(2, "06:10"), at("06:12"), Failure{}, Retry, at("06:13"), 2, ""},
		{"timeout 10h overlaps 16:00: planned refresh is the retry", Rules{twiceADay, policy(10*time.Hour, defaultDelays)},
			running(1, "06:00"), at("06:10"), Failure{}, AlignedOverlap, at("16:00"), 1, ""},
		{"retry after the planned refresh: wait less", Rules{twiceADay, policy(time.Minute, defaultDelays)},
			running(6, "15:30"), at("15:31"), Failure{}, AlignedAfter, at("16:00"), 6, ""},
		{"2PM: retry at 1:30PM with 2h timeout moves to 2PM", Rules{at2PM, policy(2*time.Hour, mins(30))},
			running(1, "12:30"), at("13:00"), Failure{}, AlignedOverlap, at("14:00"), 1, ""},
		{"2PM without align: retry at 1:30PM", Rules{at2PM, noAlign},
			running(1, "12:30"), at("13:00"), Failure{}, Retry, at("13:30"), 1, ""},
		{"no planned refresh: after the delay", Rules{nil, policy(time.Minute, mins(0, 1, 5))},
			running(3, "10:00"), at("10:01"), Failure{}, RetryNoPlan, at("10:06"), 3, ""},
		{"seventh failed attempt disables", Rules{twiceADay, policy(time.Hour, defaultDelays)},
			running(7, "08:00"), at("08:30"), Failure{Message: "GET: 503 Service Unavailable"}, Exhausted, time.Time{}, 7,
			"Cannot refresh BigTable after 7 attempts: GET: 503 Service Unavailable"},
		{"exhausted uses the worker's reason", Rules{twiceADay, policy(time.Hour, defaultDelays)},
			running(7, "08:00"), at("08:30"), Failure{Reason: "Upstream is gone"}, Exhausted, time.Time{}, 7, "Upstream is gone"},
		{"not retryable is final at once", Rules{twiceADay, policy(time.Hour, defaultDelays)},
			running(1, "06:00"), at("06:01"), Failure{NotRetryable: true, Reason: "Provided URL is invalid: https://example.com/broken"},
			NotRetryable, time.Time{}, 1, "Provided URL is invalid: https://example.com/broken"},
		{"not retryable without reason", Rules{twiceADay, policy(time.Hour, defaultDelays)},
			running(2, "06:00"), at("06:01"), Failure{NotRetryable: true}, NotRetryable, time.Time{}, 2, "Cannot refresh BigTable after 2 attempts"},
		{"wait_next: reset and wait for the planned refresh", Rules{twiceADay, waitNext},
			running(7, "08:00"), at("08:30"), Failure{}, WaitingNext, at("16:00"), 0, ""},
		{"wait_next without a plan is final", Rules{nil, waitNext},
			running(7, "08:00"), at("08:30"), Failure{}, Exhausted, time.Time{}, 7, "Cannot refresh BigTable after 7 attempts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, step, err := tt.rules.Fail(tt.state, tt.now, ReceivedAt(tt.now), "a", tt.failure)
			if err != nil {
				t.Fatal(err)
			}
			if step.Decision != tt.want || !got.RefreshAt.Equal(tt.wantRef) || got.AttemptNo != tt.wantNo ||
				got.DisabledReason != tt.wantReason || got.Disabled != tt.want.Final() {
				t.Errorf("Fail = %s refresh_at %v attempt_no %d disabled %v %q; want %s %v %d %v %q",
					step.Decision, got.RefreshAt, got.AttemptNo, got.Disabled, got.DisabledReason,
					tt.want, tt.wantRef, tt.wantNo, tt.want.Final(), tt.wantReason)
			}
			if got.Running() || !got.StartedAt.IsZero() || !got.DeadlineAt.IsZero() {
				t.Errorf("Fail left an attempt: %+v", got)
			}
		})
	}
	if _, _, err := (Rules{twiceADay, policy(time.Hour, defaultDelays)}).Fail(running(1, "06:00"), at("06:10"), ReceivedAt(at("06:10")), "other", Failure{}); !errors.Is(err, ErrStale) {
		t.Errorf("Fail with another uid: %v; want ErrStale", err)
	}
}

func TestUpdate(t *testing.T) {
	s := State{AttemptUID: "a", AttemptNo: 4, StartedAt: at("08:00"), DeadlineAt: at("09:00"),
		FailingSince: at("06:00"), Disabled: true, DisabledReason: "x"}
	got, cancelled := Update(s, at("10:00"))
	if cancelled != "a" || got != (State{RefreshAt: at("10:00")}) {
		t.Errorf("Update = %+v, %q; want refresh_at 10:00 only, cancelled a", got, cancelled)
	}
}

// event is one step of a simulated timeline: at a time, the worker's outcome
// for the attempt the scheduler started ("ok", "fail", or "timeout", which
// the scheduler applies at the deadline).
type event struct {
	outcome string
	after   time.Duration // how long the attempt ran before its outcome
}

// simulate runs the state machine like the scheduler and poller do, on a
// simulated clock, and returns "start@hh:mm" and outcome lines.
func simulate(t *testing.T, r Rules, s State, events []event) (State, []string) {
	t.Helper()
	var log []string
	for _, ev := range events {
		if s.Disabled || s.RefreshAt.IsZero() {
			t.Fatalf("no attempt to run for %+v (log %v)", ev, log)
		}
		now := s.RefreshAt
		var err error
		s, err = r.Start(s, now, NewAttemptUID())
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, "start#"+strconv.Itoa(s.AttemptNo)+"@"+now.Format("Jan2 15:04"))
		uid := s.AttemptUID
		switch ev.outcome {
		case "ok":
			s, err = r.Succeed(s, now.Add(ev.after), ReceivedAt(now.Add(ev.after)), uid)
			log = append(log, "ok")
		case "fail":
			var step Step
			s, step, err = r.Fail(s, now.Add(ev.after), ReceivedAt(now.Add(ev.after)), uid, Failure{Message: "boom"})
			log = append(log, string(step.Decision))
		case "timeout":
			var step Step
			s, step, err = r.TimeOut(s, s.DeadlineAt, 0)
			log = append(log, "timeout:"+string(step.Decision))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return s, log
}

func TestSeedScenarios(t *testing.T) {
	t.Run("thumbnail after edit", func(t *testing.T) {
		// Allow 1 minute; retry at once, after 1 minute, after 5 minutes; the
		// fourth failure marks the banner.
		r := Rules{nil, policy(time.Minute, mins(0, 1, 5))}
		s, log := simulate(t, r, State{RefreshAt: at("10:00")}, []event{
			{"fail", 10 * time.Second}, {"fail", 10 * time.Second}, {"timeout", 0}, {"fail", 5 * time.Second},
		})
		want := "start#1@Mar4 10:00 retry_no_plan start#2@Mar4 10:00 retry_no_plan start#3@Mar4 10:01 timeout:retry_no_plan start#4@Mar4 10:07 exhausted"
		if got := strings.Join(log, " "); got != want {
			t.Errorf("timeline:\n got %s\nwant %s", got, want)
		}
		if !s.Disabled || s.DisabledReason != "Cannot refresh BigTable after 4 attempts: boom" {
			t.Errorf("final state %+v", s)
		}
	})
	t.Run("twice a day, give up after the sixth retry", func(t *testing.T) {
		r := Rules{twiceADay, policy(time.Hour, defaultDelays)}
		s, log := simulate(t, r, State{RefreshAt: at("06:00")}, []event{
			{"fail", time.Minute}, {"fail", time.Minute}, {"fail", time.Minute}, {"fail", time.Minute},
			{"fail", time.Minute}, {"fail", time.Minute}, {"fail", time.Minute},
		})
		want := "start#1@Mar4 06:00 retry start#2@Mar4 06:01 retry start#3@Mar4 06:03 retry " +
			"start#4@Mar4 06:09 retry start#5@Mar4 06:25 retry start#6@Mar4 06:56 retry start#7@Mar4 07:57 exhausted"
		if got := strings.Join(log, " "); got != want {
			t.Errorf("timeline:\n got %s\nwant %s", got, want)
		}
		if !s.Disabled || s.RefreshAt != (time.Time{}) || s.DisabledReason != "Cannot refresh BigTable after 7 attempts: boom" {
			t.Errorf("final state %+v", s)
		}
		// A person saves the record: enabled again, refresh now.
		s, _ = Update(s, at("09:00"))
		if s.Disabled || !s.Due(at("09:00")) || s.AttemptNo != 0 {
			t.Errorf("after update %+v", s)
		}
	})
	t.Run("twice a day, reset and wait, give up after a week", func(t *testing.T) {
		p := policy(time.Hour, defaultDelays)
		p.OnExhausted = WaitNext
		p.GiveUpAfter = Duration(7 * 24 * time.Hour)
		r := Rules{twiceADay, p}
		s := State{RefreshAt: at("06:00")}
		var log []string
		cycles := 0
		for !s.Disabled && cycles < 100 {
			var l []string
			s, l = simulate(t, r, s, []event{{"fail", time.Minute}})
			log = append(log, l...)
			cycles++
		}
		// Each half-day: 7 attempts, then wait for the next planned refresh.
		if log[13] != "wait_next" || !strings.HasPrefix(log[14], "start#1@Mar4 16:00") {
			t.Errorf("first cycle: %v", log[:16])
		}
		last := log[len(log)-2:]
		if !strings.HasPrefix(last[0], "start#") || last[1] != "gave_up" {
			t.Errorf("end: %v", last)
		}
		if !strings.Contains(s.DisabledReason, "no success since 2024-03-04T06:00:00Z (gave up after 168h)") {
			t.Errorf("reason %q", s.DisabledReason)
		}
		// It gave up at the first failure a week or more after the first one.
		if !strings.Contains(last[0], "Mar11 06:00") {
			t.Errorf("gave up at %v; want the Mar 11 06:00 attempt", last[0])
		}
	})
	t.Run("every 30 min with 1h timeout", func(t *testing.T) {
		r := Rules{every30m, policy(time.Hour, defaultDelays)}
		_, log := simulate(t, r, State{RefreshAt: at("08:00")}, []event{
			{"ok", 10 * time.Minute}, {"timeout", 0}, {"ok", 5 * time.Minute},
		})
		// Success at 08:10 -> 08:30. Timeout at 09:30: retry at once at 09:30,
		// but 09:30 + 1h overlaps the 10:00 plan -> aligned to 10:00.
		want := "start#1@Mar4 08:00 ok start#1@Mar4 08:30 timeout:aligned_overlap start#2@Mar4 10:00 ok"
		if got := strings.Join(log, " "); got != want {
			t.Errorf("timeline:\n got %s\nwant %s", got, want)
		}
	})
}

func TestNewAttemptUID(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := NewAttemptUID()
		if len(id) < 25 || id[0] != 'c' || seen[id] {
			t.Fatalf("bad or repeated uid %q", id)
		}
		seen[id] = true
	}
}

func TestPhase(t *testing.T) {
	at := time.Date(2024, 3, 4, 6, 0, 0, 0, time.UTC)
	tests := []struct {
		s    State
		want Phase
	}{
		{State{RefreshAt: at}, PhaseWaiting},
		{State{RefreshAt: at, AttemptNo: 2}, PhaseRetrying},
		{State{RefreshAt: at, AttemptUID: "a", AttemptNo: 1, DeadlineAt: at}, PhaseRunning},
		{State{AttemptUID: "a", AttemptNo: 3, DeadlineAt: at}, PhaseRunning},
		{State{}, PhaseIdle},
		{State{Disabled: true, DisabledReason: "x", AttemptNo: 7}, PhaseDisabled},
		{State{Disabled: true, AttemptUID: "a", RefreshAt: at}, PhaseDisabled},
		{State{Paused: true, RefreshAt: at}, PhasePaused},
		{State{Paused: true, Disabled: true, DisabledReason: "x"}, PhasePaused},
	}
	for _, tt := range tests {
		if got := tt.s.Phase(); got != tt.want {
			t.Errorf("%+v.Phase() = %s; want %s", tt.s, got, tt.want)
		}
	}
}
