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
//	events        show transition events, follow them, requeue dead ones
//	scheduler     run the scheduler until SIGINT/SIGTERM
//	poller        run the poller until SIGINT/SIGTERM
//	worker        run the reference worker until SIGINT/SIGTERM
//	notifier      deliver events to webhooks and a Redis list until SIGINT/SIGTERM
//	web           serve the dashboard until SIGINT/SIGTERM
//	worker-check  check that a worker in any language keeps the protocol
//	bench         measure throughput, latency, scaling and memory
//	bench-scale   10 M records stored, a 1 M-record burst
//	soak          a steady load over time, plotted
//	chaos         the fault run
//	failover      the Redis failover run
//	version       print the module version and VCS revision (also --version)
//	completion    print a bash or zsh completion script
//
// The long-running processes (scheduler, poller, worker, web) wait for
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
	"net/url"
	"reflect"
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
	{"events", "show transition events (disabled, recovered, ...), follow them, requeue dead ones", runEvents},
	{"scheduler", "run the scheduler until SIGINT/SIGTERM", runScheduler},
	{"poller", "run the poller until SIGINT/SIGTERM", runPoller},
	{"worker", "run the reference worker until SIGINT/SIGTERM", runWorker},
	{"notifier", "deliver events to webhooks and a Redis list until SIGINT/SIGTERM", runNotifier},
	{"web", "serve the dashboard until SIGINT/SIGTERM: overview, records, dead letters, actions", runWeb},
	{"worker-check", "check that a worker in any language keeps the protocol", runWorkerCheck},
	{"bench", "measure throughput, latency, scaling and memory against local services", runBench},
	{"bench-scale", "store 10 M records, time a 1 M-record burst, ticks, queries and disk per record", runBenchScale},
	{"soak", "a steady load for a duration: throughput, latency, table sizes and RSS over time, plotted", runSoak},
	{"chaos", "the fault run: kill, freeze and stop processes, drop Redis replies, restart Redis, misbehave, then check invariants", runChaos},
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
	// redisLog sends the Redis client's own log lines (process-wide in
	// go-redis) to log; every command that talks to Redis calls it. Nil
	// does nothing.
	redisLog func(log *slog.Logger)
	// seen holds the flag set of the command that runs, so that run
	// reports its error in the log format the command was given.
	seen *seenFlags
}

// seenFlags is the flag set a command built, once it has built one.
type seenFlags struct{ fs *flag.FlagSet }

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
		backoff: wait.Backoff{First: 500 * time.Millisecond, Max: 15 * time.Second}, process: setProcessWide,
		redisLog: setRedisLogger}, args)
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
	if e.seen == nil {
		e.seen = &seenFlags{}
	}
	cmd, ok := lookup(args[0])
	if !ok {
		reportError(e, args[0], usagef("unknown command %q", args[0]), "Run 'bigtables help' for the list of commands.")
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
		reportError(e, args[0], ue, fmt.Sprintf("Run 'bigtables %s -h' for usage.", args[0]))
		return 2
	default:
		reportError(e, args[0], err, "")
		return 1
	}
}

// reportError prints a command's error on stderr, with a hint when there
// is one: as text, or as one JSON log line when the command was given
// --log-format json (or BIGTABLES_LOG_FORMAT=json), so that a log
// collector reads startup errors like any other line.
func reportError(e env, name string, err error, hint string) {
	format := e.get("BIGTABLES_LOG_FORMAT", "text")
	if e.seen != nil && e.seen.fs != nil {
		if f := e.seen.fs.Lookup("log-format"); f != nil {
			format = f.Value.String()
		}
	}
	if format == "json" {
		attrs := []any{"command", name, "err", err.Error()}
		if hint != "" {
			attrs = append(attrs, "hint", hint)
		}
		slog.New(slog.NewJSONHandler(e.stderr, nil)).Error("bigtables "+name+" failed", attrs...)
		return
	}
	if _, unknown := lookup(name); !unknown {
		fmt.Fprintf(e.stderr, "bigtables: %v\n", err)
	} else {
		fmt.Fprintf(e.stderr, "bigtables %s: %v\n", name, err)
	}
	if hint != "" {
		fmt.Fprintln(e.stderr, hint)
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "bigtables keeps records refreshed on a schedule, with a retry policy, through Redis queues.")
	fmt.Fprintln(w, "\nUsage: bigtables <command> [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nThe commands that use them take --database-url (DATABASE_URL), --redis-url (REDIS_URL),")
	fmt.Fprintln(w, "--input-queue (BIGTABLES_INPUT_QUEUE), --output-queue (BIGTABLES_OUTPUT_QUEUE) and")
	fmt.Fprintln(w, "--dead-queue (BIGTABLES_DEAD_QUEUE); every command takes --log-level and --log-format.")
	fmt.Fprintln(w, "Run 'bigtables <command> -h' for a command's flags and examples.")
}

