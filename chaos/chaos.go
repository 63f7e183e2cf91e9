// Package chaos is the fault run: against a private Redis and its own
// PostgreSQL database it creates records with second-scale policies, runs
// several schedulers and pollers as real processes behind a lossy proxy to
// Redis, and a misbehaving worker fleet; it kills, pauses and duplicates the
// processes at random moments, loses Redis replies and connections, stops
// every poller for longer than the timeouts, writes unreadable rows, restarts
// Redis empty once, then stops the faults, lets the system settle, and checks
// the invariants straight from the database and Redis, including that our
// own faults burned no attempt.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
)

// Config sizes a run. Zero values take the defaults.
type Config struct {
	AdminURL    string        // PostgreSQL URL allowed to create databases
	RedisServer string        // redis-server executable (default: found on PATH)
	Binary      string        // bigtables executable (default: this one)
	Records     int           // default 2000
	Faults      time.Duration // how long faults are injected (default 60s)
	Schedulers  int           // default 2
	Pollers     int           // default 2
	Workers     int           // worker goroutines (default 16)
	Seed        uint64        // random seed (default: the time)
	Progress    io.Writer
}

func (c *Config) defaults() {
	if c.Records <= 0 {
		c.Records = 2000
	}
	if c.Faults <= 0 {
		c.Faults = 60 * time.Second
	}
	if c.Schedulers <= 0 {
		c.Schedulers = 2
	}
	if c.Pollers <= 0 {
		c.Pollers = 2
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// Report is what a run did and found.
type Report struct {
	Seed     uint64         `json:"seed"`
	Records  int            `json:"records"`
	Attempts int            `json:"attempts"`
	Faults   map[string]int `json:"faults"`
	Pushed   map[string]int `json:"results_pushed"`
	// Burned counts the attempts our own faults burned (each is also a
	// violation of the invariant that says so): see judge.
	Burned int `json:"attempts_burned_by_our_faults"`
	// LostWithRedis counts the attempts whose job or result was in Redis
	// when it was restarted empty: they end by timeout, by design.
	LostWithRedis int `json:"attempts_lost_with_redis_data"`
	// UndoneStarts counts attempts a worker answered although their start
	// was undone (the push was reported failed, yet it had landed).
	UndoneStarts int `json:"results_for_undone_starts"`
	// Refusal is what a refused duplicate poller printed, as a sample.
	Refusal    string      `json:"duplicate_poller_refusal,omitempty"`
	Invariants []Invariant `json:"invariants"`
}

// Invariant is one checked property and its violations.
type Invariant struct {
	Name       string   `json:"name"`
	Checked    int      `json:"checked"`
	Violations []string `json:"violations,omitempty"`
}

// Violations counts violations across invariants.
func (r Report) Violations() int {
	n := 0
	for _, inv := range r.Invariants {
		n += len(inv.Violations)
	}
	return n
}

type run struct {
	cfg       Config
	rng       *rand.Rand
	rngMu     sync.Mutex
	dbURL     string
	db        *sqlx.DB
	st        *store.Store
	redisURL  string // the processes': through the proxy
	directURL string // Redis itself: the worker fleet, the checker, the duplicate poller
	port      int
	redis     *redisServer
	proxy     *proxy
	rdb       redis.UniversalClient // direct
	names     queue.Names
	netMu     sync.Mutex // held by each network fault and by the duplicate-id check

	mu                  sync.Mutex
	faults              map[string]int
	pushed              []push
	pops                []pop
	unreadable          map[string]string // uid -> fragment of the parse error its reason must show
	duplicateViolations []string          // a second poller with a live id was not refused
	refusal             string            // what a refused duplicate poller said
	schedulerKills      []time.Time
	redisDown           [2]time.Time // when Redis was killed and when it answered again
	behave              bool         // faults stopped: workers answer success at once
	procs               []*proc
	procsMu             sync.Mutex
}

// push is one value a worker pushed.
type push struct {
	attempt, uid, kind string // kind: success, failure, not_retryable, duplicate, late, garbage, poison
	want               string // poison: the outcome it has if cleaned rather than dead-lettered
	raw                string
	at                 time.Time // when the RPUSH had returned: Redis stored it no later
	deadline           time.Time
}

// pop is one job a worker took from the input list.
type pop struct {
	attempt  string
	at       time.Time // when BLPOP returned
	deadline time.Time
}

func (r *run) float() float64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Float64()
}

func (r *run) fault(kind string) {
	r.mu.Lock()
	r.faults[kind]++
	r.mu.Unlock()
}

func (r *run) say(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, "chaos: "+format+"\n", args...)
}

