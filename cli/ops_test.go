package cli

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/redis/go-redis/v9"
)

// opsRunner is a runner with private Redis lists, a store and a scheduler
// on the same database, so a test can start attempts as the real
// scheduler does.
type opsRunner struct {
	*runner
	st    *store.Store
	q     *queue.Queue
	sched *scheduler.Scheduler
	rdb   redis.UniversalClient
}

func newOpsRunner(t *testing.T) *opsRunner {
	r := newRunner(t)
	redisURL, rdb, names := testsvc.Redis(t)
	r.env["REDIS_URL"] = redisURL
	r.env["BIGTABLES_INPUT_QUEUE"], r.env["BIGTABLES_OUTPUT_QUEUE"], r.env["BIGTABLES_DEAD_QUEUE"] = names.Input, names.Output, names.Dead
	st, err := store.Open(context.Background(), r.env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	q := queue.New(rdb, names)
	return &opsRunner{runner: r, st: st, q: q, sched: scheduler.New(st, q, scheduler.Config{}), rdb: rdb}
}

func (r *opsRunner) ok(args ...string) string {
	r.t.Helper()
	out, stderr, code := r.run(args...)
	if code != 0 {
		r.t.Fatalf("%v: exit %d: %s", args, code, stderr)
	}
	return out
}

func (r *opsRunner) tick() scheduler.TickResult {
	r.t.Helper()
	res, err := r.sched.Tick(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return res
}

func (r *opsRunner) get(uid string) store.Row {
	r.t.Helper()
	row, err := r.st.Get(context.Background(), uid)
	if err != nil {
		r.t.Fatal(err)
	}
	return row
}

func uids(out string) []string {
	var list []recordView
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		panic(err)
	}
	var u []string
	for _, v := range list {
		u = append(u, v.UID)
	}
	return u
}

func TestPauseCancelsAndHoldsResumeRuns(t *testing.T) {
	r := newOpsRunner(t)
	ctx := context.Background()
	r.ok("add", "--uid", "p1", "--input-url", "https://example.com/p1")
	if res := r.tick(); res.Started != 1 {
		t.Fatalf("tick started %d; want 1", res.Started)
	}
	attempt := r.get("p1").AttemptUID

	var v recordView
	if err := json.Unmarshal([]byte(r.ok("pause", "p1")), &v); err != nil || !v.Paused || v.AttemptUID != nil {
		t.Fatalf("pause printed %+v (%v); want paused, no attempt", v, err)
	}
	if c, err := r.q.Cancelled(ctx, attempt); err != nil || !c {
		t.Errorf("the paused record's attempt is not marked cancelled for its worker: %v %v", c, err)
	}
	h, _ := r.st.History(ctx, "p1", 5)
	if len(h) != 1 || h[0].Outcome != store.OutcomeCancelled || h[0].Message != "cancelled by a pause" {
		t.Errorf("history %+v; want the attempt cancelled by the pause", h)
	}
	if row := r.get("p1"); row.Phase() != "paused" || row.AttemptNo != 0 {
		t.Errorf("after pause: phase %s attempt_no %d; want paused, 0 (the cancelled attempt does not count)", row.Phase(), row.AttemptNo)
	}
	// Due, but paused: never claimed.
	if res := r.tick(); res.Claimed != 0 {
		t.Fatalf("a paused record was claimed: %+v", res)
	}
	if got := uids(r.ok("list", "--phase", "paused", "--json")); strings.Join(got, ",") != "p1" {
		t.Errorf("list --phase paused = %v", got)
	}
	if _, stderr, code := r.run("run", "p1"); code != 1 || !strings.Contains(stderr, "paused (resume it first)") {
		t.Errorf("run on a paused record: exit %d %q", code, stderr)
	}
	r.ok("resume", "p1")
	if res := r.tick(); res.Started != 1 {
		t.Fatalf("after resume the tick started %d; want 1 (due since the pause)", res.Started)
	}
	if _, stderr, code := r.run("run", "p1"); code != 1 || !strings.Contains(stderr, "an attempt is running already") {
		t.Errorf("run on a running record: exit %d %q", code, stderr)
	}
	for _, args := range [][]string{{"pause", "nope"}, {"resume", "nope"}, {"run", "nope"}, {"delete", "nope"}} {
		if _, stderr, code := r.run(args...); code != 1 || !strings.Contains(stderr, "no such record") {
			t.Errorf("%v: exit %d %q; want 1 and no such record", args, code, stderr)
		}
	}
}

func TestRunNowAndDelete(t *testing.T) {
	r := newOpsRunner(t)
	ctx := context.Background()
	later := time.Now().Add(10 * time.Hour).UTC().Format(time.RFC3339)
	r.ok("add", "--uid", "w1", "--input-url", "https://example.com/w1", "--refresh-at", later)
	if res := r.tick(); res.Claimed != 0 {
		t.Fatalf("claimed %+v before its time", res)
	}
	before := r.get("w1")
	r.ok("run", "w1")
	after := r.get("w1")
	if !after.RefreshAt.Before(time.Now().Add(time.Minute)) || after.Policy == nil || string(after.Policy) != string(before.Policy) || after.AttemptNo != 0 {
		t.Fatalf("run: refresh_at %v; want now, nothing else changed", after.RefreshAt)
	}
	if res := r.tick(); res.Started != 1 {
		t.Fatalf("after run the tick started %d", res.Started)
	}
	attempt := r.get("w1").AttemptUID
	out := r.ok("delete", "w1")
	if !strings.Contains(out, "deleted w1 and its history; its running attempt "+attempt+" was cancelled") {
		t.Errorf("delete printed %q", out)
	}
	if c, _ := r.q.Cancelled(ctx, attempt); !c {
		t.Error("the deleted record's attempt is not marked cancelled")
	}
	if _, err := r.st.Get(ctx, "w1"); err == nil {
		t.Error("w1 still exists")
	}
}

func TestListFiltersAndPages(t *testing.T) {
	r := newOpsRunner(t)
	later := time.Now().Add(10 * time.Hour).UTC().Format(time.RFC3339)
	for _, u := range []string{"a", "b", "c"} {
		r.ok("add", "--uid", u, "--input-url", "https://example.com/"+u, "--refresh-at", later)
	}
	r.ok("add", "--uid", "d", "--input-url", "https://example.com/d")
	if got := uids(r.ok("list", "--overdue", "--json")); strings.Join(got, ",") != "d" {
		t.Errorf("list --overdue = %v; want d", got)
	}
	r.tick()
	if got := uids(r.ok("list", "--phase", "running", "--json")); strings.Join(got, ",") != "d" {
		t.Errorf("list --phase running = %v; want d", got)
	}
	if got := uids(r.ok("list", "--phase", "waiting", "--json")); strings.Join(got, ",") != "a,b,c" {
		t.Errorf("list --phase waiting = %v", got)
	}
	if got := uids(r.ok("list", "--failing", "--json")); len(got) != 0 {
		t.Errorf("list --failing = %v; want none", got)
	}
	out, stderr, _ := r.run("list", "--limit", "2", "--json")
	if got := uids(out); strings.Join(got, ",") != "a,b" || !strings.Contains(stderr, "--after b") {
		t.Errorf("page 1: %v %q", got, stderr)
	}
	if got := uids(r.ok("list", "--limit", "2", "--after", "b", "--json")); strings.Join(got, ",") != "c,d" {
		t.Errorf("page 2: %v", got)
	}
	if _, stderr, code := r.run("list", "--phase", "sleeping"); code != 2 || !strings.Contains(stderr, `--phase "sleeping": expected`) {
		t.Errorf("bad phase: %d %q", code, stderr)
	}

	var s statsView
	if err := json.Unmarshal([]byte(r.ok("stats", "--json")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Records.Total != 4 || !s.Records.TotalExact || s.Records.Phases["waiting"] != 3 || s.Records.Phases["running"] != 1 ||
		s.Queues["input"] != 1 || s.Records.Due != 0 {
		t.Errorf("stats = %+v", s)
	}
	if out := r.ok("stats"); !strings.Contains(out, "running") || !strings.Contains(out, "queue input") {
		t.Errorf("stats text:\n%s", out)
	}
}

func TestDeadLetters(t *testing.T) {
	r := newOpsRunner(t)
	ctx := context.Background()
	at := time.Date(2024, 3, 4, 6, 0, 0, 0, time.UTC)
	for _, d := range []protocol.DeadLetter{
		{Reason: "unknown record: no big_table_uid \"x\"", DeadAt: at, Raw: `{"type":"success","big_table_uid":"x"}`},
		{Reason: "malformed", DeadAt: at, Raw: "not json"},
	} {
		if err := r.rdb.RPush(ctx, r.q.Names().Dead, d.Encode()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	out := r.ok("dead", "list")
	if !strings.Contains(out, "unknown record") || !strings.Contains(out, "not json") || !strings.Contains(out, "2 of 2 dead letters shown") {
		t.Errorf("dead list:\n%s", out)
	}
	var views []deadView
	if err := json.Unmarshal([]byte(r.ok("dead", "list", "--json")), &views); err != nil || len(views) != 2 || views[1].Raw != "not json" {
		t.Errorf("dead list --json: %+v %v", views, err)
	}
	if out := r.ok("dead", "requeue", "--limit", "1"); !strings.Contains(out, "requeued 1") {
		t.Errorf("requeue: %q", out)
	}
	d, _ := r.q.Depths(ctx)
	if d.Dead != 1 || d.Output != 1 {
		t.Errorf("after requeue of 1: %+v", d)
	}
	if _, stderr, code := r.run("dead", "purge"); code != 2 || !strings.Contains(stderr, "add --yes") {
		t.Errorf("purge without --yes: %d %q", code, stderr)
	}
	if d, _ := r.q.Depths(ctx); d.Dead != 1 {
		t.Errorf("purge without --yes deleted: %+v", d)
	}
	if out := r.ok("dead", "purge", "--yes"); !strings.Contains(out, "purged 1") {
		t.Errorf("purge: %q", out)
	}
	if _, stderr, code := r.run("dead", "bury"); code != 2 || !strings.Contains(stderr, `unknown action "bury"`) {
		t.Errorf("dead bury: %d %q", code, stderr)
	}
}

func TestVersionAndCompletion(t *testing.T) {
	r := &runner{t: t, env: map[string]string{}}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, _, code := r.run(args...)
		if code != 0 || !strings.HasPrefix(out, "bigtables ") || !strings.Contains(out, " revision ") {
			t.Errorf("%v: %d %q", args, code, out)
		}
	}
	for _, sh := range []string{"bash", "zsh"} {
		out, _, code := r.run("completion", sh)
		if code != 0 || !strings.Contains(out, "pause") || !strings.Contains(out, "requeue") {
			t.Errorf("completion %s: %d\n%s", sh, code, out)
		}
		if path, err := exec.LookPath(sh); err == nil {
			cmd := exec.Command(path, "-n")
			cmd.Stdin = strings.NewReader(out)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s -n: %v %s", sh, err, b)
			}
		}
	}
	if _, _, code := r.run("completion", "fish"); code != 2 {
		t.Errorf("completion fish: exit %d; want 2", code)
	}
}
