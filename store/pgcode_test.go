package store

import (
	"errors"
	"fmt"
	"testing"

	"github.com/lib/pq"
)

func TestPgCode(t *testing.T) {
	wrapped := fmt.Errorf("add record: %w", &pq.Error{Code: uniqueViolation})
	if got := pgCode(wrapped); got != uniqueViolation {
		t.Errorf("pgCode(wrapped unique violation) = %q", got)
	}
	if got := pgCode(errors.New("23505")); got != "" {
		t.Errorf("pgCode(plain error) = %q", got)
	}
	if got := pgCode(nil); got != "" {
		t.Errorf("pgCode(nil) = %q", got)
	}
}
