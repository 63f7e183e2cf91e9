package chaos

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/lib/pq"
)

// Fault kinds injected here (the proxy's are in proxy.go).
const (
	faultPausedInTx    = "poller paused (SIGSTOP) inside its transaction, past its lease"
	faultPaused        = "poller paused (SIGSTOP) past its lease (no transaction caught)"
	faultPollersDown   = "every poller down longer than the records' timeout"
	faultDuplicateID   = "poller started with a live poller's id (refused)"
	faultUnreadableRow = "row written by hand with an unreadable schedule or policy"
	faultPoison        = "worker sends a poison result (NUL, invalid UTF-8)"
)

// recordTimeout is every record's attempt timeout (addRecords).
const recordTimeout = 10 * time.Second

// pollerLease is the pollers' --lease.
const pollerLease = 2 * time.Second

// schedulerBatch is the schedulers' --batch.
const schedulerBatch = 200

func (r *run) intn(n int) int { return min(int(r.float()*float64(n)), n-1) }

// between returns a random duration in [lo, hi).
func (r *run) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.float()*float64(hi-lo))
}

// wait sleeps d, or less if stop closes; it reports whether stop closed.
func wait(stop <-chan struct{}, d time.Duration) bool {
	select {
	case <-stop:
		return true
	case <-time.After(d):
		return false
	}
}

// networkFaults makes the proxy between the processes and Redis lose
// replies, drop connections, and go unreachable for 1 to 2 seconds when a
// scheduler pushes jobs, until stop closes. Each fault holds netMu while it
// acts, so the duplicate-id check runs only while the network is sound.
func (r *run) networkFaults(stop <-chan struct{}) {
	input := []byte("\r\n" + r.names.Input + "\r\n") // the list's name as a RESP argument: a push, not a cancel marker
	for !wait(stop, r.between(500*time.Millisecond, 2*time.Second)) {
		r.netMu.Lock()
		switch d := r.float(); {
		case d < 0.5:
			w := r.between(500*time.Millisecond, 1500*time.Millisecond)
			r.proxy.dropReplies(w, 1+r.intn(4))
			time.Sleep(w + 200*time.Millisecond)
		case d < 0.75:
			r.proxy.dropConns(1+r.intn(3), r.intn)
		default:
			out := r.between(time.Second, 2*time.Second)
			select {
			case <-r.proxy.outageOn(input, r.float() < 0.5, out):
				time.Sleep(out + 200*time.Millisecond)
			case <-time.After(5 * time.Second):
				r.proxy.disarm()
			case <-stop:
				r.proxy.disarm()
			}
		}
		r.netMu.Unlock()
	}
}

// processFaults starts pollers with a live poller's id and pauses pollers
// with SIGSTOP, in turn (a turn is retried until it could be done: no
// poller runs while they are all down), until stop closes.
func (r *run) processFaults(ctx context.Context, stop <-chan struct{}) {
	dups, pauses := 0, 0
	for !wait(stop, r.between(500*time.Millisecond, 1500*time.Millisecond)) {
		switch {
		case dups <= pauses:
			if r.duplicatePoller(ctx) {
				dups++
			}
		case r.pausePoller(ctx):
			pauses++
		}
	}
}

// pollersOutage is how long every poller is stopped, once: longer than
// the records' timeout, so that every attempt running meanwhile has its
// deadline pass while its answer waits in Redis.
const pollersOutage = recordTimeout + 2*time.Second

// pollersDown stops every poller (SIGKILL or SIGTERM) for d, then starts
// them again.
func (r *run) pollersDown(d time.Duration) {
	held := r.holdAll("poller")
	r.say("stopping every poller for %v", d)
	for _, p := range held {
		sig := syscall.SIGKILL
		if r.float() < 0.5 {
			sig = syscall.SIGTERM
		}
		r.kill(p, sig, 5*time.Second)
	}
	r.fault(faultPollersDown)
	time.Sleep(d)
	for _, p := range held {
		r.release(p)
	}
}