// Run performs the fault run.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg.defaults()
	r := &run{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed>>1|1)), faults: map[string]int{}, unreadable: map[string]string{}}
	cleanup, err := r.setup(ctx)
	defer cleanup()
	if err != nil {
		return Report{}, err
	}
	r.say("seed %d: %d records, %d schedulers, %d pollers, %d workers, faults for %v", cfg.Seed, cfg.Records, cfg.Schedulers, cfg.Pollers, cfg.Workers, cfg.Faults)
	if err := r.addRecords(ctx); err != nil {
		return Report{}, err
	}
	for i := range cfg.Schedulers {
		r.startProc(fmt.Sprintf("scheduler-%d", i+1), "scheduler", "--interval", "200ms", "--batch", strconv.Itoa(schedulerBatch))
	}
	for i := range cfg.Pollers {
		r.startProc(fmt.Sprintf("poller-%d", i+1), "poller", "--lease", pollerLease.String(), "--batch", "50")
	}
	fleetCtx, stopFleet := context.WithCancel(ctx)
	var fleet sync.WaitGroup
	for range cfg.Workers {
		fleet.Go(func() { r.worker(fleetCtx) })
	}

	// Faults: rows nobody can read, more than the schedulers' ticks claim;
	// kills and restarts; a lossy network to Redis; paused and duplicated
	// pollers; every poller down past the timeout once, early; Redis
	// restarted empty once, half way or after that outage, so that what the
	// outage leaves waiting in Redis is not lost with it.
	if err := r.addUnreadable(ctx, cfg.Schedulers*schedulerBatch+50); err != nil {
		stopFleet()
		return Report{}, err
	}
	stop := make(chan struct{})
	var faulting sync.WaitGroup
	faulting.Go(func() { r.killer(ctx, stop) })
	faulting.Go(func() { r.networkFaults(stop) })
	faulting.Go(func() { r.processFaults(ctx, stop) })
	outageAt := r.between(500*time.Millisecond, max(time.Second, cfg.Faults/2-pollersOutage-3*time.Second))
	faulting.Go(func() {
		if !wait(stop, outageAt) {
			r.pollersDown(pollersOutage)
		}
	})
	restartAt := max(cfg.Faults/2, outageAt+pollersOutage+3*time.Second)
	if restartAt > cfg.Faults-time.Second {
		restartAt = max(cfg.Faults-time.Second, 0)
	}
	restart := time.After(restartAt)
	third := time.After(cfg.Faults / 3)
	end := time.After(cfg.Faults)
	tick := time.NewTicker(5 * time.Second)
	var ferr error
faults:
	for {
		select {
		case <-ctx.Done():
			break faults
		case <-third:
			ferr = r.addUnreadable(ctx, 50)
		case <-restart:
			ferr = r.restartRedis(ctx)
		case <-tick.C:
			r.progress(ctx, "faults")
		case <-end:
			break faults
		}
		if ferr != nil {
			break
		}
	}
	tick.Stop()
	close(stop)
	faulting.Wait()
	if ferr != nil {
		stopFleet()
		return Report{}, ferr
	}
	r.mu.Lock()
	r.behave = true
	r.mu.Unlock()
	faultsEnded := time.Now()
	r.say("faults stopped; letting it settle")

	// Settle: every process up, every worker well-behaved, until nothing runs
	// past its deadline and the output list is drained; then stop the
	// schedulers, let the last jobs finish, and stop the pollers.
	// A system that does not settle is a finding, not an error of the run:
	// the report says what is still in flight, beside the other invariants.
	r.ensureAll()
	settled := r.settle(ctx, faultsEnded)
	r.stopAll("scheduler")
	if settled == nil {
		time.Sleep(3 * time.Second) // the last jobs are answered...
		settled = r.drained(ctx, 30*time.Second)
	}
	stopFleet()
	fleet.Wait()
	r.stopAll("poller")
	if ctx.Err() != nil {
		return Report{}, ctx.Err()
	}
	rep, err := r.check(ctx)
	inv := Invariant{Name: "the system settles after the faults: nothing left running or queued", Checked: 1}
	if settled != nil {
		inv.Violations = []string{settled.Error()}
	}
	rep.Invariants = append([]Invariant{inv}, rep.Invariants...)
	return rep, err
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (r *run) setup(ctx context.Context) (func(), error) {
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	if r.cfg.Binary == "" {
		b, err := os.Executable()
		if err != nil {
			return cleanup, fmt.Errorf("find the bigtables binary: %w", err)
		}
		r.cfg.Binary = b
	}
	if r.cfg.RedisServer == "" {
		p, err := exec.LookPath("redis-server")
		if err != nil {
			return cleanup, errors.New("redis-server is not on PATH: the fault run restarts a private Redis (scripts/services.sh installs it)")
		}
		r.cfg.RedisServer = p
	}
	port, err := freePort()
	if err != nil {
		return cleanup, err
	}
	r.port = port
	r.directURL = fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	r.redis = &redisServer{bin: r.cfg.RedisServer, port: port}
	if err := r.redis.start(ctx); err != nil {
		return cleanup, err
	}
	cleanups = append(cleanups, r.redis.stop)
	if r.proxy, err = newProxy(fmt.Sprintf("127.0.0.1:%d", port), r.fault, nil); err != nil {
		return cleanup, err
	}
	cleanups = append(cleanups, r.proxy.Close)
	r.redisURL = "redis://" + r.proxy.Addr() + "/0"
	r.rdb = redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), DialTimeout: time.Second, ReadTimeout: 3 * time.Second})
	cleanups = append(cleanups, func() { r.rdb.Close() })
	r.names = queue.DefaultNames()

	dbURL, drop, err := store.ScratchDatabase(ctx, r.cfg.AdminURL, "bigtables_chaos")
	if err != nil {
		return cleanup, err
	}
	cleanups = append(cleanups, func() { r.killAll(); drop() })
	r.dbURL = dbURL
	if r.st, err = store.Open(ctx, r.dbURL); err != nil {
		return cleanup, err
	}
	cleanups = append(cleanups, func() { r.st.Close() })
	if _, err := r.st.Migrate(ctx); err != nil {
		return cleanup, err
	}
	msg, err := breakerOff(ctx, r.st, "chaos.invalid")
	if err != nil {
		return cleanup, err
	}
	r.say("%s", msg)
	if r.db, err = sqlx.Open("postgres", r.dbURL); err != nil {
		return cleanup, err
	}
	cleanups = append(cleanups, func() { r.db.Close() })
	return cleanup, nil
}