// The shared flags a command may take besides --log-level and --log-format
// (which every command takes: its errors follow them).
const (
	takesDatabase = 1 << iota // --database-url
	takesRedis                // --redis-url
	takesQueues               // --input-queue, --output-queue, --dead-queue
)

// sharedFlags says which shared flags each command takes, so that its help
// lists only the flags it uses. A command missing here takes them all.
var sharedFlags = map[string]int{
	"migrate":      takesDatabase,
	"add":          takesDatabase,
	"update":       takesDatabase | takesRedis | takesQueues, // tells a cancelled attempt's worker to stop
	"show":         takesDatabase,
	"list":         takesDatabase,
	"plan":         0,
	"explain":      takesDatabase, // explain U reads the record
	"scheduler":    takesDatabase | takesRedis | takesQueues,
	"poller":       takesDatabase | takesRedis | takesQueues,
	"worker":       takesRedis | takesQueues,
	"worker-check": takesRedis, // the check uses private queues
	"bench":        takesDatabase | takesRedis,
	"chaos":        takesDatabase,                            // runs a private redis-server
	"failover":     takesDatabase,                            // runs private Redis servers and Sentinels
	"delete":       takesDatabase | takesRedis | takesQueues, // tells a cancelled attempt's worker to stop
	"pause":        takesDatabase | takesRedis | takesQueues, // likewise
	"resume":       takesDatabase,
	"run":          takesDatabase,
	"dead":         takesRedis | takesQueues,
	"stats":        takesDatabase | takesRedis | takesQueues,
	"version":      0,
	"completion":   0,
	"notifier":     takesDatabase | takesRedis | takesQueues, // the events list shares the queues' hash tag
	"events":       takesDatabase,
	"web":          takesDatabase | takesRedis | takesQueues,
	"upstream":     takesDatabase,
	"upstreams":    takesDatabase,
}

