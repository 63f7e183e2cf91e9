package store

import (
	"errors"

	"github.com/lib/pq"
)

// Refused reports whether PostgreSQL refused a statement because of the
// values it was given: SQLSTATE class 22 (data exception, e.g. 22021 a
// character not valid in the encoding), 23 (integrity constraint violation)
// or 54 (program limit exceeded, e.g. a value too large). Sending the same
// values again fails again, but the same statement without the offending
// value can succeed. Every other error (connection lost, 08, 57P01 shutdown,
// 57014 statement timeout, 25P03 idle session timeout, 40001 serialization,
// 40P01 deadlock, 55P03 lock timeout, 53 resources, a programming error) is
// an outage or a bug of ours, which retrying the whole work later may cure
// and no value should be blamed for.
func Refused(err error) bool {
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) {
		return false
	}
	switch pqErr.Code.Class() {
	case "22", "23", "54":
		return true
	}
	return false
}

// SQLState returns the SQLSTATE code of a PostgreSQL error, or "".
func SQLState(err error) string {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return string(pqErr.Code)
	}
	return ""
}
