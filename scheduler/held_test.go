package scheduler

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Timeouts held for a moment after their deadline (the result may wait for
// the pollers' next drain) are routine and logged at Debug; only timeouts
// held heldWarnAfter or more behind the tick's time warn that the pollers
// are down or behind. `make run` shows every routine timeout, which must
// not read as a fault.
func TestHeldTimeoutsWarnOnlyWhenThePollersLag(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		behind time.Duration
		want   string
	}{
		{0, "level=DEBUG"},
		{300 * time.Millisecond, "level=DEBUG"},
		{heldWarnAfter - time.Millisecond, "level=DEBUG"},
		{heldWarnAfter, "level=WARN"},
		{time.Hour, "level=WARN"},
	} {
		var buf bytes.Buffer
		s := &Scheduler{cfg: Config{Now: func() time.Time { return now }},
			log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		s.logHeld(TickResult{Held: 1, HeldWhy: "why"}, now, now.Add(-tt.behind))
		if got := buf.String(); !strings.HasPrefix(strings.SplitN(got, "\n", 2)[0], "time=") || !strings.Contains(got, tt.want) {
			t.Errorf("held %v behind: logged %q; want a line at %s", tt.behind, got, tt.want)
		}
	}
}