// examples are the lines each command's help ends with.
var examples = map[string][]string{
	"migrate": {"bigtables migrate",
		"DATABASE_URL='postgres://bt@db:5432/bigtables?sslmode=disable' bigtables migrate"},
	"add": {"bigtables add --uid report-1 --input-url https://example.com/r.csv \\\n    --schedule 'DTSTART;TZID=Europe/Paris:20240101T060000\\nRRULE:FREQ=DAILY;BYHOUR=6,16'",
		"bigtables add --uid feed-7 --input-url https://example.com/feed --timeout 10m --retries 0,1m,5m --on-exhausted wait_next",
		"bigtables add --uid once --input-url https://example.com/x --refresh-at 2030-01-02T06:00:00Z"},
	"update": {"bigtables update report-1                 # re-enable and refresh now",
		"bigtables update report-1 --timeout 2h --strategy 'exponential initial=5s max=5m max_attempts=7'"},
	"show": {"bigtables show report-1", "bigtables show report-1 --history 10"},
	"list": {"bigtables list", "bigtables list --disabled --json --limit 50"},
	"plan": {"bigtables plan --schedule 'RRULE:FREQ=DAILY;BYHOUR=6' --start 2024-03-04T05:00:00Z --fail-all",
		"bigtables plan --retries 30m --start 2024-03-04T12:30:00Z --outcomes failure:30m,success --format json",
		"bigtables plan --schedule 'RRULE:FREQ=HOURLY' --timeout 10m --retries 0,1m,5m --start 2024-03-04T00:00:00Z \\\n    --outage 2024-03-04T00:00:00Z/30m --breaker 'consecutive=2 cool-down=10m max-cool-down=1h'"},
	"explain": {"bigtables explain report-1", "bigtables explain --strategy 'fibonacci unit=1m max_attempts=10'"},
	"scheduler": {"bigtables scheduler",
		"bigtables scheduler --batch 5000 --keep-attempts 20 --keep-days 30 --log-format json"},
	"poller": {"bigtables poller", "bigtables poller --batch 2000 --lease 30s --log-format json"},
	"worker": {"bigtables worker --concurrency 16",
		"bigtables worker --exec './refresh.sh' --shutdown-grace 30s"},
	"worker-check": {"bigtables worker-check -- /usr/bin/python3 examples/python/worker.py",
		"bigtables worker-check -v --grace 5s -- node examples/node/worker.js"},
	"bench":    {"bigtables bench", "bigtables bench --records 10000 --only e2e,baseline --json --check"},
	"chaos":    {"bigtables chaos", "bigtables chaos --records 200 --faults 10s --seed 42"},
	"failover": {"bigtables failover", "bigtables failover --records 200 --kills 1 --lag 500ms --json"},
	"delete":   {"bigtables delete report-1"},
	"pause":    {"bigtables pause report-1          # never started until resumed"},
	"resume":   {"bigtables resume report-1"},
	"run":      {"bigtables run report-1            # refresh now, nothing else changed"},
	"dead": {"bigtables dead list --limit 20", "bigtables dead requeue --limit 100",
		"bigtables dead purge --yes"},
	"stats":   {"bigtables stats", "bigtables stats --json"},
	"version": {"bigtables version", "bigtables --version"},
	"notifier": {"bigtables notifier --webhook https://hooks.example.com/bigtables   # BIGTABLES_WEBHOOK_SECRET signs",
		"bigtables notifier --allow-host '*.example.com' --events-list bigtables-events --keep 720h"},
	"events": {"bigtables events --uid report-1", "bigtables events --follow --type disabled --json",
		"bigtables events --upstream partner --type breaker_opened", "bigtables events --dead", "bigtables events requeue 42"},
	"web": {"bigtables web                         # read-only, on 127.0.0.1:8080",
		"BIGTABLES_ADMIN_TOKEN=... bigtables web --addr 127.0.0.1:8080   # with actions"},
	"bench-scale": {"bigtables bench-scale                  # 10,000,000 records, two 1,000,000-record bursts",
		"bigtables bench-scale --stored 100000 --burst 10000 --partitions 8 --json"},
	"soak": {"bigtables soak --duration 30m", "bigtables soak --duration 5m --rate 3000 --plot docs/soak.svg"},
	"upstream": {"bigtables upstream set partner --max-in-flight 20 --rate 5/s",
		"bigtables upstream set api.example.com --breaker 'consecutive=3 cool-down=1m'",
		"bigtables upstream set flaky.example.com --breaker off"},
	"upstreams":  {"bigtables upstreams", "bigtables upstreams --json"},
	"completion": {"bigtables completion bash > /etc/bash_completion.d/bigtables", "source <(bigtables completion zsh)"},
}

// summaries are the commands' one-line summaries, by name (filled from
// the table at init: the table refers to the commands, which refer here).
var summaries = map[string]string{}

func init() {
	for _, c := range commands {
		summaries[c.name] = c.summary
	}
}

