package refresh

import (
	"errors"
	"fmt"
	"time"
)

// Errors of the operator's transitions.
var (
	// ErrPaused means the record is paused: resume it first.
	ErrPaused = errors.New("record is paused (resume it first)")
	// ErrDisabled means a final failure disabled the record: only an
	// update re-enables it.
	ErrDisabled = errors.New("record is disabled (update re-enables it)")
	// ErrRunning means an attempt is running already.
	ErrRunning = errors.New("an attempt is running already")
)

// Pause holds the record: it is never started while paused. A running
// attempt is cancelled and returned (its results become stale); it does
// not count as an attempt (attempt_no goes back), and the record is due
// from now, so that resuming it runs the cancelled refresh at once.
// Pausing a paused record changes nothing.
func Pause(s State, now time.Time) (State, string) {
	cancelled := s.AttemptUID
	if s.Running() {
		s = s.clearAttempt()
		s.AttemptNo = max(s.AttemptNo-1, 0)
		s.RefreshAt = now
	}
	s.Paused = true
	return s, cancelled
}

// Resume lifts a pause: the record runs at its refresh_at again (at once if
// that has passed).
func Resume(s State) State {
	s.Paused = false
	return s
}

// RunNow makes the record due now, changing nothing else: the next attempt
// counts as the one it would have been. A paused, disabled or running
// record is refused with the reason.
func RunNow(s State, now time.Time) (State, error) {
	switch {
	case s.Paused:
		return s, fmt.Errorf("run now: %w", ErrPaused)
	case s.Disabled:
		return s, fmt.Errorf("run now: %w", ErrDisabled)
	case s.Running():
		return s, fmt.Errorf("run now: %w: %s, deadline %s", ErrRunning, s.AttemptUID, s.DeadlineAt.UTC().Format(time.RFC3339))
	}
	s.RefreshAt = now
	return s, nil
}
