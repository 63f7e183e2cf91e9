// Package workercheck checks that a worker, in any language, keeps the
// protocol: it starts the worker against a private pair of queues, feeds it
// jobs for a local HTTP server that answers 200, 404, 500, slowly and never,
// and reports, case by case, whether the worker echoed the right ids, sent
// well-formed results of the right type, stopped at the deadline, and exited
// cleanly on SIGTERM. A check passes only on evidence: a worker that exits
// before taking a job, or takes none within Config.StartTimeout, fails every
// check, and so does one that dies with jobs in hand.
package workercheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/redis/go-redis/v9"
)

// Config says how to run the worker.
type Config struct {
	// Command is the worker's command line.
	Command []string
	// RedisURL and Redis: where the private queues live.
	RedisURL string
	Redis    redis.UniversalClient
	// Grace is how late a result for the case that never answers may come
	// after the deadline, and how long the worker may take to exit after
	// SIGTERM (default 3s).
	Grace time.Duration
	// StartTimeout is how long the worker may take to pop its first job
	// (default 10s). A worker that takes none in that time fails every
	// check: it is not reading the queue it was given.
	StartTimeout time.Duration
}

// Check is one verdict.
type Check struct {
	Case   string `json:"case"`
	What   string `json:"check"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Report is the outcome of a run.
type Report struct {
	Checks []Check `json:"checks"`
	// Output is what the worker printed.
	Output string `json:"-"`
}

// Passed reports whether every check passed.
func (r Report) Passed() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return len(r.Checks) > 0
}

type testCase struct {
	name, path string
	deadline   time.Duration
	want       string // "success", "retryable", "not_retryable", "stop"
}

var cases = []testCase{
	{"ok (200)", "/ok", 15 * time.Second, "success"},
	{"not found (404)", "/missing", 15 * time.Second, "not_retryable"},
	{"server error (500)", "/broken", 15 * time.Second, "retryable"},
	{"slow (200 after 2s)", "/slow", 15 * time.Second, "success"},
	{"never answers (deadline 3s)", "/never", 3 * time.Second, "stop"},
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Run checks the worker and returns the report; err is for failures of the
// check itself (Redis unreachable, the command not found).
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Grace <= 0 {
		cfg.Grace = 3 * time.Second
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 10 * time.Second
	}
	if len(cfg.Command) == 0 {
		return Report{}, fmt.Errorf("worker-check: no worker command given (bigtables worker-check -- CMD ARGS...)")
	}
	prefix := fmt.Sprintf("{bigtables-check-%d}:", time.Now().UnixNano()) // one hash tag: one slot in Redis Cluster
	names := queue.Names{Input: prefix + "input", Output: prefix + "output", Dead: prefix + "dead"}
	q := queue.New(cfg.Redis, names)
	defer cfg.Redis.Del(context.WithoutCancel(ctx), names.Input, names.Output, names.Dead)

	// The local HTTP server the jobs point at.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Report{}, fmt.Errorf("worker-check: listen: %w", err)
	}
	stopServer := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.Write([]byte("id,value\n1,42\n"))
		case "/broken":
			http.Error(w, "upstream exploded", http.StatusInternalServerError)
		case "/slow":
			select {
			case <-time.After(2 * time.Second):
				w.Write([]byte("late but fine\n"))
			case <-r.Context().Done():
			}
		case "/never":
			select {
			case <-r.Context().Done():
			case <-stopServer:
			}
		default:
			http.NotFound(w, r)
		}
	})}
	go srv.Serve(ln)
	defer func() { close(stopServer); srv.Close() }()
	base := "http://" + ln.Addr().String()

	// Start the worker.
	var out lockedBuffer
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Env = append(os.Environ(), "REDIS_URL="+cfg.RedisURL, "BIGTABLES_INPUT_QUEUE="+names.Input,
		"BIGTABLES_OUTPUT_QUEUE="+names.Output, "BIGTABLES_DEAD_QUEUE="+names.Dead)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return Report{}, fmt.Errorf("worker-check: start %q: %w", cfg.Command[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}()

	// Feed the jobs; the ok job carries a field workers must ignore.
	type sent struct {
		tc  testCase
		job protocol.Job
	}
	jobs := map[string]sent{} // by attempt uid
	order := make([]sent, 0, len(cases))
	var raw [][]byte
	for i, tc := range cases {
		j := protocol.Job{BigTableUID: fmt.Sprintf("check-%d", i+1), AttemptUID: refresh.NewAttemptUID(),
			InputURL: base + tc.path, AttemptNo: 1, DeadlineAt: time.Now().Add(tc.deadline)}
		b := j.Encode()
		if i == 0 {
			b = append(b[:len(b)-1], []byte(`,"a_future_field":{"ignore":"me"}}`)...)
		}
		jobs[j.AttemptUID] = sent{tc, j}
		order = append(order, sent{tc, j})
		raw = append(raw, b)
	}
	if err := q.PushJobs(ctx, raw); err != nil {
		return Report{}, fmt.Errorf("worker-check: %w", err)
	}

	// Collect results until every case has ended or its deadline + grace,
	// the worker has exited, or it has taken no job in StartTimeout.
	type got struct {
		res protocol.Result
		at  time.Time
	}
	final := map[string]got{}
	var rep Report
	add := func(c, what string, ok bool, detail string) {
		rep.Checks = append(rep.Checks, Check{Case: c, What: what, OK: ok, Detail: detail})
	}
	results, wellFormed, echoed := 0, true, true
	started := time.Now()
	lastDeadline := started.Add(15*time.Second + cfg.Grace)
	waiting := len(cases) // jobs still in the input list at the last look
	for time.Now().Before(lastDeadline) && len(final) < len(cases) {
		v, err := cfg.Redis.BLPop(ctx, time.Second, names.Output).Result()
		if err == redis.Nil {
			if ended(exited) {
				break
			}
			if n, err := cfg.Redis.LLen(ctx, names.Input).Result(); err == nil {
				waiting = int(n)
			}
			if waiting == len(cases) && time.Since(started) >= cfg.StartTimeout {
				break
			}
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("worker-check: read results: %w", err)
		}
		at := time.Now()
		results++
		r, derr := protocol.DecodeResult([]byte(v[1]), 0)
		if derr != nil {
			wellFormed = false
			add("all", "results are well-formed", false, fmt.Sprintf("%v: %s", derr, protocol.Clip(v[1], 200)))
			continue
		}
		s, ok := jobs[r.AttemptUID]
		if !ok || s.job.BigTableUID != r.BigTableUID {
			echoed = false
			add("all", "results echo big_table_uid and refresh_attempt_uid", false,
				fmt.Sprintf("result for %q / %q matches no job", r.BigTableUID, r.AttemptUID))
			continue
		}
		if r.Type == protocol.Status {
			continue
		}
		if _, dup := final[r.AttemptUID]; dup {
			add(s.tc.name, "one final result per job", false, "a second "+string(r.Type))
			continue
		}
		final[r.AttemptUID] = got{r, at}
	}

	exitedEarly := ended(exited)

	// Which jobs the worker never took: they are still in the input list.
	left, err := cfg.Redis.LRange(context.WithoutCancel(ctx), names.Input, 0, -1).Result()
	if err != nil {
		return rep, fmt.Errorf("worker-check: read the input list: %w", err)
	}
	untaken := map[string]bool{}
	for _, raw := range left {
		if j, err := protocol.DecodeJob([]byte(raw)); err == nil {
			untaken[j.AttemptUID] = true
		}
	}

	// A worker that took no job has shown nothing: every check fails, with
	// the reason.
	if len(untaken) == len(cases) {
		reason := fmt.Sprintf("the worker took no job from %s in %v: does it read REDIS_URL and BIGTABLES_INPUT_QUEUE?",
			names.Input, time.Since(started).Round(time.Second))
		if exitedEarly {
			reason = "the worker exited before taking a job (" + exitText(exitErr(exited)) + "): see its output"
		}
		for _, c := range allChecks() {
			add(c.Case, c.What, false, reason)
		}
		rep.Output = out.String()
		return rep, nil
	}

	if results == 0 {
		wellFormed, echoed = false, false
		add("all", "results are well-formed", false, "no result received")
		add("all", "results echo big_table_uid and refresh_attempt_uid", false, "no result received")
	}
	if wellFormed {
		add("all", "results are well-formed", true, "")
	}
	if echoed {
		add("all", "results echo big_table_uid and refresh_attempt_uid", true, "")
	}
	for _, s := range order {
		tc := s.tc
		if untaken[s.job.AttemptUID] {
			add(tc.name, tc.check(), false, "the worker never took this job from "+names.Input)
			continue
		}
		g, ok := final[s.job.AttemptUID]
		r := g.res
		switch tc.want {
		case "success":
			add(tc.name, tc.check(), ok && r.Type == protocol.Success, describe(ok, r))
		case "retryable":
			add(tc.name, tc.check(), ok && r.Type == protocol.Failure && !r.NotRetryable(), describe(ok, r))
		case "not_retryable":
			add(tc.name, tc.check(), ok && r.NotRetryable() && r.UserFriendlyReason != "", describe(ok, r))
		case "stop":
			switch {
			case !ok && exitedEarly:
				add(tc.name, tc.check(), false, "no result: the worker exited ("+exitText(exitErr(exited))+")")
			case !ok:
				add(tc.name, tc.check(), true, "took the job, no result: the attempt will time out")
			case r.Type == protocol.Success:
				add(tc.name, tc.check(), false, "reported success for a server that never answered")
			case g.at.After(s.job.DeadlineAt.Add(cfg.Grace)):
				add(tc.name, tc.check(), false, fmt.Sprintf("answered %v after the deadline", g.at.Sub(s.job.DeadlineAt).Round(time.Millisecond)))
			default:
				add(tc.name, tc.check(), true, fmt.Sprintf("failure %v after the deadline: %s", g.at.Sub(s.job.DeadlineAt).Round(time.Millisecond), r.Message))
			}
		}
	}

	// SIGTERM: the worker must exit, cleanly, within the grace period.
	if ended(exited) {
		add("shutdown", shutdownCheck, false, "the worker exited before SIGTERM ("+exitText(exitErr(exited))+")")
	} else {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			add("shutdown", shutdownCheck, err == nil, errText(err))
		case <-time.After(cfg.Grace + 5*time.Second):
			add("shutdown", shutdownCheck, false, "still running after SIGTERM")
		}
	}
	rep.Output = out.String()
	return rep, nil
}

const shutdownCheck = "exits 0 on SIGTERM"

// check names what the case checks.
func (tc testCase) check() string {
	switch tc.want {
	case "success":
		return "reports success"
	case "retryable":
		return "reports a retryable failure"
	case "not_retryable":
		return "reports a failure with retryable false and a reason"
	default:
		return "stops at the deadline"
	}
}

// allChecks lists every check a run makes, in report order.
func allChecks() []Check {
	all := []Check{
		{Case: "all", What: "results are well-formed"},
		{Case: "all", What: "results echo big_table_uid and refresh_attempt_uid"},
	}
	for _, tc := range cases {
		all = append(all, Check{Case: tc.name, What: tc.check()})
	}
	return append(all, Check{Case: "shutdown", What: shutdownCheck})
}

func ended(exited chan error) bool {
	select {
	case err := <-exited:
		exited <- err
		return true
	default:
		return false
	}
}

// exitErr returns the error of a worker that has exited, leaving it in the
// channel for the next look.
func exitErr(exited chan error) error {
	err := <-exited
	exited <- err
	return err
}

func describe(ok bool, r protocol.Result) string {
	if !ok {
		return "no result"
	}
	b, _ := json.Marshal(r)
	return string(b)
}

// exitText says how the worker exited, given cmd.Wait's error.
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