// redisServer is the run's private redis-server, in a temporary directory
// of its own that stop removes.
type redisServer struct {
	bin  string
	port int
	cmd  *exec.Cmd
	dir  string
}

// start starts redis-server, without persistence, and waits until it answers.
func (s *redisServer) start(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "bigtables-chaos-redis")
	if err != nil {
		return fmt.Errorf("redis-server directory: %w", err)
	}
	s.dir = dir
	s.cmd = exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--logfile", "")
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		s.stop()
		return fmt.Errorf("start redis-server: %w", err)
	}
	for range 100 {
		c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port)})
		err := c.Ping(ctx).Err()
		c.Close()
		if err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.stop()
	return errors.New("private redis-server did not answer")
}

// stop kills redis-server, waits for it, and removes its directory.
func (s *redisServer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	s.cmd = nil
	if s.dir != "" {
		os.RemoveAll(s.dir)
		s.dir = ""
	}
}

// restartRedis kills Redis and starts it again, empty.
func (r *run) restartRedis(ctx context.Context) error {
	r.say("killing Redis; it comes back empty in 2s")
	r.netMu.Lock() // no duplicate-id check across the restart: the restart wipes every lease
	defer r.netMu.Unlock()
	r.mu.Lock()
	r.redisDown[0] = time.Now()
	r.mu.Unlock()
	r.redis.stop()
	r.fault("redis restarted empty")
	time.Sleep(2 * time.Second)
	if err := r.redis.start(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	r.redisDown[1] = time.Now()
	r.mu.Unlock()
	return nil
}

// addRecords creates the records: a quarter recurring every 4 to 9 seconds,
// the rest one-off; list, exponential and wait_next policies.
func (r *run) addRecords(ctx context.Context) error {
	for i := range r.cfg.Records {
		p := refresh.DefaultPolicy()
		p.Timeout = refresh.Duration(recordTimeout)
		switch i % 3 {
		case 0:
			p.SetStrategy(refresh.ListStrategy(0, refresh.Duration(time.Second), refresh.Duration(2*time.Second)))
		case 1:
			st, _ := refresh.ParseStrategy("exponential initial=500ms max=2s max_attempts=4")
			p.SetStrategy(st)
		case 2:
			p.SetStrategy(refresh.ListStrategy(refresh.Duration(time.Second), refresh.Duration(time.Second)))
			p.OnExhausted = refresh.WaitNext
		}
		sched := ""
		if i%4 == 0 || p.OnExhausted == refresh.WaitNext {
			sched = fmt.Sprintf("DTSTART:20240101T000000Z\nRRULE:FREQ=SECONDLY;INTERVAL=%d", 4+i%6)
		}
		def := store.Definition{InputURL: fmt.Sprintf("http://chaos.invalid/%d", i), Schedule: sched, Policy: p.JSON()}
		at := time.Now().Add(time.Duration(r.float()*5000) * time.Millisecond)
		if _, err := r.st.Add(ctx, fmt.Sprintf("c%05d", i), def, &at); err != nil {
			return err
		}
	}
	return nil
}
