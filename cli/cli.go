// Package cli is the bigtables command line: it turns arguments and
// environment variables into configurations and runs the commands of the
// table below (the commands variable, in this order):
//
//	migrate       create or upgrade the database schema (idempotent)
//	add           add a record
//	update        change a record as a person saving it
//	show          print one record as JSON
//	list          list records
//	delete        delete a record and its history
//	pause         hold a record: never started, its running attempt cancelled
//	resume        lift a pause
//	run           refresh a record now, changing nothing else
//	upstream      configure an upstream: upstream set NAME --max-in-flight N --rate R/s --breaker SPEC
//	upstreams     list upstreams: breaker, failures, in flight, parked, next probe
//	dead          list, requeue or purge dead letters
//	stats         counts by phase, due lag, queue depths, live pollers
//	plan          simulate a policy on a clock and print every attempt
//	explain       print a record's or a policy's rules as sentences
//	scheduler     run the scheduler until SIGINT/SIGTERM
//	poller        run the poller until SIGINT/SIGTERM
//	worker        run the reference worker until SIGINT/SIGTERM
//	worker-check  check that a worker in any language keeps the protocol
//	bench         measure throughput, latency, scaling and memory
//	chaos         the fault run
//	failover      the Redis failover run
//	version       print the module version and VCS revision (also --version)
//	completion    print a bash or zsh completion script
//
// The three long-running processes (scheduler, poller, worker) wait for
// PostgreSQL and Redis at start, retrying with backoff, so the order in
// which a service manager starts things does not matter; the other
// commands fail at once. cmd/bigtables only calls Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/bigtables/bigtables/internal/redact"
	"github.com/bigtables/bigtables/internal/wait"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/store"
	"github.com/redis/go-redis/v9"
)

// Environment variables and their defaults.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/bigtables?sslmode=disable"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e env, args []string) error
}

// commands are the subcommands, in the order help lists them. The package
// doc lists them too (a test keeps the two alike).
var commands = []command{
	{"migrate", "create or upgrade the database schema (idempotent)", runMigrate},
	{"add", "add a record", runAdd},
	{"update", "change a record as a person saving it: re-enables it and refreshes now", runUpdate},
	{"show", "print one record as JSON", runShow},
	{"list", "list records", runList},
	{"delete", "delete a record and its history (its running attempt is cancelled)", runDelete},
	{"pause", "hold a record: never started until resumed; its running attempt is cancelled", runPause},
	{"resume", "lift a pause", runResume},
	{"run", "refresh a record now, changing nothing else", runRun},
	{"upstream", "configure an upstream: upstream set NAME --max-in-flight N --rate R/s --breaker SPEC", runUpstream},
	{"upstreams", "list upstreams: breaker state, failures in the window, in flight, parked records, next probe", runUpstreams},
	{"dead", "list, requeue or purge dead letters", runDead},
	{"stats", "counts by phase, due lag, queue depths and live pollers (text or --json)", runStats},
	{"plan", "simulate a policy on a clock and print every attempt", runPlan},
	{"explain", "print a record's or a policy's rules as sentences", runExplain},
	{"scheduler", "run the scheduler until SIGINT/SIGTERM", runScheduler},
	{"poller", "run the poller until SIGINT/SIGTERM", runPoller},
	{"worker", "run the reference worker until SIGINT/SIGTERM", runWorker},
	{"worker-check", "check that a worker in any language keeps the protocol", runWorkerCheck},
	{"bench", "measure throughput, latency, scaling and memory against local services", runBench},
	{"chaos", "the fault run: kill processes, restart Redis, misbehave, then check invariants", runChaos},
	{"failover", "the failover run: kill the Sentinel-managed Redis master under load, measure what it costs", runFailover},
	{"version", "print the module version and VCS revision (also --version)", runVersion},
	{"completion", "print a bash or zsh completion script", runCompletion},
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

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

// env is what a command may touch outside itself; Main passes the real
// ones, tests their own.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	stdin  io.Reader
	// backoff paces the long-running commands' waiting for PostgreSQL and
	// Redis at start.
	backoff wait.Backoff
	// process applies what a long-running command sets for the whole
	// process it owns: the garbage collector's target and the Redis
	// client's logger (both process-wide in their libraries). Nil does
	// nothing.
	process func(e env, log *slog.Logger)
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

// Main runs the command line args (without the program name) and returns the
// exit status: 0 success, 1 failure, 2 bad usage.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	return run(ctx, env{getenv: getenv, stdout: stdout, stderr: stderr, stdin: stdin,
		backoff: wait.Backoff{First: 500 * time.Millisecond, Max: 15 * time.Second}, process: setProcessWide}, args)
}

