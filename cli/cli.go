// Package cli is the bigtables command line: it turns arguments and
// environment variables into configurations and runs the processes
// (scheduler, poller, worker) and the operator's commands (migrate, add,
// update, show, list). cmd/bigtables only calls Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/store"
	"github.com/redis/go-redis/v9"
)

// Environment variables and their defaults.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/bigtables?sslmode=disable"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

// Config is what every command shares: where the services are, the queue
// names, and logging. Flags override the environment, which overrides the
// defaults.
type Config struct {
	DatabaseURL string      // --database-url, DATABASE_URL
	RedisURL    string      // --redis-url, REDIS_URL
	Queues      queue.Names // --input-queue/--output-queue/--dead-queue, BIGTABLES_*_QUEUE
	LogLevel    string      // --log-level, BIGTABLES_LOG_LEVEL: debug, info, warn, error
	LogFormat   string      // --log-format, BIGTABLES_LOG_FORMAT: text or json
}

// env gives access to the environment; tests pass their own.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	stdin  io.Reader
}

func (e env) get(name, def string) string {
	if v := e.getenv(name); v != "" {
		return v
	}
	return def
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

type command struct {
	summary string
	run     func(ctx context.Context, e env, args []string) error
}

// commands are the subcommands; each file's init adds its own.
var commands = map[string]command{}

func init() {
	for name, c := range map[string]command{
		"migrate":   {"create or upgrade the database schema (idempotent)", runMigrate},
		"add":       {"add a record", runAdd},
		"update":    {"change a record as a person saving it: re-enables it and refreshes now", runUpdate},
		"show":      {"print one record as JSON", runShow},
		"list":      {"list records", runList},
		"scheduler": {"run the scheduler until SIGINT/SIGTERM", runScheduler},
		"poller":    {"run the poller until SIGINT/SIGTERM", runPoller},
		"worker":    {"run the reference worker until SIGINT/SIGTERM", runWorker},
	} {
		commands[name] = c
	}
}

// Main runs the command line args (without the program name) and returns the
// exit status: 0 success, 1 failure, 2 bad usage.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	e := env{getenv: getenv, stdout: stdout, stderr: stderr, stdin: stdin}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "bigtables: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return 2
	}
	err := cmd.run(ctx, e, args[1:])
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "bigtables %s: %s\n", args[0], ue.msg)
		fmt.Fprintf(stderr, "Run 'bigtables %s -h' for usage.\n", args[0])
		return 2
	default:
		fmt.Fprintf(stderr, "bigtables %s: %v\n", args[0], err)
		return 1
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "bigtables keeps records refreshed on a schedule, with a retry policy, through Redis queues.")
	fmt.Fprintln(w, "\nUsage: bigtables <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nEvery command takes --database-url (DATABASE_URL), --redis-url (REDIS_URL),")
	fmt.Fprintln(w, "--input-queue (BIGTABLES_INPUT_QUEUE), --output-queue (BIGTABLES_OUTPUT_QUEUE),")
	fmt.Fprintln(w, "--dead-queue (BIGTABLES_DEAD_QUEUE), --log-level and --log-format.")
	fmt.Fprintln(w, "Run 'bigtables <command> -h' for a command's flags.")
}

// flagSet returns a flag set for a command with the shared flags bound to cfg.
func flagSet(e env, name, usage string, cfg *Config) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: bigtables %s\n\nFlags:\n", usage)
		fs.PrintDefaults()
	}
	def := queue.DefaultNames()
	fs.StringVar(&cfg.DatabaseURL, "database-url", e.get("DATABASE_URL", DefaultDatabaseURL), "PostgreSQL URL (env DATABASE_URL)")
	fs.StringVar(&cfg.RedisURL, "redis-url", e.get("REDIS_URL", DefaultRedisURL), "Redis URL, redis:// or rediss:// (env REDIS_URL)")
	fs.StringVar(&cfg.Queues.Input, "input-queue", e.get("BIGTABLES_INPUT_QUEUE", def.Input), "Redis list of jobs (env BIGTABLES_INPUT_QUEUE)")
	fs.StringVar(&cfg.Queues.Output, "output-queue", e.get("BIGTABLES_OUTPUT_QUEUE", def.Output), "Redis list of results (env BIGTABLES_OUTPUT_QUEUE)")
	fs.StringVar(&cfg.Queues.Dead, "dead-queue", e.get("BIGTABLES_DEAD_QUEUE", def.Dead), "Redis list of dead letters (env BIGTABLES_DEAD_QUEUE)")
	fs.StringVar(&cfg.LogLevel, "log-level", e.get("BIGTABLES_LOG_LEVEL", "info"), "debug, info, warn or error (env BIGTABLES_LOG_LEVEL)")
	fs.StringVar(&cfg.LogFormat, "log-format", e.get("BIGTABLES_LOG_FORMAT", "text"), "text or json (env BIGTABLES_LOG_FORMAT)")
	return fs
}

// parse parses args, wanting exactly nArgs positional arguments (-1: any).
func parse(fs *flag.FlagSet, args []string, nArgs int) ([]string, error) {
	// Allow flags after positional arguments: "show U --history 5".
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if nArgs >= 0 && len(pos) != nArgs {
		return nil, usagef("expected %d argument(s), got %d: %s", nArgs, len(pos), strings.Join(pos, " "))
	}
	return pos, nil
}

func (c Config) logger(e env) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, usagef("log level %q: expected debug, info, warn or error", c.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	var log *slog.Logger
	switch c.LogFormat {
	case "text":
		log = slog.New(slog.NewTextHandler(e.stderr, opts))
	case "json":
		log = slog.New(slog.NewJSONHandler(e.stderr, opts))
	default:
		return nil, usagef("log format %q: expected text or json", c.LogFormat)
	}
	// go-redis reports pool trouble through its own logger; our loops log
	// every failed operation already, so its lines go to Debug, structured.
	redis.SetLogger(redisLogger{log})
	return log, nil
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}

// gcPercent is the garbage collector's target for the long-running
// commands when GOGC is not set: their heaps are small (tens of MiB), and
// fewer collections leave more of the CPU to PostgreSQL on the same host
// (bigtables bench: end to end +15% over Go's default of 100).
const gcPercent = 400

// tuneGC applies gcPercent unless the user chose GOGC.
func tuneGC(e env) {
	if e.getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// withStore runs fn with an open store, after checking the schema is
// current, and closes it after.
func (c Config) withStore(ctx context.Context, fn func(*store.Store) error) error {
	st, err := store.Open(ctx, c.DatabaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.CheckSchema(ctx); err != nil {
		return err
	}
	return fn(st)
}

// withQueue runs fn with a connected queue and closes it after.
func (c Config) withQueue(ctx context.Context, fn func(*queue.Queue) error) error {
	if err := c.Queues.Validate(); err != nil {
		return usageError{err.Error()}
	}
	rdb, err := queue.Connect(ctx, c.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := c.Queues.ValidateFor(rdb); err != nil { // Redis Cluster: one hash slot
		return usageError{err.Error()}
	}
	return fn(queue.New(rdb, c.Queues))
}

// withBoth runs fn with a store and a queue.
func (c Config) withBoth(ctx context.Context, fn func(*store.Store, *queue.Queue) error) error {
	return c.withStore(ctx, func(st *store.Store) error {
		return c.withQueue(ctx, func(q *queue.Queue) error { return fn(st, q) })
	})
}
