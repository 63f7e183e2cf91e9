package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
)

// FailoverConfig sizes a failover run. Zero values take the defaults.
type FailoverConfig struct {
	AdminURL string        // PostgreSQL URL allowed to create databases
	Script   string        // scripts/redis-sentinel.sh (default: found from the working directory)
	Port     int           // first of the Sentinel setup's 5 ports (default 7111)
	Records  int           // recurring records (default 1000)
	Every    time.Duration // their period (default 2s): Records/Every refreshes a second
	Timeout  time.Duration // attempt timeout (default 5s): when a lost job or result is noticed
	Warmup   time.Duration // load before the first kill (default 8s)
	Observe  time.Duration // load after each kill before the next step (default 8s)
	Kills    int           // masters killed, one after another (default 2)
	// Lag, when positive, cuts the replica off (its link dropped, the
	// replication commands denied) this long before each kill: the master
	// acknowledges writes the replica never receives, as when a network
	// partition or a replica lagging behind meets a crash.
	Lag        time.Duration
	Schedulers int           // default 2
	Pollers    int           // default 2
	Workers    int           // worker goroutines (default 16)
	Work       time.Duration // each job's work (default 20ms): results arrive spread out, as from real refreshes
	Progress   io.Writer
}

func (c *FailoverConfig) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Port, 7111)
	def(&c.Records, 1000)
	def(&c.Kills, 2)
	def(&c.Schedulers, 2)
	def(&c.Pollers, 2)
	def(&c.Workers, 16)
	defDur(&c.Every, 2*time.Second)
	defDur(&c.Timeout, 5*time.Second)
	defDur(&c.Warmup, 8*time.Second)
	defDur(&c.Observe, 8*time.Second)
	defDur(&c.Work, 20*time.Millisecond)
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// FailoverReport is what a failover run measured and checked.
type FailoverReport struct {
	Records     int     `json:"records"`
	OfferedRate float64 `json:"offered_per_second"`
	Kills       []Kill  `json:"kills"`
	// Applied counts successful attempts; Stale results the pollers
	// discarded (an attempt answered twice, or already ended).
	Applied int   `json:"applied"`
	Stale   int64 `json:"stale"`
	// What the failovers lost. Every loss ends its attempt by timeout.
	JobsLost     int `json:"jobs_lost"`     // pushed before a kill (acknowledged by the dying master), never popped
	ResultsLost  int `json:"results_lost"`  // pushed before a kill (acknowledged by the dying master), never applied
	Late         int `json:"late"`          // the outage delayed the result past the deadline (pushed after the kill, or not at all)
	PoppedTwice  int `json:"popped_twice"`  // a pop the dying master had not replicated: the job was served again
	OtherTimeout int `json:"other_timeout"` // timeouts with none of these causes (a defect)
	// ReDriven counts the records whose lost attempt was followed by a
	// successful one (retries re-drive them); Unrecovered lists those
	// that were not, by the end of the run.
	ReDriven    int         `json:"re_driven"`
	Unrecovered []string    `json:"unrecovered,omitempty"`
	Invariants  []Invariant `json:"invariants"`
}

// Kill is one master killed and how the system followed.
type Kill struct {
	Master     string        `json:"master"`
	Promoted   string        `json:"promoted"`
	Failover   time.Duration `json:"failover"`    // SIGKILL to the Sentinels naming the new master
	FirstPush  time.Duration `json:"first_push"`  // SIGKILL to the first result a worker pushed
	Resumed    time.Duration `json:"resumed"`     // SIGKILL to the first attempt started after it being applied
	RateBefore float64       `json:"rate_before"` // successes a second in the 5s before the kill
	RateAfter  float64       `json:"rate_after"`  // successes a second in the 5s after Resumed
}

// Violations counts violations across invariants.
func (r FailoverReport) Violations() int {
	n := 0
	for _, inv := range r.Invariants {
		n += len(inv.Violations)
	}
	return n
}