// pausePoller freezes a poller with SIGSTOP for longer than its lease and
// then lets it go on. It aims for a moment when the poller holds an open
// transaction (row locks), found in pg_stat_activity by the poller's
// connections; if none comes within 5 s it pauses it anyway.
func (r *run) pausePoller(ctx context.Context) bool {
	p := r.take("poller")
	if p == nil {
		return false
	}
	defer r.release(p)
	r.procsMu.Lock()
	proc := p.cmd.Process
	r.procsMu.Unlock()
	kind := faultPaused
	// Watch the poller's sessions without stopping it; stop it as soon as
	// one is inside a transaction, and keep it stopped if it still is.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if inTx, err := r.inTransaction(ctx, proc.Pid); err != nil || !inTx {
			continue
		}
		if proc.Signal(syscall.SIGSTOP) != nil {
			return false
		}
		if inTx, err := r.inTransaction(ctx, proc.Pid); err == nil && inTx {
			kind = faultPausedInTx
			break
		}
		proc.Signal(syscall.SIGCONT)
	}
	if kind == faultPaused && proc.Signal(syscall.SIGSTOP) != nil {
		return false
	}
	r.fault(kind)
	time.Sleep(pollerLease + r.between(time.Second, 3*time.Second))
	proc.Signal(syscall.SIGCONT)
	return true
}

// inTransaction reports whether the process has a PostgreSQL session inside
// a transaction: its TCP connections' local ports, from /proc, matched
// against pg_stat_activity's client_port.
func (r *run) inTransaction(ctx context.Context, pid int) (bool, error) {
	ports, err := localPorts(pid)
	if err != nil || len(ports) == 0 {
		return false, err
	}
	var n int
	err = r.db.GetContext(ctx, &n, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND client_port = ANY($1) AND xact_start IS NOT NULL AND pid <> pg_backend_pid()`, pq.Array(ports))
	return n > 0, err
}

// localPorts returns the local TCP ports of the process's sockets (Linux).
func localPorts(pid int) ([]int64, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var ports []int64
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if port, err := strconv.ParseInt(hexPort, 16, 32); ok && err == nil {
				ports = append(ports, port)
			}
		}
		f.Close()
	}
	return ports, nil
}

// duplicatePoller starts a second poller with the id of a live one (while
// the network is sound and the live one's lease is held); it must refuse to
// start: exit non-zero and say why, naming the id. Anything else is recorded
// as a violation. It reports whether it started one.
func (r *run) duplicatePoller(ctx context.Context) bool {
	p := r.take("poller")
	if p == nil {
		return false
	}
	defer r.release(p)
	r.netMu.Lock()
	defer r.netMu.Unlock()
	time.Sleep(pollerLease / 2) // the live poller renews its lease after any network fault
	r.procsMu.Lock()
	id := p.id
	r.procsMu.Unlock()
	if !r.leaseHeld(ctx, id) {
		return false
	}
	cmd := exec.Command(r.cfg.Binary, "poller", "--lease", pollerLease.String(), "--batch", "50", "--id", id)
	cmd.Env = append(r.env(), "REDIS_URL="+r.directURL) // straight to Redis: refused for its id, not for a network fault
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		r.say("start a duplicate poller: %v", err)
		return false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		r.violation(fmt.Sprintf("a second poller with the live id %s ran for 10 s instead of refusing to start", id))
		return true
	}
	msg := strings.TrimSpace(out.String())
	switch {
	case err == nil:
		r.violation(fmt.Sprintf("a second poller with the live id %s exited 0; want a refusal", id))
	case !strings.Contains(msg, id):
		r.violation(fmt.Sprintf("a second poller with the live id %s exited (%v) without naming the id: %q", id, err, protocol.Clip(msg, 200)))
	default:
		r.fault(faultDuplicateID)
		r.mu.Lock()
		if r.refusal == "" {
			r.refusal = protocol.Clip(msg, 200)
		}
		r.mu.Unlock()
	}
	return true
}

// leaseHeld reports whether the poller id holds a lease that is still live
// by Redis's clock. Leases are scored by their expiry in Unix milliseconds
// or microseconds (by the magnitude: either is far from the other).
func (r *run) leaseHeld(ctx context.Context, id string) bool {
	exp, err := r.rdb.ZScore(ctx, r.names.Output+":pollers", id).Result()
	if err != nil {
		return false
	}
	now, err := r.rdb.Time(ctx).Result()
	if err != nil {
		return false
	}
	soon := now.Add(pollerLease / 4)
	if exp > 1e14 {
		return exp > float64(soon.UnixMicro())
	}
	return exp > float64(soon.UnixMilli())
}

func (r *run) violation(v string) {
	r.mu.Lock()
	r.duplicateViolations = append(r.duplicateViolations, v)
	r.mu.Unlock()
}

// unreadable rows: schedules and policies another version, or a person,
// could have stored, which this version cannot read. want is a fragment of
// the parse error the disabled reason must show.
var unreadable = []struct{ schedule, policy, want string }{
	{"RRULE:FREQ=SOMETIMES", "", "missing DTSTART"},
	{"DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY;BYHOUR=25", "", `BYHOUR value "25"`},
	{"", `{"timeout": "soon"}`, `duration "soon"`},
	{"", `{"timeout": "10s", "on_exhausted": "explode"}`, `on_exhausted "explode"`},
	{"", `{"timeout": "10s", "written_by": "a newer version"}`, `unknown field "written_by"`},
}

// addUnreadable writes n rows, due a minute ago (so they are claimed
// first), whose stored schedule or policy cannot be read, straight into the
// table with SQL.
func (r *run) addUnreadable(ctx context.Context, n int) error {
	tx, err := r.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add unreadable rows: %w", err)
	}
	defer tx.Rollback()
	r.mu.Lock()
	first := len(r.unreadable)
	r.mu.Unlock()
	added := map[string]string{}
	good := string(refresh.DefaultPolicy().JSON())
	for i := first; i < first+n; i++ {
		u := unreadable[i%len(unreadable)]
		uid := fmt.Sprintf("u%05d", i)
		pol := u.policy
		if pol == "" {
			pol = good
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO bigtables (uid, input_url, schedule, policy, refresh_at)
			VALUES ($1, $2, $3, $4::jsonb, now() - interval '1 minute')`, uid, "http://chaos.invalid/"+uid, u.schedule, pol); err != nil {
			return fmt.Errorf("add unreadable row %s: %w", uid, err)
		}
		added[uid] = u.want
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add unreadable rows: %w", err)
	}
	r.mu.Lock()
	for uid, want := range added {
		r.unreadable[uid] = want
	}
	r.mu.Unlock()
	for range n {
		r.fault(faultUnreadableRow)
	}
	return nil
}

