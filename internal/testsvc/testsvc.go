// Package testsvc gives tests their own PostgreSQL database and their own
// Redis keys on the real services, found through TEST_DATABASE_URL and
// TEST_REDIS_URL (defaults: the local services). A missing service is a
// visible skip on a developer's machine and a failure in CI (CI set).
package testsvc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/redact"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/store"
	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // PostgreSQL driver
	"github.com/redis/go-redis/v9"
)

// Default service URLs, those of scripts/services.sh.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=5"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// unavailable skips the test outside CI and fails it in CI.
func unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not available in CI: %v (scripts/services.sh starts it)", what, err)
	}
	t.Skipf("skipping: %s is not available: %v (run scripts/services.sh, or set CI=1 to make this a failure)", what, err)
}

// Tool returns the path of the program name, a test's tool (bash,
// python3...): outside CI a test without it is skipped, in CI it fails.
func Tool(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		unavailable(t, name, err)
	}
	return path
}

// RandomID returns a short random hex id for names.
func RandomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// AdminDatabaseURL returns the URL of a PostgreSQL role allowed to create
// databases (TEST_DATABASE_URL), for code that makes its own scratch
// database, after checking that it answers.
func AdminDatabaseURL(t testing.TB) string {
	t.Helper()
	admin := env("TEST_DATABASE_URL", DefaultDatabaseURL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := sqlx.Open("postgres", admin)
	if err == nil {
		err = db.PingContext(ctx)
		db.Close()
	}
	if err != nil {
		unavailable(t, "PostgreSQL at "+redact.URL(admin), err)
	}
	return admin
}

// Database creates an empty database for the test, drops it when the test
// ends, and returns its URL.
func Database(t testing.TB) string {
	t.Helper()
	admin := env("TEST_DATABASE_URL", DefaultDatabaseURL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := sqlx.Open("postgres", admin)
	if err == nil {
		err = db.PingContext(ctx)
		db.Close()
	}
	if err != nil {
		unavailable(t, "PostgreSQL at "+redact.URL(admin), err)
	}
	dbURL, drop, err := store.ScratchDatabase(ctx, admin, "bt_test")
	if err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(drop)
	return dbURL
}

// Redis returns the Redis URL, a client, and queue names private to the test;
// the test's keys are deleted when it ends.
func Redis(t testing.TB) (string, redis.UniversalClient, queue.Names) {
	t.Helper()
	return redisAt(t, env("TEST_REDIS_URL", DefaultRedisURL), true)
}

// RedisAt is Redis for the Redis at rawURL, of any scheme queue.Connect
// takes, which the test has started: failing to connect fails the test.
func RedisAt(t testing.TB, rawURL string) (string, redis.UniversalClient, queue.Names) {
	t.Helper()
	return redisAt(t, rawURL, false)
}

func redisAt(t testing.TB, rawURL string, mayBeMissing bool) (string, redis.UniversalClient, queue.Names) {
	t.Helper()
	rdb, err := queue.Connect(context.Background(), rawURL)
	if err != nil && mayBeMissing {
		unavailable(t, "Redis", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// One hash tag: in Redis Cluster every key of the test lands in one slot.
	prefix := "{bt-test-" + RandomID() + "}:"
	names := queue.Names{Input: prefix + "input", Output: prefix + "output", Dead: prefix + "dead"}
	if err := names.ValidateFor(rdb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := DeleteKeys(context.Background(), rdb, prefix+"*"); err != nil {
			t.Errorf("delete the test's Redis keys: %v", err)
		}
		rdb.Close()
	})
	return rawURL, rdb, names
}

// DeleteKeys deletes the keys matching pattern, on every master of a Redis
// Cluster (SCAN on a cluster client reaches one node only).
func DeleteKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) error {
	del := func(ctx context.Context, c redis.UniversalClient) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return del(ctx, c) })
	}
	return del(ctx, rdb)
}

// Store opens a migrated store on a fresh database for the test.
func Store(t testing.TB) *store.Store {
	t.Helper()
	return migrated(t, Database(t))
}

// StoreWithDB is Store plus a plain connection to the same database, for
// tests and benchmarks that seed rows with SQL; both close when the test ends.
func StoreWithDB(t testing.TB) (*store.Store, *sqlx.DB) {
	t.Helper()
	dbURL := Database(t)
	st := migrated(t, dbURL)
	db, err := sqlx.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return st, db
}

func migrated(t testing.TB, dbURL string) *store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

// SyncBuffer is a buffer that a process or goroutine writes while the test
// reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
