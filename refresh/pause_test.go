package refresh

import (
	"errors"
	"testing"
	"time"
)

func TestPauseCancelsTheRunningAttemptAndResumeRunsIt(t *testing.T) {
	now := time.Date(2024, 3, 4, 6, 10, 0, 0, time.UTC)
	planned := time.Date(2024, 3, 4, 16, 0, 0, 0, time.UTC)
	running := State{RefreshAt: planned, AttemptUID: "a1", AttemptNo: 2, StartedAt: now.Add(-time.Minute), DeadlineAt: now.Add(time.Hour)}
	p, cancelled := Pause(running, now)
	if cancelled != "a1" || p.Running() || !p.Paused || p.AttemptNo != 1 || !p.RefreshAt.Equal(now) {
		t.Fatalf("Pause(running) = %+v, %q; want paused, attempt cancelled, attempt_no 1, due now", p, cancelled)
	}
	if p.Phase() != PhasePaused || p.Due(now.Add(time.Hour)) {
		t.Fatalf("paused record: phase %s, due %v; want paused and never due", p.Phase(), p.Due(now.Add(time.Hour)))
	}
	r := Resume(p)
	if r.Paused || !r.Due(now) || r.Phase() != PhaseRetrying {
		t.Fatalf("Resume = %+v (phase %s); want due at once, retrying", r, r.Phase())
	}

	idle := State{RefreshAt: planned}
	p, cancelled = Pause(idle, now)
	if cancelled != "" || !p.RefreshAt.Equal(planned) || !p.Paused {
		t.Fatalf("Pause(waiting) = %+v, %q; want refresh_at kept", p, cancelled)
	}
	// Disabled stays disabled under a pause and after it.
	d := State{Disabled: true, DisabledReason: "x"}
	if p, _ := Pause(d, now); p.Phase() != PhasePaused || Resume(p).Phase() != PhaseDisabled {
		t.Fatalf("pause/resume of a disabled record: %+v", p)
	}
}

func TestRunNow(t *testing.T) {
	now := time.Date(2024, 3, 4, 6, 10, 0, 0, time.UTC)
	s := State{RefreshAt: now.Add(10 * time.Hour), AttemptNo: 2, FailingSince: now.Add(-time.Hour)}
	got, err := RunNow(s, now)
	if err != nil || !got.RefreshAt.Equal(now) || got.AttemptNo != 2 || !got.FailingSince.Equal(s.FailingSince) {
		t.Fatalf("RunNow = %+v, %v; want due now and nothing else changed", got, err)
	}
	for _, tt := range []struct {
		s    State
		want error
	}{
		{State{Paused: true, RefreshAt: now}, ErrPaused},
		{State{Disabled: true, DisabledReason: "x"}, ErrDisabled},
		{State{AttemptUID: "a", DeadlineAt: now}, ErrRunning},
	} {
		if _, err := RunNow(tt.s, now); !errors.Is(err, tt.want) {
			t.Errorf("RunNow(%+v) = %v; want %v", tt.s, err, tt.want)
		}
	}
}