// flagSet returns a flag set for a command with the shared flags it takes
// (sharedFlags) bound to cfg. It prints nothing itself: parse reports
// errors, and -h prints the help on stdout: usage, summary, flags in
// README's --flag style, examples.
func flagSet(e env, name, usage string, cfg *Config) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := e.stdout
		fmt.Fprintf(w, "Usage: bigtables %s\n", usage)
		if s := summaries[name]; s != "" {
			fmt.Fprintf(w, "\n%s%s.\n", strings.ToUpper(s[:1]), s[1:])
		}
		fmt.Fprintln(w, "\nFlags:")
		printFlags(w, fs)
		if ex := examples[name]; len(ex) > 0 {
			fmt.Fprintln(w, "\nExamples:")
			for _, x := range ex {
				fmt.Fprintln(w, "  "+x)
			}
		}
	}
	if e.seen != nil {
		e.seen.fs = fs
	}
	takes, listed := sharedFlags[name]
	if !listed {
		takes = takesDatabase | takesRedis | takesQueues
	}
	if takes&takesDatabase != 0 {
		fs.StringVar(&cfg.DatabaseURL, "database-url", e.get("DATABASE_URL", DefaultDatabaseURL), "PostgreSQL `URL` (env DATABASE_URL)")
	}
	if takes&takesRedis != 0 {
		fs.StringVar(&cfg.RedisURL, "redis-url", e.get("REDIS_URL", DefaultRedisURL), "Redis `URL`, redis:// or rediss:// (env REDIS_URL)")
	}
	// Their defaults come from the environment and may hold passwords: the
	// help shows them redacted.
	for _, name := range []string{"database-url", "redis-url"} {
		if f := fs.Lookup(name); f != nil {
			f.DefValue = redact.URL(f.DefValue)
		}
	}
	if takes&takesQueues != 0 {
		def := queue.DefaultNames()
		fs.StringVar(&cfg.Queues.Input, "input-queue", e.get("BIGTABLES_INPUT_QUEUE", def.Input), "Redis list of jobs, `NAME` (env BIGTABLES_INPUT_QUEUE)")
		fs.StringVar(&cfg.Queues.Output, "output-queue", e.get("BIGTABLES_OUTPUT_QUEUE", def.Output), "Redis list of results, `NAME` (env BIGTABLES_OUTPUT_QUEUE)")
		fs.StringVar(&cfg.Queues.Dead, "dead-queue", e.get("BIGTABLES_DEAD_QUEUE", def.Dead), "Redis list of dead letters, `NAME` (env BIGTABLES_DEAD_QUEUE)")
	}
	fs.StringVar(&cfg.LogLevel, "log-level", e.get("BIGTABLES_LOG_LEVEL", "info"), "`LEVEL`: debug, info, warn or error (env BIGTABLES_LOG_LEVEL)")
	fs.StringVar(&cfg.LogFormat, "log-format", e.get("BIGTABLES_LOG_FORMAT", "text"), "`FORMAT` of logs and errors: text or json (env BIGTABLES_LOG_FORMAT)")
	return fs
}

func isString(f *flag.Flag) bool {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	_, s := g.Get().(string)
	return s
}

// flagName is how help and README write a flag: --name, or -v for a
// one-letter one.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// printFlags prints fs's flags as flag.PrintDefaults does, in --flag style.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		switch arg { // flag's generic names, in README's words
		case "duration":
			arg = "D"
		case "int", "uint":
			arg = "N"
		case "string":
			arg = "VALUE"
		}
		line := "  " + flagName(f.Name)
		if arg != "" {
			line += " " + arg
		}
		fmt.Fprintln(w, line)
		def := f.DefValue
		switch {
		case def == "" || def == "0" || def == "0s" || def == "false":
		case isString(f):
			usage += fmt.Sprintf(" (default %q)", def)
		default:
			usage += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintf(w, "      %s\n", strings.ReplaceAll(usage, "\n", "\n      "))
	})
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
	if f := fs.Lookup("redis-url"); f != nil {
		if err := checkRedisURL(f.Value.String()); err != nil {
			return nil, err
		}
	}
	if nArgs >= 0 && len(pos) != nArgs {
		return nil, usagef("expected %d argument(s), got %d: %s", nArgs, len(pos), strings.Join(pos, " "))
	}
	return pos, nil
}

