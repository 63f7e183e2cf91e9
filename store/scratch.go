package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/bigtables/bigtables/internal/redact"
	"github.com/jmoiron/sqlx"
)

// ScratchDatabase creates an empty database named prefix_<random> next to
// the one adminURL names (the URL's role needs CREATEDB), for tests, the
// bench and the fault run. It returns the new database's URL and a function
// that drops it, forcibly, whatever is still connected. When the database
// adminURL names does not exist yet (a fresh server), it connects to the
// server's maintenance database "postgres" instead.
func ScratchDatabase(ctx context.Context, adminURL, prefix string) (dbURL string, drop func(), err error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("database URL %s: %w", redact.URL(adminURL), err)
	}
	admin, err := sqlx.Open("postgres", adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("open %s: %w", redact.URL(adminURL), err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := prefix + "_" + hex.EncodeToString(b)
	_, err = admin.ExecContext(ctx, "CREATE DATABASE "+name)
	if pgCode(err) == invalidCatalogName && u.Path != "/postgres" {
		admin.Close()
		m := *u
		m.Path = "/postgres"
		if admin, err = sqlx.Open("postgres", m.String()); err != nil {
			return "", nil, fmt.Errorf("open %s: %w", redact.URL(m.String()), err)
		}
		_, err = admin.ExecContext(ctx, "CREATE DATABASE "+name)
	}
	if err != nil {
		admin.Close()
		return "", nil, fmt.Errorf("create database %s (the URL's role needs CREATEDB): %w", name, err)
	}
	u.Path = "/" + name
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close()
	}
	return u.String(), drop, nil
}
