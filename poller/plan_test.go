package poller

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

// The batch plan is pure: these cases need no database and no Redis.
func TestApplyBatch(t *testing.T) {
	now := time.Date(2030, 5, 6, 8, 10, 0, 0, time.UTC)
	deadline := now.Add(50 * time.Minute)
	onTime := refresh.Received{After: now.Add(-time.Minute), By: now, MaxWait: time.Hour}
	running := func(uid, attempt string) store.Row {
		return store.Row{UID: uid, Definition: store.Definition{Policy: refresh.DefaultPolicy().JSON()},
			State:    refresh.State{AttemptUID: attempt, AttemptNo: 1, StartedAt: now.Add(-10 * time.Minute), DeadlineAt: deadline},
			StatusAt: now.Add(-time.Minute)}
	}
	res := func(uid, attempt string, typ protocol.Type, msg string) protocol.Result {
		return protocol.Result{BigTableUID: uid, AttemptUID: attempt, Type: typ, Message: msg}
	}
	broken := running("broken", "c1")
	broken.Policy = []byte(`{"timeout": "soon"}`)
	kinds := running("k", "c1")
	kinds.Policy = []byte(`{"on_kind": {"bad_input": "final"}, "final_reason": "thumbnail creation failed"}`)
	withKind := func(r protocol.Result, kind string, ra *protocol.RetryAfter) protocol.Result {
		r.Kind, r.RetryAfter = kind, ra
		return r
	}

	tests := []struct {
		name    string
		rows    []store.Row
		busy    []string
		results []protocol.Result
		rcv     refresh.Received
		// want
		applied, stale int
		dead           []string // reasons, in order
		handBack       []int
		check          func(t *testing.T, p batchPlan)
	}{
		{
			name: "success then its duplicate", rows: []store.Row{running("a", "c1")},
			results: []protocol.Result{res("a", "c1", protocol.Success, "ok"), res("a", "c1", protocol.Success, "again")},
			rcv:     onTime, applied: 1, stale: 1,
			check: func(t *testing.T, p batchPlan) {
				if len(p.save) != 1 || p.save[0].Running() || p.save[0].AttemptNo != 0 {
					t.Errorf("save %+v; want a, no longer running", p.save)
				}
				if len(p.finished) != 1 || p.finished[0].Outcome != store.OutcomeSuccess || !p.finished[0].FinishedAt.Equal(now) {
					t.Errorf("finished %+v; want one success at now", p.finished)
				}
			},
		},
		{
			name: "failure records its decision", rows: []store.Row{running("a", "c1")},
			results: []protocol.Result{res("a", "c1", protocol.Failure, "boom")},
			rcv:     onTime, applied: 1,
			check: func(t *testing.T, p batchPlan) {
				if len(p.finished) != 1 || p.finished[0].Decision == "" || p.finished[0].Message != "boom" {
					t.Errorf("finished %+v; want the failure with its decision", p.finished)
				}
			},
		},
		{
			name: "retry_after in seconds sets the delay", rows: []store.Row{running("a", "c1")},
			results: []protocol.Result{withKind(res("a", "c1", protocol.Failure, "GET: 429"), "rate_limited", protocol.RetryAfterSeconds(90))},
			rcv:     onTime, applied: 1,
			check: func(t *testing.T, p batchPlan) {
				if len(p.save) != 1 || !p.save[0].RefreshAt.Equal(now.Add(90*time.Second)) {
					t.Errorf("save %+v; want refresh_at now+90s", p.save)
				}
			},
		},
		{
			name: "retry_after as a time sets the delay", rows: []store.Row{running("a", "c1")},
			results: []protocol.Result{withKind(res("a", "c1", protocol.Failure, "GET: 503"), "", protocol.RetryAfterAt(now.Add(7*time.Minute)))},
			rcv:     onTime, applied: 1,
			check: func(t *testing.T, p batchPlan) {
				if len(p.save) != 1 || !p.save[0].RefreshAt.Equal(now.Add(7*time.Minute)) {
					t.Errorf("save %+v; want refresh_at now+7m", p.save)
				}
			},
		},
		{
			name: "a kind the policy makes final disables with its final_reason", rows: []store.Row{kinds},
			results: []protocol.Result{withKind(res("k", "c1", protocol.Failure, "GET: 404"), "bad_input", nil)},
			rcv:     onTime, applied: 1,
			check: func(t *testing.T, p batchPlan) {
				if len(p.save) != 1 || !p.save[0].Disabled || p.save[0].DisabledReason != "thumbnail creation failed" ||
					p.finished[0].Decision != string(refresh.NotRetryable) {
					t.Errorf("save %+v finished %+v; want disabled, not retryable, with the policy's reason", p.save, p.finished)
				}
			},
		},
		{
			name: "status then success on one record: one row saved", rows: []store.Row{running("a", "c1")},
			results: []protocol.Result{res("a", "c1", protocol.Status, "50%"), res("a", "c1", protocol.Success, "")},
			rcv:     onTime, applied: 2,
			check: func(t *testing.T, p batchPlan) {
				if len(p.save) != 1 || p.save[0].StatusMessage != "50%" || !p.save[0].StatusAt.Equal(now) || p.save[0].Running() {
					t.Errorf("save %+v; want one row with the status, succeeded", p.save)
				}
			},
		},
		{
			name: "a status drained before the record's is older", rows: []store.Row{running("a", "c1")},
			results: []protocol.Result{res("a", "c1", protocol.Status, "10%")},
			rcv:     refresh.Received{After: now.Add(-time.Hour), By: now.Add(-2 * time.Minute)}, stale: 1,
			check: func(t *testing.T, p batchPlan) {
				if len(p.save) != 0 || !errors.Is(p.stale[0].why, errOlderStatus) {
					t.Errorf("save %+v stale %+v; want nothing saved, an older status", p.save, p.stale)
				}
			},
		},
		{
			name: "pushed after the deadline: late", rows: []store.Row{running("a", "c1")},
			results: []protocol.Result{res("a", "c1", protocol.Success, "")},
			rcv:     refresh.Received{After: deadline, By: deadline.Add(time.Second), MaxWait: time.Hour}, stale: 1,
			check: func(t *testing.T, p batchPlan) {
				if !errors.Is(p.stale[0].why, refresh.ErrLate) {
					t.Errorf("stale because %v; want ErrLate", p.stale[0].why)
				}
			},
		},
		{
			name: "pushed before the deadline, drained long after: on time", rows: []store.Row{running("a", "c1")},
			results: []protocol.Result{res("a", "c1", protocol.Success, "")},
			rcv:     refresh.Received{After: deadline.Add(-time.Second), By: deadline.Add(30 * time.Minute), MaxWait: time.Hour},
			applied: 1,
		},
		{
			name: "another attempt's result", rows: []store.Row{running("a", "c2")},
			results: []protocol.Result{res("a", "c1", protocol.Failure, "")},
			rcv:     onTime, stale: 1,
		},
		{
			name: "unknown record and unreadable policy", rows: []store.Row{broken},
			results: []protocol.Result{res("ghost", "c1", protocol.Success, ""), res("broken", "c1", protocol.Success, "")},
			rcv:     onTime,
			dead:    []string{`unknown record: no big_table_uid "ghost"`, `record "broken" cannot apply results`},
		},
		{
			name: "a record another transaction holds is handed back, all its results in order",
			rows: []store.Row{running("b", "c1")}, busy: []string{"a"},
			results: []protocol.Result{res("a", "c1", protocol.Status, "x"), res("b", "c1", protocol.Success, ""), res("a", "c1", protocol.Success, "")},
			rcv:     onTime, applied: 1, handBack: []int{0, 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows := map[string]store.Row{}
			for _, r := range tt.rows {
				rows[r.UID] = r
			}
			busy := map[string]bool{}
			for _, uid := range tt.busy {
				busy[uid] = true
			}
			items := make([]item, len(tt.results))
			for i, r := range tt.results {
				items[i] = item{idx: i, raw: string(r.Encode()), res: r}
			}
			draws := 0
			plan := applyBatch(rows, busy, items, now, tt.rcv, refresh.NewRulesCache(0), func() float64 { draws++; return 0.5 })
			if plan.applied != tt.applied || len(plan.stale) != tt.stale || len(plan.dead) != len(tt.dead) {
				t.Fatalf("applied %d stale %d dead %+v; want %d, %d, %q", plan.applied, len(plan.stale), plan.dead, tt.applied, tt.stale, tt.dead)
			}
			for i, want := range tt.dead {
				if !strings.Contains(plan.dead[i].reason, want) || plan.dead[i].raw == "" {
					t.Errorf("dead letter %d: %+v; want reason %q and the raw value", i, plan.dead[i], want)
				}
			}
			if !slices.Equal(plan.handBack, tt.handBack) {
				t.Errorf("handed back %v; want %v", plan.handBack, tt.handBack)
			}
			if tt.check != nil {
				tt.check(t, plan)
			}
		})
	}
}
