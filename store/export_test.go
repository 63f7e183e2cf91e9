package store

import "context"

// Setting reads a run-time setting in the transaction (tests only).
func (tx *Tx) Setting(ctx context.Context, name string) (string, error) {
	var v string
	err := tx.tx.GetContext(ctx, &v, "SELECT current_setting($1)", name)
	return v, err
}
