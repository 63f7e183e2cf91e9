package chaos

import (
	"context"
	"os"
	"testing"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/jmoiron/sqlx"
)

// inTransaction finds this process's open transaction in pg_stat_activity
// through its TCP ports, and no longer once it has ended.
func TestInTransaction(t *testing.T) {
	ctx := context.Background()
	dbURL := testsvc.Database(t)
	db, err := sqlx.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := &run{db: db}
	if in, err := r.inTransaction(ctx, os.Getpid()); err != nil || in {
		t.Fatalf("inTransaction before any transaction = %v, %v; want false", in, err)
	}
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if in, err := r.inTransaction(ctx, os.Getpid()); err != nil || !in {
		t.Errorf("inTransaction inside a transaction = %v, %v; want true", in, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if in, err := r.inTransaction(ctx, os.Getpid()); err != nil || in {
		t.Errorf("inTransaction after the commit = %v, %v; want false", in, err)
	}
}
