package notifier_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/schema"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// A failure that opens an upstream's breaker, applied by the real poller,
// reaches a webhook and the events list as one signed breaker_opened
// event, valid against the published schema, with no record.
func TestBreakerOpenedIsDelivered(t *testing.T) {
	st := testsvc.Store(t)
	_, rdb, names := testsvc.Redis(t)
	q := queue.New(rdb, names)
	ctx := context.Background()
	cfg := upstream.DefaultConfig()
	cfg.Breaker.Consecutive, cfg.Breaker.FailureRate = 1, 0
	if err := st.SetUpstream(ctx, "partner.example", cfg); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Minute)
	def := store.Definition{InputURL: "http://partner.example/r", Policy: refresh.DefaultPolicy().JSON()}
	if _, err := st.Add(ctx, "r", def, &past); err != nil {
		t.Fatal(err)
	}
	if _, err := scheduler.New(st, q, scheduler.Config{Logger: quiet()}).Tick(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := q.PopJob(ctx, time.Second)
	if err != nil || raw == nil {
		t.Fatalf("no job (%v)", err)
	}
	job, err := protocol.DecodeJob(raw)
	if err != nil {
		t.Fatal(err)
	}
	res := protocol.Result{BigTableUID: "r", AttemptUID: job.AttemptUID, Type: protocol.Failure, Message: "GET: 503 Service Unavailable"}
	if err := q.PushResult(ctx, res.Encode()); err != nil {
		t.Fatal(err)
	}
	if _, err := poller.New(st, q, poller.Config{Logger: quiet()}).Once(ctx); err != nil {
		t.Fatal(err)
	}

	rc := newReceiver(t)
	list := names.Input + "-events"
	deliverAll(t, st, q, rc.URL+"/hook", list)
	got := rc.deliveries()
	if len(got) != 1 {
		t.Fatalf("receiver got %d deliveries; want 1 (breaker_opened)", len(got))
	}
	ev := checkSigned(t, got[0])
	if ev.Type != "breaker_opened" || ev.BigTableUID != "" || ev.Upstream != "partner.example" || ev.From != "closed" || ev.To != "open" ||
		ev.Why != "1 failure" || ev.CoolDown != "30s" || ev.NextProbeAt == nil || !ev.NextProbeAt.Equal(ev.At.Add(30*time.Second)) ||
		ev.Message == "" || ev.NotifyCustomer {
		t.Errorf("event %s; want breaker_opened of partner.example, closed -> open, probes 30s later", got[0].body)
	}
	deliveredOnce(t, st, rdb, list, got[0].body, store.EventFilter{Upstream: "partner.example"})
}

// The published schema's type enum is store.EventTypes.
func TestSchemaListsEveryEventType(t *testing.T) {
	var s struct {
		Properties struct {
			Type struct {
				Enum []string `json:"enum"`
			} `json:"type"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(schema.Event, &s); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, typ := range store.EventTypes {
		want = append(want, string(typ))
	}
	if !slices.Equal(s.Properties.Type.Enum, want) {
		t.Errorf("schema enum %q; want store.EventTypes %q", s.Properties.Type.Enum, want)
	}
}