func run(ctx context.Context, e env, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(e.stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" {
		args = append([]string{"version"}, args[1:]...)
	}
	cmd, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(e.stderr, "bigtables: unknown command %q\nRun 'bigtables help' for the list of commands.\n", args[0])
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
		fmt.Fprintf(e.stderr, "bigtables %s: %s\n", args[0], ue.msg)
		fmt.Fprintf(e.stderr, "Run 'bigtables %s -h' for usage.\n", args[0])
		return 2
	default:
		fmt.Fprintf(e.stderr, "bigtables %s: %v\n", args[0], err)
		return 1
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "bigtables keeps records refreshed on a schedule, with a retry policy, through Redis queues.")
	fmt.Fprintln(w, "\nUsage: bigtables <command> [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nEvery command takes --database-url (DATABASE_URL), --redis-url (REDIS_URL),")
	fmt.Fprintln(w, "--input-queue (BIGTABLES_INPUT_QUEUE), --output-queue (BIGTABLES_OUTPUT_QUEUE),")
	fmt.Fprintln(w, "--dead-queue (BIGTABLES_DEAD_QUEUE), --log-level and --log-format.")
	fmt.Fprintln(w, "Run 'bigtables <command> -h' for a command's flags.")
}

// flagSet returns a flag set for a command with the shared flags bound to
// cfg. It prints nothing itself: parse reports errors, and -h prints the
// usage on stdout.
func flagSet(e env, name, usage string, cfg *Config) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fs.SetOutput(e.stdout)
		defer fs.SetOutput(io.Discard)
		fmt.Fprintf(e.stdout, "Usage: bigtables %s\n\nFlags:\n", usage)
		fs.PrintDefaults()
	}
	def := queue.DefaultNames()
	fs.StringVar(&cfg.DatabaseURL, "database-url", e.get("DATABASE_URL", DefaultDatabaseURL), "PostgreSQL URL (env DATABASE_URL)")
	fs.StringVar(&cfg.RedisURL, "redis-url", e.get("REDIS_URL", DefaultRedisURL), "Redis URL, redis:// or rediss:// (env REDIS_URL)")
	// Their defaults come from the environment and may hold passwords: the
	// help shows them redacted.
	for _, name := range []string{"database-url", "redis-url"} {
		f := fs.Lookup(name)
		f.DefValue = redact.URL(f.DefValue)
	}
	fs.StringVar(&cfg.Queues.Input, "input-queue", e.get("BIGTABLES_INPUT_QUEUE", def.Input), "Redis list of jobs (env BIGTABLES_INPUT_QUEUE)")
	fs.StringVar(&cfg.Queues.Output, "output-queue", e.get("BIGTABLES_OUTPUT_QUEUE", def.Output), "Redis list of results (env BIGTABLES_OUTPUT_QUEUE)")
	fs.StringVar(&cfg.Queues.Dead, "dead-queue", e.get("BIGTABLES_DEAD_QUEUE", def.Dead), "Redis list of dead letters (env BIGTABLES_DEAD_QUEUE)")
	fs.StringVar(&cfg.LogLevel, "log-level", e.get("BIGTABLES_LOG_LEVEL", "info"), "debug, info, warn or error (env BIGTABLES_LOG_LEVEL)")
	fs.StringVar(&cfg.LogFormat, "log-format", e.get("BIGTABLES_LOG_FORMAT", "text"), "text or json (env BIGTABLES_LOG_FORMAT)")
	return fs
}

// parse parses args, wanting exactly nArgs positional arguments (-1: any),
// and checks the shared flags every command takes.
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
	if err := checkLogFlags(fs.Lookup("log-level").Value.String(), fs.Lookup("log-format").Value.String()); err != nil {
		return nil, err
	}
	if nArgs >= 0 && len(pos) != nArgs {
		return nil, usagef("expected %d argument(s), got %d: %s", nArgs, len(pos), strings.Join(pos, " "))
	}
	return pos, nil
}

// checkLogFlags refuses a log level or format that logger would not take,
// for every command (those that log nothing too), so a typo is never
// accepted silently.
func checkLogFlags(level, format string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return usagef("--log-level %q: expected debug, info, warn or error", level)
	}
	if format != "text" && format != "json" {
		return usagef("--log-format %q: expected text or json", format)
	}
	return nil
}

// logger builds the logger the flags ask for, on stderr. It changes nothing
// outside the value it returns.
func (c Config) logger(e env) (*slog.Logger, error) {
	if err := checkLogFlags(c.LogLevel, c.LogFormat); err != nil {
		return nil, err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel)) // checked above
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(e.stderr, opts)), nil
	}
	return slog.New(slog.NewTextHandler(e.stderr, opts)), nil
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

