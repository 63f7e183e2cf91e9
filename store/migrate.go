package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrateLock is the advisory lock key that serialises migrations, so two
// processes migrating at once apply each version exactly once.
const migrateLock = 0x6269677461626c // "bigtabl"

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration file %s: name must start with a number and _", e.Name())
		}
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Migrate applies the migrations the database lacks, each in the same
// transaction as its bookkeeping row, under an advisory lock. It is
// idempotent and safe to run from several processes at once. It returns the
// versions it applied.
func (s *Store) Migrate(ctx context.Context) ([]Migration, error) {
	all, err := Migrations()
	if err != nil {
		return nil, err
	}
	var applied []Migration
	err = s.InTx(ctx, func(tx *Tx) error {
		if _, err := tx.tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLock); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		const create = `CREATE TABLE IF NOT EXISTS schema_migrations (
			version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`
		if _, err := tx.tx.ExecContext(ctx, create); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		var done []int
		if err := tx.tx.SelectContext(ctx, &done, "SELECT version FROM schema_migrations"); err != nil {
			return fmt.Errorf("read applied migrations: %w", err)
		}
		have := map[int]bool{}
		for _, v := range done {
			have[v] = true
		}
		for _, m := range all {
			if have[m.Version] {
				continue
			}
			if _, err := tx.tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("apply migration %s: %w", m.Name, err)
			}
			if _, err := tx.tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				return fmt.Errorf("record migration %s: %w", m.Name, err)
			}
			applied = append(applied, m)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return applied, nil
}

// ErrSchemaOutdated means the database lacks migrations this binary needs.
var ErrSchemaOutdated = errors.New("database schema is out of date: run 'bigtables migrate'")

// CheckSchema reports ErrSchemaOutdated, with the versions missing, when
// the database has not been migrated to this binary's latest version.
func (s *Store) CheckSchema(ctx context.Context) error {
	all, err := Migrations()
	if err != nil {
		return err
	}
	var done []int
	err = s.db.SelectContext(ctx, &done, "SELECT version FROM schema_migrations")
	if pgCode(err) == undefinedTable {
		return fmt.Errorf("%w (the database has no bigtables schema yet)", ErrSchemaOutdated)
	}
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	have := map[int]bool{}
	for _, v := range done {
		have[v] = true
	}
	var missing []string
	for _, m := range all {
		if !have[m.Version] {
			missing = append(missing, m.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w (missing %s)", ErrSchemaOutdated, strings.Join(missing, ", "))
	}
	return nil
}