// checkRedisURL refuses a Redis URL that can never work (an unknown scheme,
// a bad database number, an unknown option), for every command that takes
// one, before it does anything: update, for one, connects to Redis only when
// it cancels a running attempt.
func checkRedisURL(raw string) error {
	if err := queue.CheckURL(raw); err != nil {
		return fmt.Errorf("Redis URL %s: %w", redact.URL(raw), redact.Error(err, raw))
	}
	return nil
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
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: logValues(c.LogFormat == "json")}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(e.stderr, opts)), nil
	}
	return slog.New(slog.NewTextHandler(e.stderr, opts)), nil
}

// logValues is the loggers' ReplaceAttr: it writes values as a reader
// wants them rather than as Go holds them. A zero time (a NULL column such
// as refresh_at) is "none" in text and null in JSON, not 0001-01-01; an
// empty string (no decision, no reason) is left out; a duration is a
// string such as "1m30s" in JSON too, not nanoseconds.
func logValues(json bool) func(groups []string, a slog.Attr) slog.Attr {
	return func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 {
			switch a.Key {
			case slog.TimeKey, slog.LevelKey, slog.MessageKey, slog.SourceKey:
				return a
			}
		}
		v := a.Value
		switch v.Kind() {
		case slog.KindTime:
			if v.Time().IsZero() {
				if json {
					return slog.Any(a.Key, nil)
				}
				return slog.String(a.Key, "none")
			}
		case slog.KindDuration:
			if json {
				return slog.String(a.Key, v.Duration().String())
			}
		case slog.KindString:
			if v.String() == "" {
				return slog.Attr{}
			}
		case slog.KindAny:
			// Named string types, such as refresh.Decision.
			if r := reflect.ValueOf(v.Any()); r.Kind() == reflect.String && r.Len() == 0 {
				return slog.Attr{}
			}
		}
		return a
	}
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
// the user chose GOGC.
func setProcessWide(e env, log *slog.Logger) {
	if e.getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// setRedisLogger is env.redisLog in a real run: go-redis' own log lines
// (pool trouble, which our commands already report as failed operations)
// go to log at Debug, in its format, instead of go-redis' default logger
// on stderr.
func setRedisLogger(log *slog.Logger) { redis.SetLogger(redisLogger{log}) }

// routeRedisLog applies env.redisLog: every command that talks to Redis
// calls it before connecting.
func (e env) routeRedisLog(log *slog.Logger) {
	if e.redisLog != nil {
		e.redisLog(log)
	}
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
	e.routeRedisLog(log)
	return log, nil
}

// openStore opens the store and checks that its schema is current.
func (c Config) openStore(ctx context.Context) (*store.Store, error) {
	st, err := store.Open(ctx, c.DatabaseURL)
	if err != nil {
		return nil, missingDatabase(err, c.DatabaseURL)
	}
	if err := st.CheckSchema(ctx); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// missingDatabase adds to err, when it says that the database of dbURL
// does not exist (SQLSTATE 3D000, as on a fresh PostgreSQL: nothing creates
// the default database bigtables), how to create it; migrate only creates
// the schema inside it.
func missingDatabase(err error, dbURL string) error {
	if store.SQLState(err) != "3D000" {
		return err
	}
	u, perr := url.Parse(dbURL)
	if perr != nil || strings.Trim(u.Path, "/") == "" {
		return fmt.Errorf("%w; create it (CREATE DATABASE), then run bigtables migrate", err)
	}
	psql := "psql -h " + u.Hostname()
	if p := u.Port(); p != "" {
		psql += " -p " + p
	}
	if u.User != nil && u.User.Username() != "" {
		psql += " -U " + u.User.Username()
	}
	return fmt.Errorf("%w; create it: %s -d postgres -c 'CREATE DATABASE \"%s\"', then run bigtables migrate",
		err, psql, strings.Trim(u.Path, "/"))
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
	if err := checkRedisURL(c.RedisURL); err != nil {
		return err
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
