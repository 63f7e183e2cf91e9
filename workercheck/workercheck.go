// Package workercheck checks that a worker, in any language, keeps the
// protocol: it starts the worker against a private pair of queues, feeds it
// jobs for a local HTTP server that answers 200, 404, 500, slowly and never,
// and reports, case by case, whether the worker echoed the right ids, sent
// well-formed results of the right type, stopped at the deadline, and exited
// cleanly on SIGTERM.
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

	// Collect results until every case has ended or its deadline + grace.
	type got struct {
		res protocol.Result
		at  time.Time
	}
	final := map[string]got{}
	var rep Report
	add := func(c, what string, ok bool, detail string) {
		rep.Checks = append(rep.Checks, Check{Case: c, What: what, OK: ok, Detail: detail})
	}
	wellFormed, echoed := true, true
	lastDeadline := time.Now().Add(15*time.Second + cfg.Grace)
	for time.Now().Before(lastDeadline) && len(final) < len(cases) {
		v, err := cfg.Redis.BLPop(ctx, time.Second, names.Output).Result()
		if err == redis.Nil {
			if ended(exited) {
				break
			}
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("worker-check: read results: %w", err)
		}
		at := time.Now()
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
	if wellFormed {
		add("all", "results are well-formed", true, "")
	}
	if echoed {
		add("all", "results echo big_table_uid and refresh_attempt_uid", true, "")
	}
	for _, s := range order {
		tc := s.tc
		g, ok := final[s.job.AttemptUID]
		r := g.res
		switch tc.want {
		case "success":
			add(tc.name, "reports success", ok && r.Type == protocol.Success, describe(ok, r))
		case "retryable":
			add(tc.name, "reports a retryable failure", ok && r.Type == protocol.Failure && !r.NotRetryable(), describe(ok, r))
		case "not_retryable":
			add(tc.name, "reports a failure with retryable false and a reason",
				ok && r.NotRetryable() && r.UserFriendlyReason != "", describe(ok, r))
		case "stop":
			switch {
			case !ok:
				add(tc.name, "stops at the deadline", true, "no result: the attempt will time out")
			case r.Type == protocol.Success:
				add(tc.name, "stops at the deadline", false, "reported success for a server that never answered")
			case g.at.After(s.job.DeadlineAt.Add(cfg.Grace)):
				add(tc.name, "stops at the deadline", false, fmt.Sprintf("answered %v after the deadline", g.at.Sub(s.job.DeadlineAt).Round(time.Millisecond)))
			default:
				add(tc.name, "stops at the deadline", true, fmt.Sprintf("failure %v after the deadline: %s", g.at.Sub(s.job.DeadlineAt).Round(time.Millisecond), r.Message))
			}
		}
	}

	// SIGTERM: the worker must exit, cleanly, within the grace period.
	if ended(exited) {
		add("shutdown", "exits 0 on SIGTERM", false, "the worker exited before SIGTERM")
	} else {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			add("shutdown", "exits 0 on SIGTERM", err == nil, errText(err))
		case <-time.After(cfg.Grace + 5*time.Second):
			add("shutdown", "exits 0 on SIGTERM", false, "still running after SIGTERM")
		}
	}
	rep.Output = out.String()
	return rep, nil
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

func describe(ok bool, r protocol.Result) string {
	if !ok {
		return "no result"
	}
	b, _ := json.Marshal(r)
	return string(b)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