// setProcessWide is env.process in a real run: it applies gcPercent unless
// the user chose GOGC, and sends go-redis' own log lines (pool trouble,
// which our loops already report as failed operations) to log at Debug.
func setProcessWide(e env, log *slog.Logger) {
	if e.getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	redis.SetLogger(redisLogger{log})
}

// startProcess builds the logger of a long-running command and applies
// what such a command sets for its whole process.
func (c Config) startProcess(e env) (*slog.Logger, error) {
	log, err := c.logger(e)
	if err != nil {
		return nil, err
	}
	if e.process != nil {
		e.process(e, log)
	}
	return log, nil
}

// openStore opens the store and checks that its schema is current.
func (c Config) openStore(ctx context.Context) (*store.Store, error) {
	st, err := store.Open(ctx, c.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if err := st.CheckSchema(ctx); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// openQueue connects to Redis.
func (c Config) openQueue(ctx context.Context) (*queue.Queue, func() error, error) {
	if err := c.Queues.Validate(); err != nil {
		return nil, nil, usageError{err.Error()}
	}
	rdb, err := queue.Connect(ctx, c.RedisURL)
	if err != nil {
		return nil, nil, err
	}
	if err := c.Queues.ValidateFor(rdb); err != nil { // Redis Cluster: one hash slot
		rdb.Close()
		return nil, nil, usageError{err.Error()}
	}
	return queue.New(rdb, c.Queues), rdb.Close, nil
}

// withStore runs fn with an open store, after checking the schema is
// current, and closes it after.
func (c Config) withStore(ctx context.Context, fn func(*store.Store) error) error {
	st, err := c.openStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(st)
}

// withQueue runs fn with a connected queue and closes it after.
func (c Config) withQueue(ctx context.Context, fn func(*queue.Queue) error) error {
	q, closeQ, err := c.openQueue(ctx)
	if err != nil {
		return err
	}
	defer closeQ()
	return fn(q)
}

// errStopped means a long-running command was stopped while it waited for
// its services: a clean exit.
var errStopped = errors.New("stopped before the services were reached")

// awaitStore is openStore for the long-running commands: while PostgreSQL
// is not reachable, or not migrated yet, it logs why and retries with
// backoff until ctx is done. A URL that can never work fails at once.
func (c Config) awaitStore(ctx context.Context, e env, log *slog.Logger) (*store.Store, error) {
	var st *store.Store
	err := e.backoff.Retry(ctx, func(ctx context.Context) error {
		var err error
		st, err = c.openStore(ctx)
		return err
	}, func(err error) bool { return errors.Is(err, store.ErrBadURL) }, func(n int, err error, wait time.Duration) {
		log.Warn("PostgreSQL is not ready; retrying", "err", err, "retry_in", wait, "tries", n)
	})
	if ctx.Err() != nil {
		return nil, errStopped
	}
	return st, err
}

// awaitQueue is openQueue for the long-running commands: while Redis is not
// reachable it logs why and retries with backoff until ctx is done.
func (c Config) awaitQueue(ctx context.Context, e env, log *slog.Logger) (*queue.Queue, func() error, error) {
	var q *queue.Queue
	var closeQ func() error
	err := e.backoff.Retry(ctx, func(ctx context.Context) error {
		var err error
		q, closeQ, err = c.openQueue(ctx)
		return err
	}, nil, func(n int, err error, wait time.Duration) {
		log.Warn("Redis is not ready; retrying", "err", err, "retry_in", wait, "tries", n)
	})
	if ctx.Err() != nil {
		return nil, nil, errStopped
	}
	return q, closeQ, err
}

// runProcess runs a long-running command's fn once its services answer:
// the store when needStore, always the queue. Bad queue names or a Redis
// URL that can never work fail at once, before any waiting. Stopped while
// waiting, it returns nil.
func (c Config) runProcess(ctx context.Context, e env, log *slog.Logger, needStore bool, fn func(*store.Store, *queue.Queue) error) error {
	if err := c.Queues.Validate(); err != nil {
		return usageError{err.Error()}
	}
	if _, err := redis.ParseURL(c.RedisURL); err != nil {
		return fmt.Errorf("parse Redis URL %s: %w", redact.URL(c.RedisURL), redact.Error(err, c.RedisURL))
	}
	var st *store.Store
	if needStore {
		var err error
		if st, err = c.awaitStore(ctx, e, log); err != nil {
			return stoppedIsClean(log, err)
		}
		defer st.Close()
	}
	q, closeQ, err := c.awaitQueue(ctx, e, log)
	if err != nil {
		return stoppedIsClean(log, err)
	}
	defer closeQ()
	return fn(st, q)
}

func stoppedIsClean(log *slog.Logger, err error) error {
	if errors.Is(err, errStopped) {
		log.Info(err.Error())
		return nil
	}
	return err
}
