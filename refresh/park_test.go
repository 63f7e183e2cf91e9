package refresh

import (
	"testing"
	"time"
)

// Unpark adds the time parked to failing_since (docs/design.md, U9), so
// give_up_after counts the record's own failures; a healthy record has no
// failing_since to move.
func TestUnparkShiftsFailingSince(t *testing.T) {
	t0 := time.Date(2024, 3, 4, 0, 0, 0, 0, time.UTC)
	minute := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	tests := []struct {
		name                 string
		failingSince, parked time.Time
		now, want            time.Time
	}{
		{"failing: moved by the time parked", minute(0), minute(3), minute(12), minute(9)},
		{"healthy: stays healthy", time.Time{}, minute(3), minute(12), time.Time{}},
		{"released at once: unchanged", minute(0), minute(3), minute(3), minute(0)},
		{"a clock behind parked_at: unchanged", minute(0), minute(3), minute(2), minute(0)},
	}
	for _, tt := range tests {
		s := Park(State{RefreshAt: minute(3), AttemptNo: 2, FailingSince: tt.failingSince})
		if s.Due(minute(100)) || s.Phase() != PhaseParked {
			t.Fatalf("%s: a parked record is due or not parked: %+v", tt.name, s)
		}
		got := Unpark(s, tt.parked, tt.now)
		if !got.FailingSince.Equal(tt.want) || got.Parked || got.AttemptNo != 2 || !got.RefreshAt.Equal(minute(3)) {
			t.Errorf("%s: Unpark = %+v; want failing_since %v, attempt_no and refresh_at kept", tt.name, got, tt.want)
		}
	}
}