// poison returns a result that is valid JSON but holds what PostgreSQL
// cannot store (NUL) or invalid UTF-8, and the outcome it has if a decoder
// cleans it instead of dead-lettering it ("success or stale": either).
func (r *run) poison(job protocol.Job) (raw, want string) {
	uid, att := strconv.Quote(job.BigTableUID), strconv.Quote(job.AttemptUID)
	switch r.intn(7) {
	case 0:
		return fmt.Sprintf(`{"big_table_uid":%s,"refresh_attempt_uid":%s,"type":"success","message":"ok\u0000"}`, uid, att), "success"
	case 1:
		return fmt.Sprintf(`{"big_table_uid":%s,"refresh_attempt_uid":%s,"type":"failure","message":"broken\u0000pipe"}`, uid, att), "failure"
	case 2:
		return fmt.Sprintf(`{"big_table_uid":%s,"refresh_attempt_uid":%s,"type":"failure","retryable":false,"user_friendly_reason":"Provided URL is invalid: \u0000%s"}`,
			uid, att, strings.Trim(strconv.Quote(job.InputURL), `"`)), "failure"
	case 3:
		return fmt.Sprintf(`{"big_table_uid":"%s\u0000","refresh_attempt_uid":%s,"type":"success"}`, strings.Trim(uid, `"`), att), "success"
	case 4:
		// Cleaned by replacing the NUL, it names no attempt: stale.
		return fmt.Sprintf(`{"big_table_uid":%s,"refresh_attempt_uid":"%s\u0000","type":"success"}`, uid, strings.Trim(att, `"`)), "success or stale"
	case 5:
		return fmt.Sprintf(`{"big_table_uid":%s,"refresh_attempt_uid":%s,"type":"success","message":"bytes `+"\xff\xfe\xc0"+` are not UTF-8"}`, uid, att), "success"
	default:
		return fmt.Sprintf(`{"big_table_uid":%s,"refresh_attempt_uid":%s,"type":"failure","message":"a lone surrogate \ud800"}`, uid, att), "failure"
	}
}
