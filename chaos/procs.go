package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/redis/go-redis/v9"
)

// proc is a scheduler or poller process, restarted after each kill.
type proc struct {
	name, role string
	args       []string
	cmd        *exec.Cmd
	done       chan struct{}
}

func (r *run) env() []string {
	return append(os.Environ(), "DATABASE_URL="+r.dbURL, "REDIS_URL="+r.redisURL, "BIGTABLES_LOG_LEVEL=warn")
}

func (r *run) startProc(ctx context.Context, name, role string, args ...string) {
	p := &proc{name: name, role: role, args: append([]string{role}, args...)}
	r.procsMu.Lock()
	r.procs = append(r.procs, p)
	r.procsMu.Unlock()
	r.launch(p)
}

func (r *run) launch(p *proc) {
	cmd := exec.Command(r.cfg.Binary, p.args...)
	cmd.Env = r.env()
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		r.say("start %s: %v", p.name, err)
		return
	}
	p.cmd, p.done = cmd, make(chan struct{})
	done := p.done
	go func() { cmd.Wait(); close(done) }()
}

func (p *proc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// killer sends SIGKILL to a random scheduler or poller every 0.5 to 2.5
// seconds and starts it again 0 to 1 second later.
func (r *run) killer(ctx context.Context) {
	for {
		select {
		case <-r.stopKiller:
			return
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(500+r.float()*2000) * time.Millisecond):
		}
		r.procsMu.Lock()
		p := r.procs[int(r.float()*float64(len(r.procs)))]
		r.procsMu.Unlock()
		if !p.running() {
			continue
		}
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		r.fault("kill -9 " + p.role)
		time.Sleep(time.Duration(r.float()*1000) * time.Millisecond)
		r.launch(p)
	}
}

// ensureAll restarts any process that is not running.
func (r *run) ensureAll(ctx context.Context) {
	r.procsMu.Lock()
	defer r.procsMu.Unlock()
	for _, p := range r.procs {
		if !p.running() {
			r.launch(p)
		}
	}
}

// stopAll sends SIGTERM to the processes of a role and waits for them.
func (r *run) stopAll(role string) {
	r.procsMu.Lock()
	defer r.procsMu.Unlock()
	for _, p := range r.procs {
		if p.role == role && p.running() {
			p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(20 * time.Second):
				r.say("%s did not stop on SIGTERM; killing it", p.name)
				p.cmd.Process.Kill()
				<-p.done
			}
		}
	}
}

func (r *run) killAll() {
	r.procsMu.Lock()
	defer r.procsMu.Unlock()
	for _, p := range r.procs {
		if p.running() {
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// worker is one misbehaving worker: it pops jobs and, while faults are on,
// answers with success, failure, a not-retryable failure, nothing, twice,
// too late, or garbage, at set rates.
func (r *run) worker(ctx context.Context) {
	for ctx.Err() == nil {
		v, err := r.rdb.BLPop(ctx, time.Second, r.names.Input).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		job, err := protocol.DecodeJob([]byte(v[1]))
		if err != nil {
			continue
		}
		r.mu.Lock()
		behave := r.behave
		r.mu.Unlock()
		d := r.float()
		kind := "success"
		if !behave {
			switch {
			case d < 0.15:
				kind = "failure"
			case d < 0.18:
				kind = "not_retryable"
			case d < 0.23:
				r.fault("worker never answers")
				continue
			case d < 0.28:
				kind = "duplicate"
			case d < 0.33:
				kind = "late"
			case d < 0.36:
				kind = "garbage"
			}
		}
		switch kind {
		case "late":
			r.fault("worker answers after the deadline")
			go func() {
				time.Sleep(time.Until(job.DeadlineAt) + 300*time.Millisecond)
				r.answer(context.WithoutCancel(ctx), job, "success")
			}()
		case "duplicate":
			r.fault("worker answers twice")
			r.answer(ctx, job, "success")
			r.answer(ctx, job, "success")
		case "garbage":
			r.fault("worker sends garbage")
			r.answer(ctx, job, "garbage")
		default:
			if kind != "success" {
				r.fault("worker fails (" + kind + ")")
			}
			r.answer(ctx, job, kind)
		}
	}
}

func (r *run) answer(ctx context.Context, job protocol.Job, kind string) {
	res := protocol.Result{BigTableUID: job.BigTableUID, AttemptUID: job.AttemptUID, Type: protocol.Success}
	switch kind {
	case "failure":
		res.Type, res.Message = protocol.Failure, "chaos failure"
	case "not_retryable":
		no := false
		res.Type, res.Retryable, res.UserFriendlyReason = protocol.Failure, &no, "Provided URL is invalid: "+job.InputURL
	}
	raw := string(res.Encode())
	if kind == "garbage" {
		raw = fmt.Sprintf(`{"big_table_uid": %q, "refresh_attempt_uid": 42, "garbage": %d}`, job.BigTableUID, time.Now().UnixNano())
	}
	if err := r.rdb.RPush(ctx, r.names.Output, raw).Err(); err != nil {
		return // Redis is down: the attempt times out
	}
	r.mu.Lock()
	r.pushed = append(r.pushed, push{attempt: job.AttemptUID, uid: job.BigTableUID, kind: kind, raw: raw, at: time.Now(), deadline: job.DeadlineAt})
	r.mu.Unlock()
}

func (r *run) progress(ctx context.Context, phase string) {
	var attempts, disabled int
	r.db.GetContext(ctx, &attempts, "SELECT count(*) FROM bigtable_attempts")
	r.db.GetContext(ctx, &disabled, "SELECT count(*) FROM bigtables WHERE disabled_until_update")
	r.mu.Lock()
	pushed, faults := len(r.pushed), 0
	for _, n := range r.faults {
		faults += n
	}
	r.mu.Unlock()
	r.say("%s: %d attempts finished, %d results pushed, %d faults, %d disabled", phase, attempts, pushed, faults, disabled)
}

// settle waits until every attempt started while faults were on has ended
// (answered, or timed out by the schedulers) and the output list is empty,
// for up to a minute.
func (r *run) settle(ctx context.Context, faultsEnded time.Time) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var old int
		r.db.GetContext(ctx, &old, "SELECT count(*) FROM bigtables WHERE attempt_uid IS NOT NULL AND started_at < $1", faultsEnded)
		out, _ := r.rdb.LLen(ctx, r.names.Output).Result()
		if old == 0 && out == 0 {
			time.Sleep(2 * time.Second) // a few more cycles without faults
			return nil
		}
		r.progress(ctx, fmt.Sprintf("settling (%d attempts from the fault phase running, %d results queued)", old, out))
		time.Sleep(2 * time.Second)
	}
	return errors.New("the system did not settle within a minute after the faults stopped")
}

// drained waits until no attempt runs and every list is empty.
func (r *run) drained(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var running int
		r.db.GetContext(ctx, &running, "SELECT count(*) FROM bigtables WHERE attempt_uid IS NOT NULL")
		in, _ := r.rdb.LLen(ctx, r.names.Input).Result()
		out, _ := r.rdb.LLen(ctx, r.names.Output).Result()
		keys, _ := r.rdb.Keys(ctx, r.names.Output+":processing:*").Result()
		if running == 0 && in == 0 && out == 0 && len(keys) == 0 {
			return nil
		}
		if time.Now().Add(time.Second).After(deadline) {
			return fmt.Errorf("still in flight 30s after the schedulers stopped: %d attempts running, %d jobs, %d results, %d processing lists",
				running, in, out, len(keys))
		}
		time.Sleep(300 * time.Millisecond)
	}
	return errors.New("still in flight after the schedulers stopped")
}