type failoverRun struct {
	cfg       FailoverConfig
	url       string
	sentinels []string
	q         *queue.Queue
	st        *store.Store
	db        *sqlx.DB

	mu     sync.Mutex
	popped map[string]int       // attempt uid -> pops
	pushed map[string]time.Time // attempt uid -> result acknowledged at
	failed map[string]bool      // attempt uid -> could not push before the deadline
	kills  []time.Time
}

func (r *failoverRun) say(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, "failover: "+format+"\n", args...)
}

// RunFailover is the failover fault run: against a master, a replica and
// three Sentinels that scripts/redis-sentinel.sh starts, schedulers,
// pollers and workers (in this process, each with its own client) keep
// recurring records refreshing while the master is killed with SIGKILL,
// Kills times, the killed server coming back as a replica in between. It
// measures how long the system takes to follow each failover and what the
// failovers lost, and checks that every loss was re-driven.
func RunFailover(ctx context.Context, cfg FailoverConfig) (FailoverReport, error) {
	cfg.defaults()
	r := &failoverRun{cfg: cfg, popped: map[string]int{}, pushed: map[string]time.Time{}, failed: map[string]bool{}}
	rep := FailoverReport{Records: cfg.Records, OfferedRate: float64(cfg.Records) / cfg.Every.Seconds()}
	if r.cfg.Script == "" {
		r.cfg.Script = findScript("redis-sentinel.sh")
	}
	var err error
	if r.url, err = r.script("start"); err != nil {
		return rep, err
	}
	defer r.script("stop")
	u, err := url.Parse(r.url)
	if err != nil {
		return rep, fmt.Errorf("the script's URL: %w", err)
	}
	r.sentinels = strings.Split(u.Host, ",")

	dbURL, drop, err := store.ScratchDatabase(ctx, cfg.AdminURL, "bigtables_failover")
	if err != nil {
		return rep, err
	}
	defer drop()
	if r.st, err = store.Open(ctx, dbURL); err != nil {
		return rep, err
	}
	defer r.st.Close()
	if _, err := r.st.Migrate(ctx); err != nil {
		return rep, err
	}
	msg, err := breakerOff(ctx, r.st, "failover.invalid")
	if err != nil {
		return rep, err
	}
	r.say("%s", msg)
	if r.db, err = sqlx.Open("postgres", dbURL); err != nil {
		return rep, err
	}
	defer r.db.Close()
	if err := r.addRecords(ctx); err != nil {
		return rep, err
	}

	// The load: every component has its own client, as separate processes do.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var schedWG, pollWG, workWG sync.WaitGroup
	schedCtx, stopSched := context.WithCancel(loadCtx)
	defer stopSched()
	var pollers []*poller.Poller
	for range cfg.Schedulers {
		q, closeQ, err := r.connect(ctx)
		if err != nil {
			return rep, err
		}
		defer closeQ()
		s := scheduler.New(r.st, q, scheduler.Config{Interval: 200 * time.Millisecond, Batch: 500, Logger: quiet})
		schedWG.Go(func() { s.Run(schedCtx) })
	}
	for range cfg.Pollers {
		q, closeQ, err := r.connect(ctx)
		if err != nil {
			return rep, err
		}
		defer closeQ()
		p := poller.New(r.st, q, poller.Config{Batch: 500, Logger: quiet})
		pollers = append(pollers, p)
		pollWG.Go(func() { p.Run(loadCtx) })
	}
	q, closeQ, err := r.connect(ctx) // the workers'
	if err != nil {
		return rep, err
	}
	defer closeQ()
	r.q = q
	workCtx, stopWork := context.WithCancel(loadCtx)
	defer stopWork()
	for range cfg.Workers {
		workWG.Go(func() { r.worker(workCtx) })
	}
	r.say("%d records every %v (%.0f refreshes/s offered), timeout %v, %d schedulers, %d pollers, %d workers",
		cfg.Records, cfg.Every, rep.OfferedRate, cfg.Timeout, cfg.Schedulers, cfg.Pollers, cfg.Workers)
	sleepCtx(ctx, cfg.Warmup)

	for i := range cfg.Kills {
		if i > 0 {
			r.say("restarting the killed server; the Sentinels make it a replica")
			if _, err := r.script("start"); err != nil {
				return rep, err
			}
			sleepCtx(ctx, 2*time.Second)
		}
		k, err := r.killMaster(ctx)
		if err != nil {
			return rep, err
		}
		r.say("kill %d: SIGKILL to master %s; Sentinels promoted %s after %v", i+1, k.Master, k.Promoted, k.Failover.Round(time.Millisecond))
		rep.Kills = append(rep.Kills, k)
		sleepCtx(ctx, cfg.Observe)
	}

	// Settle: the attempts the last failover lost time out and are
	// retried; wait until each record that lost one has succeeded since.
	r.say("settling: lost attempts time out after %v and are retried", cfg.Timeout)
	last := r.kills[len(r.kills)-1]
	deadline := last.Add(3*cfg.Timeout + 20*time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var waiting int
		err := r.db.GetContext(ctx, &waiting, `SELECT count(*) FROM bigtable_attempts t WHERE outcome = 'timeout'
			AND NOT EXISTS (SELECT FROM bigtable_attempts s WHERE s.uid = t.uid AND s.outcome = 'success' AND s.finished_at > t.finished_at)`)
		if err == nil && waiting == 0 && time.Since(last) > cfg.Timeout+2*time.Second {
			break
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	stopSched()
	schedWG.Wait()
	sleepCtx(ctx, time.Second) // the last jobs are answered
	stopWork()
	workWG.Wait()
	stopLoad()
	pollWG.Wait()
	for _, p := range pollers {
		rep.Stale += p.Stats().Stale
	}
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	return r.analyse(ctx, rep)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// findScript returns scripts/name from the working directory or one above.
func findScript(name string) string {
	dir, _ := os.Getwd()
	for range 5 {
		p := dir + "/scripts/" + name
		if _, err := os.Stat(p); err == nil {
			return p
		}
		dir += "/.."
	}
	return "scripts/" + name
}

// script runs the Sentinel script and returns the URL it prints.
func (r *failoverRun) script(action string) (string, error) {
	cmd := exec.Command(r.cfg.Script, action, strconv.Itoa(r.cfg.Port))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s %d: %w: %s", r.cfg.Script, action, r.cfg.Port, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

func (r *failoverRun) connect(ctx context.Context) (*queue.Queue, func(), error) {
	rdb, err := queue.Connect(ctx, r.url)
	if err != nil {
		return nil, nil, err
	}
	return queue.New(rdb, queue.DefaultNames()), func() { rdb.Close() }, nil
}

// addRecords creates records recurring every cfg.Every, spread over the
// period, retried twice after half a second, waiting for the next
// occurrence when exhausted (so none is disabled).
func (r *failoverRun) addRecords(ctx context.Context) error {
	p := refresh.DefaultPolicy()
	p.Timeout = refresh.Duration(r.cfg.Timeout)
	p.SetStrategy(refresh.ListStrategy(refresh.Duration(500*time.Millisecond), refresh.Duration(500*time.Millisecond)))
	p.OnExhausted = refresh.WaitNext
	period := max(int(r.cfg.Every/time.Second), 1)
	base := time.Now().UTC().Truncate(time.Second)
	for i := range r.cfg.Records {
		start := base.Add(time.Duration(i%period) * time.Second)
		sched := fmt.Sprintf("DTSTART:%s\nRRULE:FREQ=SECONDLY;INTERVAL=%d", start.Format("20060102T150405Z"), period)
		def := store.Definition{InputURL: fmt.Sprintf("http://failover.invalid/%d", i), Schedule: sched, Policy: p.JSON()}
		at := time.Now().Add(time.Duration(rand.Float64() * float64(r.cfg.Every)))
		if _, err := r.st.Add(ctx, fmt.Sprintf("f%05d", i), def, &at); err != nil {
			return fmt.Errorf("add record %d: %w", i, err)
		}
	}
	return nil
}

// worker pops jobs one at a time and answers success after cfg.Work,
// pushing until the push is acknowledged or the attempt's deadline passes,
// and records both.
func (r *failoverRun) worker(ctx context.Context) {
	for ctx.Err() == nil {
		jobs, err := r.q.PopJobs(ctx, time.Second, 1)
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		for _, raw := range jobs {
			job, err := protocol.DecodeJob([]byte(raw))
			if err != nil {
				continue
			}
			r.mu.Lock()
			r.popped[job.AttemptUID]++
			r.mu.Unlock()
			sleepCtx(ctx, r.cfg.Work)
			res := protocol.Result{BigTableUID: job.BigTableUID, AttemptUID: job.AttemptUID, Type: protocol.Success}
			for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
				err := r.q.PushResult(ctx, res.Encode())
				if err == nil {
					r.mu.Lock()
					r.pushed[job.AttemptUID] = time.Now()
					r.mu.Unlock()
					break
				}
				if time.Now().After(job.DeadlineAt) || ctx.Err() != nil {
					r.mu.Lock()
					r.failed[job.AttemptUID] = true
					r.mu.Unlock()
					break
				}
				sleepCtx(ctx, wait)
			}
		}
	}
}

// killMaster sends SIGKILL to the current master (after checking that the
// process is a redis-server on one of the run's ports) and waits until the
// Sentinels name another.
func (r *failoverRun) killMaster(ctx context.Context) (Kill, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: r.sentinels[0], DialTimeout: time.Second})
	defer sc.Close()
	addr, err := sc.GetMasterAddrByName(ctx, "bigtables").Result()
	if err != nil {
		return Kill{}, fmt.Errorf("ask the Sentinels for the master: %w", err)
	}
	master := addr[0] + ":" + addr[1]
	if port, _ := strconv.Atoi(addr[1]); addr[0] != "127.0.0.1" || port < r.cfg.Port || port > r.cfg.Port+1 {
		return Kill{}, fmt.Errorf("the master %s is not one of the run's servers", master)
	}
	mc := redis.NewClient(&redis.Options{Addr: master})
	info, err := mc.Info(ctx, "server").Result()
	mc.Close()
	if err != nil {
		return Kill{}, fmt.Errorf("ask the master its process id: %w", err)
	}
	var pid int
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if pid == 0 || !bytes.Contains(cmdline, []byte("redis-server")) || !bytes.Contains(cmdline, []byte(master)) {
		return Kill{}, fmt.Errorf("process %d is not the redis-server of %s", pid, master)
	}
	if r.cfg.Lag > 0 {
		// Deny the replication commands, so that the replica cannot
		// reconnect, then drop its link.
		mc := redis.NewClient(&redis.Options{Addr: master})
		err := mc.Do(ctx, "ACL", "SETUSER", "default", "-psync", "-sync").Err()
		if err == nil {
			err = mc.ClientKillByFilter(ctx, "TYPE", "replica").Err()
		}
		mc.Close()
		if err != nil {
			return Kill{}, fmt.Errorf("cut the replica's link: %w", err)
		}
		sleepCtx(ctx, r.cfg.Lag)
	}
	at := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return Kill{}, fmt.Errorf("kill the master: %w", err)
	}
	r.mu.Lock()
	r.kills = append(r.kills, at)
	r.mu.Unlock()
	for time.Since(at) < time.Minute {
		addr, err := sc.GetMasterAddrByName(ctx, "bigtables").Result()
		if err == nil && addr[0]+":"+addr[1] != master {
			return Kill{Master: master, Promoted: addr[0] + ":" + addr[1], Failover: time.Since(at)}, nil
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	return Kill{}, errors.New("the Sentinels promoted no replica within a minute")
}

type historyRow struct {
	AttemptUID string    `db:"attempt_uid"`
	UID        string    `db:"uid"`
	StartedAt  time.Time `db:"started_at"`
	FinishedAt time.Time `db:"finished_at"`
	Outcome    string    `db:"outcome"`
}

// analyse reads the history and sorts every timeout by its cause.
func (r *failoverRun) analyse(ctx context.Context, rep FailoverReport) (FailoverReport, error) {
	var hist []historyRow
	if err := r.db.SelectContext(ctx, &hist, `SELECT attempt_uid, uid, started_at, finished_at, outcome
		FROM bigtable_attempts ORDER BY finished_at`); err != nil {
		return rep, fmt.Errorf("read history: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.popped {
		if n > 1 {
			rep.PoppedTwice++
		}
	}
	for i := range rep.Kills {
		kill := r.kills[i]
		k := &rep.Kills[i]
		for _, at := range r.pushed {
			if d := at.Sub(kill); d > 0 && (k.FirstPush == 0 || d < k.FirstPush) {
				k.FirstPush = d
			}
		}
		n := 0
		for _, h := range hist {
			if h.Outcome == "success" && h.FinishedAt.Before(kill) && h.FinishedAt.After(kill.Add(-5*time.Second)) {
				n++
			}
		}
		k.RateBefore = float64(n) / 5
		var resumed time.Time
		for _, h := range hist {
			if h.Outcome == "success" && h.StartedAt.After(kill) {
				resumed = h.FinishedAt
				k.Resumed = h.FinishedAt.Sub(kill)
				break
			}
		}
		if !resumed.IsZero() {
			n := 0
			for _, h := range hist {
				if h.Outcome == "success" && !h.FinishedAt.Before(resumed) && h.FinishedAt.Before(resumed.Add(5*time.Second)) {
					n++
				}
			}
			k.RateAfter = float64(n) / 5
		}
	}

	explained := &Invariant{Name: "every attempt that timed out was in flight during a failover, and lost its job or result to it or was delayed past its deadline"}
	redriven := &Invariant{Name: "every record that lost an attempt had a later attempt succeed (re-driven by retries)"}
	lastSuccess := map[string]time.Time{}
	for _, h := range hist {
		if h.Outcome == "success" {
			rep.Applied++
			lastSuccess[h.UID] = h.FinishedAt
		}
	}
	lostBy := map[string]time.Time{}
	for _, h := range hist {
		if h.Outcome != "timeout" {
			continue
		}
		explained.Checked++
		// The outage this attempt was in flight during, if any: from the
		// kill until the system resumed, plus the pollers' longest backoff.
		var kill time.Time
		for i, k := range r.kills {
			end := k.Add(max(rep.Kills[i].Resumed, rep.Kills[i].Failover) + 2*time.Second)
			if h.StartedAt.Before(end) && h.StartedAt.Add(r.cfg.Timeout).After(k) {
				kill = k
			}
		}
		pushedAt, acked := r.pushed[h.AttemptUID]
		switch {
		case kill.IsZero():
			rep.OtherTimeout++
			explained.Violations = append(explained.Violations, fmt.Sprintf("%s: attempt %s started %s timed out, not in flight during any failover",
				h.UID, h.AttemptUID, h.StartedAt.Format(time.RFC3339Nano)))
		case r.popped[h.AttemptUID] == 0 && h.StartedAt.Before(kill):
			rep.JobsLost++
		case r.popped[h.AttemptUID] == 0:
			rep.OtherTimeout++
			explained.Violations = append(explained.Violations, fmt.Sprintf("%s: attempt %s started after the kill, its job never popped", h.UID, h.AttemptUID))
		case acked && pushedAt.Before(kill):
			rep.ResultsLost++
		case acked || r.failed[h.AttemptUID]:
			rep.Late++
		default:
			rep.OtherTimeout++
			explained.Violations = append(explained.Violations, fmt.Sprintf("%s: attempt %s timed out, its job popped but its result neither pushed nor given up", h.UID, h.AttemptUID))
		}
		if h.FinishedAt.After(lostBy[h.UID]) {
			lostBy[h.UID] = h.FinishedAt
		}
	}
	for uid, at := range lostBy {
		redriven.Checked++
		if lastSuccess[uid].After(at) {
			rep.ReDriven++
		} else {
			rep.Unrecovered = append(rep.Unrecovered, uid)
			redriven.Violations = append(redriven.Violations, uid+": no success after its lost attempt")
		}
	}
	rep.Invariants = []Invariant{*explained, *redriven}
	return rep, nil
}
