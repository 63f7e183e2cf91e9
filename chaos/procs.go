package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/redis/go-redis/v9"
)

// proc is a scheduler or poller process, restarted after each kill. Its
// fields after args are guarded by run.procsMu.
type proc struct {
	name, role string
	args       []string
	launches   int
	id         string // a poller's --id: fresh at each launch, so a restart never waits for its old lease
	cmd        *exec.Cmd
	done       chan struct{}
	held       bool // a fault owns the process: no one else kills or starts it
}

func (r *run) env() []string {
	return append(os.Environ(), "DATABASE_URL="+r.dbURL, "REDIS_URL="+r.redisURL, "BIGTABLES_LOG_LEVEL=warn")
}

func (r *run) startProc(name, role string, args ...string) {
	p := &proc{name: name, role: role, args: append([]string{role}, args...)}
	r.procsMu.Lock()
	defer r.procsMu.Unlock()
	r.procs = append(r.procs, p)
	r.launch(p)
}

// launch starts p; the caller holds procsMu.
func (r *run) launch(p *proc) {
	p.launches++
	args := p.args
	if p.role == "poller" {
		p.id = fmt.Sprintf("chaos-%s-%d", p.name, p.launches)
		args = append(slices.Clip(args), "--id", p.id)
	}
	cmd := exec.Command(r.cfg.Binary, args...)
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

// running reports whether p runs; the caller holds procsMu.
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

// take marks a running, unheld process of the role (any role if empty) as
// held and returns it, or nil if there is none; pick chooses by index.
func (r *run) take(role string) *proc {
	r.procsMu.Lock()
	defer r.procsMu.Unlock()
	var free []*proc
	for _, p := range r.procs {
		if (role == "" || p.role == role) && !p.held && p.running() {
			free = append(free, p)
		}
	}
	if len(free) == 0 {
		return nil
	}
	p := free[r.intn(len(free))]
	p.held = true
	return p
}

// holdAll waits until no one holds a process of the role, then holds them
// all, running or not.
func (r *run) holdAll(role string) []*proc {
	for {
		r.procsMu.Lock()
		var ps []*proc
		free := true
		for _, p := range r.procs {
			if p.role == role {
				ps = append(ps, p)
				free = free && !p.held
			}
		}
		if free {
			for _, p := range ps {
				p.held = true
			}
			r.procsMu.Unlock()
			return ps
		}
		r.procsMu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
}

// release gives a held process back, starting it again if it is not running.
func (r *run) release(p *proc) {
	r.procsMu.Lock()
	defer r.procsMu.Unlock()
	if !p.running() {
		r.launch(p)
	}
	p.held = false
}

// kill sends sig to a held process and waits up to limit for it to exit,
// then kills it.
func (r *run) kill(p *proc, sig syscall.Signal, limit time.Duration) {
	r.procsMu.Lock()
	cmd, done := p.cmd, p.done
	r.procsMu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(limit):
		r.say("%s did not stop on %v; killing it", p.name, sig)
		cmd.Process.Kill()
		<-done
	}
}

// killer sends SIGKILL to a random scheduler or poller every 0.5 to 2.5
// seconds and starts it again 0 to 1 second later.
func (r *run) killer(ctx context.Context, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(500+r.float()*2000) * time.Millisecond):
		}
		p := r.take("")
		if p == nil {
			continue
		}
		r.kill(p, syscall.SIGKILL, time.Minute)
		r.fault("kill -9 " + p.role)
		if p.role == "scheduler" {
			r.mu.Lock()
			r.schedulerKills = append(r.schedulerKills, time.Now())
			r.mu.Unlock()
		}
		time.Sleep(time.Duration(r.float()*1000) * time.Millisecond)
		r.release(p)
	}
}

// ensureAll starts any process that is not running.
func (r *run) ensureAll() {
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
	r.signalAll(role, syscall.SIGTERM, 20*time.Second)
}

func (r *run) killAll() {
	r.signalAll("", syscall.SIGKILL, time.Minute)
}

func (r *run) signalAll(role string, sig syscall.Signal, limit time.Duration) {
	r.procsMu.Lock()
	var ps []*proc
	for _, p := range r.procs {
		if (role == "" || p.role == role) && p.running() {
			ps = append(ps, p)
		}
	}
	r.procsMu.Unlock()
	for _, p := range ps {
		r.kill(p, sig, limit)
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
		popped := time.Now()
		job, err := protocol.DecodeJob([]byte(v[1]))
		if err != nil {
			continue
		}
		r.mu.Lock()
		behave := r.behave
		r.pops = append(r.pops, pop{attempt: job.AttemptUID, at: popped, deadline: job.DeadlineAt})
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
			case d < 0.39:
				kind = "poison"
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
		case "poison":
			r.fault(faultPoison)
			r.answer(ctx, job, "poison")
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
	raw, want := string(res.Encode()), ""
	switch kind {
	case "garbage":
		raw = fmt.Sprintf(`{"big_table_uid": %q, "refresh_attempt_uid": 42, "garbage": %d}`, job.BigTableUID, time.Now().UnixNano())
	case "poison":
		raw, want = r.poison(job)
	}
	if err := r.rdb.RPush(ctx, r.names.Output, raw).Err(); err != nil {
		return // Redis is down: the attempt times out
	}
	r.mu.Lock()
	r.pushed = append(r.pushed, push{attempt: job.AttemptUID, uid: job.BigTableUID, kind: kind, want: want, raw: raw, at: time.Now(), deadline: job.DeadlineAt})
	r.mu.Unlock()
}

func (r *run) progress(ctx context.Context, phase string) {
	var attempts, disabled int
	r.db.GetContext(ctx, &attempts, "SELECT count(*) FROM bigtable_attempts")
	r.db.GetContext(ctx, &disabled, "SELECT count(*) FROM bigtables WHERE disabled_until_update AND uid LIKE 'c%'") // not the unreadable rows
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
