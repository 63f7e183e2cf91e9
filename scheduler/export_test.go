package scheduler

import (
	"context"
	"time"

	"github.com/bigtables/bigtables/store"
)

// SetUndo replaces how s reverts starts, so that tests can make it fail.
func SetUndo(s *Scheduler, undo func(context.Context, []store.Started) (int, error)) { s.undo = undo }

// SetSettle replaces how s asks Redis which pushes landed, so that tests
// can make it fail.
func SetSettle(s *Scheduler, settle func(context.Context, []string) (map[string]time.Time, error)) {
	s.settlePushes = settle
}
