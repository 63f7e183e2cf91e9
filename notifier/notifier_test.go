package notifier_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/notifier"
	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/schema"
	"github.com/bigtables/bigtables/store"
	"github.com/redis/go-redis/v9"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

const secret = "s3cr3t-webhook-key"

// clock is a settable clock for the notifiers' store.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// delivery is one POST a receiver got.
type delivery struct {
	id, typ, sig string
	body         []byte
}

// receiver is a real HTTP receiver recording what it gets; status, when
// set, answers instead of 200; onPost runs before the answer.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []delivery
	status int
	onPost func(r *http.Request)
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, delivery{r.Header.Get(notifier.HeaderEventID), r.Header.Get(notifier.HeaderEventType),
			r.Header.Get(notifier.HeaderSignature), body})
		status, onPost := rc.status, rc.onPost
		rc.mu.Unlock()
		if onPost != nil {
			onPost(r)
		}
		if status != 0 {
			w.WriteHeader(status)
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) deliveries() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got...)
}

func (rc *receiver) set(status int) { rc.mu.Lock(); rc.status = status; rc.mu.Unlock() }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// failToTheEnd runs a record through the real scheduler, Redis lists and
// poller until its last retry fails: two attempts (one retry after 0 s),
// the last failure with a reason for the customer.
func failToTheEnd(t *testing.T, st *store.Store, q *queue.Queue, uid string) {
	t.Helper()
	ctx := context.Background()
	p := refresh.DefaultPolicy()
	p.Retries = []refresh.Duration{0}
	// The original design's thumbnail scenario: the record is marked
	// "thumbnail creation failed" and the customer is told.
	p.FinalReason, p.NotifyFinal = "thumbnail creation failed", true
	past := time.Now().Add(-time.Minute)
	if _, err := st.Add(ctx, uid, store.Definition{InputURL: "http://example.com/" + uid, Policy: p.JSON()}, &past); err != nil {
		t.Fatal(err)
	}
	sched := scheduler.New(st, q, scheduler.Config{Logger: quiet()})
	pol := poller.New(st, q, poller.Config{Logger: quiet()})
	for i := range 2 {
		if _, err := sched.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		raw, err := q.PopJob(ctx, time.Second)
		if err != nil || raw == nil {
			t.Fatalf("attempt %d: no job (%v)", i+1, err)
		}
		job, err := protocol.DecodeJob(raw)
		if err != nil {
			t.Fatal(err)
		}
		res := protocol.Result{BigTableUID: uid, AttemptUID: job.AttemptUID, Type: protocol.Failure,
			Message: "GET: 503 Service Unavailable"}
		if err := q.PushResult(ctx, res.Encode()); err != nil {
			t.Fatal(err)
		}
		if _, err := pol.Once(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if row, _ := st.Get(ctx, uid); !row.Disabled {
		t.Fatalf("record %+v; want disabled", row.State)
	}
}

func checkSigned(t *testing.T, d delivery) protocol.Event {
	t.Helper()
	if !notifier.Verify(secret, d.body, d.sig) {
		t.Errorf("signature %q does not verify the body %s", d.sig, d.body)
	}
	var ev protocol.Event
	if err := json.Unmarshal(d.body, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.ID != d.id || ev.Type != d.typ {
		t.Errorf("headers id %q type %q; body %+v", d.id, d.typ, ev)
	}
	return ev
}

func validEvent(t *testing.T, body []byte) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema.Event))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("event.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("event.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("event %s fails the schema: %v", body, err)
	}
}

// The done criterion: a record fails to its end and a real HTTP receiver
// gets one signed disabled event with the final reason; the Redis list
// gets the same JSON, valid against the published schema.
func TestRecordFailsToItsEndReceiverGetsOneSignedEvent(t *testing.T) {
	st := testsvc.Store(t)
	_, rdb, names := testsvc.Redis(t)
	q := queue.New(rdb, names)
	failToTheEnd(t, st, q, "thumb")
	rc := newReceiver(t)
	list := names.Input + "-events"
	deliverAll(t, st, q, rc.URL+"/hook", list)
	got := rc.deliveries()
	if len(got) != 1 {
		t.Fatalf("receiver got %d deliveries; want 1", len(got))
	}
	ev := checkSigned(t, got[0])
	if ev.Type != "disabled" || ev.BigTableUID != "thumb" || ev.Reason != "thumbnail creation failed" || ev.Attempts != 2 || ev.FailingSince == nil || !ev.NotifyCustomer {
		t.Errorf("event %+v; want disabled after 2 attempts with the policy's final reason, for the customer", ev)
	}
	deliveredOnce(t, st, rdb, list, got[0].body, store.EventFilter{UID: "thumb"})
}

// A notifier stopped after the receiver got the POST but before the event
// was marked delivered: the event stays claimed, and once its lease has run
// out another notifier delivers it again, with the same id (at least once,
// de-duplicable).
func TestNotifierKilledMidDeliveryDeliversAgainWithTheSameID(t *testing.T) {
	base := testsvc.Store(t)
	_, rdb, names := testsvc.Redis(t)
	q := queue.New(rdb, names)
	failToTheEnd(t, base, q, "thumb")
	clk := &clock{now: time.Now().UTC().Add(time.Second)}
	st := base.WithClock(clk.Now)
	rc := newReceiver(t)
	ctx, kill := context.WithCancel(context.Background())
	rc.onPost = func(r *http.Request) {
		kill()               // the notifier dies with the POST received...
		<-r.Context().Done() // ...before it reads the answer
	}
	lease := time.Minute
	first, err := notifier.New(st, notifier.Config{Webhooks: []string{rc.URL}, Secret: secret, Lease: lease, ID: "first", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Once(ctx); err == nil {
		t.Fatal("the killed notifier's round ended without error")
	}
	stored, _ := st.ListEvents(context.Background(), store.EventFilter{})
	if len(rc.deliveries()) != 1 || len(stored) != 1 || stored[0].State != store.EventPending {
		t.Fatalf("after the kill: %d deliveries, events %+v; want one POST and the event still pending", len(rc.deliveries()), stored)
	}
	rc.mu.Lock()
	rc.onPost = nil
	rc.mu.Unlock()
	second, err := notifier.New(st, notifier.Config{Webhooks: []string{rc.URL}, Secret: secret, Lease: lease, ID: "second", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(lease - time.Microsecond)
	if k, err := second.Once(context.Background()); err != nil || k != 0 {
		t.Fatalf("claimed %d, %v while the killed notifier's lease runs; want 0", k, err)
	}
	clk.Add(time.Microsecond)
	if k, err := second.Once(context.Background()); err != nil || k != 1 {
		t.Fatalf("claimed %d, %v after the lease; want 1", k, err)
	}
	got := rc.deliveries()
	if len(got) != 2 || got[0].id != got[1].id || !bytes.Equal(got[0].body, got[1].body) {
		t.Fatalf("deliveries %+v; want the same event twice", got)
	}
	if ev := checkSigned(t, got[1]); ev.Type != "disabled" || ev.Reason != "thumbnail creation failed" {
		t.Errorf("event %+v", ev)
	}
	stored, _ = st.ListEvents(context.Background(), store.EventFilter{})
	if len(stored) != 1 || stored[0].State != store.EventDelivered {
		t.Errorf("stored %+v; want delivered", stored)
	}
}

// Failed rounds are retried after the strategy's delays, only to the
// destinations that did not take the event; after the last retry the event
// is dead, and a requeue delivers it. No secret (the signing key, a token
// in a webhook's URL) appears in a log line or a stored error.
func TestRetriesDeadAndRequeue(t *testing.T) {
	clk := &clock{now: time.Now().UTC().Add(time.Second)}
	st := testsvc.Store(t).WithClock(clk.Now)
	ctx := context.Background()
	if err := st.WriteEvent(ctx, store.Event{Type: store.EventRecovered, UID: "r", Attempts: 3}); err != nil {
		t.Fatal(err)
	}
	good, bad := newReceiver(t), newReceiver(t)
	bad.set(http.StatusServiceUnavailable)
	retry, err := refresh.ParseStrategy("exponential initial=10s multiplier=2 max_attempts=2")
	if err != nil {
		t.Fatal(err)
	}
	var logs testsvc.SyncBuffer
	n, err := notifier.New(st, notifier.Config{
		Webhooks: []string{good.URL, bad.URL + "/hook?token=tok-123456"}, Secret: secret, Retry: &retry,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	once := func(want int) {
		t.Helper()
		if k, err := n.Once(ctx); err != nil || k != want {
			t.Fatalf("claimed %d, %v; want %d", k, err, want)
		}
	}
	once(1)
	ev, _ := st.ListEvents(ctx, store.EventFilter{})
	if ev[0].State != store.EventPending || ev[0].Tries != 1 || !ev[0].NextAt.Equal(clk.Now().Truncate(time.Microsecond).Add(10*time.Second)) ||
		!strings.Contains(ev[0].LastError, "HTTP 503") {
		t.Fatalf("after round 1: %+v; want a retry in 10 s", ev[0])
	}
	clk.Add(10*time.Second - time.Microsecond)
	once(0)
	clk.Add(time.Microsecond)
	once(1)
	ev, _ = st.ListEvents(ctx, store.EventFilter{State: store.EventDead})
	if len(ev) != 1 || ev[0].Tries != 2 {
		t.Fatalf("dead events %+v; want the event dead after 2 rounds", ev)
	}
	if len(good.deliveries()) != 1 || len(bad.deliveries()) != 2 {
		t.Errorf("good got %d, bad %d; want 1 and 2 (no resend where delivered)", len(good.deliveries()), len(bad.deliveries()))
	}
	bad.set(0)
	if err := st.RequeueEvent(ctx, ev[0].ID); err != nil {
		t.Fatal(err)
	}
	once(1)
	if len(good.deliveries()) != 1 || len(bad.deliveries()) != 3 {
		t.Errorf("after requeue good got %d, bad %d; want 1 and 3", len(good.deliveries()), len(bad.deliveries()))
	}
	ev, _ = st.ListEvents(ctx, store.EventFilter{})
	if ev[0].State != store.EventDelivered {
		t.Errorf("after requeue: %+v; want delivered", ev[0])
	}
	for _, leak := range []string{secret, "tok-123456"} {
		if strings.Contains(logs.String(), leak) || strings.Contains(ev[0].LastError, leak) {
			t.Errorf("%q leaked:\n%s\nlast error %q", leak, logs.String(), ev[0].LastError)
		}
	}
	if !strings.Contains(logs.String(), "dead") {
		t.Errorf("no log line says the event is dead:\n%s", logs.String())
	}
}

// A record's own URL (its policy's notify) is called only when its host is
// on the allow-list; otherwise it is refused with a logged reason and the
// operator's destinations still get the event.
func TestRecordWebhookNeedsAnAllowedHost(t *testing.T) {
	clk := &clock{now: time.Now().UTC().Add(time.Second)}
	st := testsvc.Store(t).WithClock(clk.Now)
	ctx := context.Background()
	own, ops := newReceiver(t), newReceiver(t)
	policy := []byte(`{"timeout": "1h", "notify": "` + own.URL + `/customer"}`)
	if _, err := st.Add(ctx, "r", store.Definition{InputURL: "http://example.com/r", Policy: policy}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Pause(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	var logs testsvc.SyncBuffer
	refusing, err := notifier.New(st, notifier.Config{Webhooks: []string{ops.URL}, AllowHosts: []string{"hooks.example.com"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := refusing.Once(ctx); err != nil || k != 1 {
		t.Fatalf("claimed %d, %v", k, err)
	}
	if len(own.deliveries()) != 0 || len(ops.deliveries()) != 1 {
		t.Fatalf("record's URL got %d, operator's %d; want 0 and 1", len(own.deliveries()), len(ops.deliveries()))
	}
	host, _ := url.Parse(own.URL)
	if !strings.Contains(logs.String(), "not on the allow-list") || !strings.Contains(logs.String(), host.Hostname()) {
		t.Errorf("no logged reason:\n%s", logs.String())
	}
	if _, err := st.Resume(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	allowing, err := notifier.New(st, notifier.Config{Webhooks: []string{ops.URL}, AllowHosts: []string{host.Hostname()}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := allowing.Once(ctx); err != nil || k != 1 {
		t.Fatalf("claimed %d, %v", k, err)
	}
	if got := own.deliveries(); len(got) != 1 || got[0].typ != "resumed" || got[0].sig != "" {
		t.Errorf("record's URL got %+v; want the resumed event, unsigned (no secret set)", got)
	}
}

// Bad configurations are refused with the reason, naming no secret.
func TestConfigRefused(t *testing.T) {
	st := testsvc.Store(t)
	for _, cfg := range []notifier.Config{
		{Webhooks: []string{"ftp://user:pw-123@x/"}},
		{AllowHosts: []string{"http://x"}},
		{Webhooks: []string{"http://a"}, Lease: time.Second},
		{EventsList: "x"},
	} {
		if _, err := notifier.New(st, cfg); err == nil || strings.Contains(err.Error(), "pw-123") {
			t.Errorf("New(%+v) = %v; want a refusal without the password", cfg, err)
		}
	}
}

// Delivered and dead events older than Keep are pruned in batches; pending
// ones stay.
func TestPrune(t *testing.T) {
	clk := &clock{now: time.Now().UTC().Add(time.Second)}
	st := testsvc.Store(t).WithClock(clk.Now)
	ctx := context.Background()
	for range 5 {
		if err := st.WriteEvent(ctx, store.Event{Type: store.EventPaused, UID: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	rc := newReceiver(t)
	n, err := notifier.New(st, notifier.Config{Webhooks: []string{rc.URL}, Batch: 4, Keep: time.Hour, PruneBatch: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := n.Once(ctx); err != nil || k != 4 {
		t.Fatalf("claimed %d, %v", k, err)
	}
	clk.Add(time.Hour + time.Second)
	if k, err := n.Prune(ctx); err != nil || k != 4 {
		t.Fatalf("pruned %d, %v; want the 4 delivered", k, err)
	}
	if left, _ := st.ListEvents(ctx, store.EventFilter{}); len(left) != 1 || left[0].State != store.EventPending {
		t.Errorf("left %+v; want the pending one", left)
	}
}

// deliverAll runs a notifier, delivering to webhook and the Redis list
// list, until no event is left to deliver.
func deliverAll(t *testing.T, st *store.Store, q *queue.Queue, webhook, list string) {
	t.Helper()
	n, err := notifier.New(st, notifier.Config{Webhooks: []string{webhook}, Secret: secret, Queue: q, EventsList: list, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	for {
		k, err := n.Once(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			return
		}
	}
}

// deliveredOnce checks the one event the webhook received: valid against
// the schema, on the Redis list events once with the same JSON, and the
// only event of filter, marked delivered.
func deliveredOnce(t *testing.T, st *store.Store, rdb redis.UniversalClient, list string, body []byte, filter store.EventFilter) {
	t.Helper()
	validEvent(t, body)
	onList, err := rdb.LRange(context.Background(), list, 0, -1).Result()
	if err != nil || len(onList) != 1 || onList[0] != string(body) {
		t.Errorf("events list %q, %v; want the same JSON once", onList, err)
	}
	stored, _ := st.ListEvents(context.Background(), filter)
	if len(stored) != 1 || stored[0].State != store.EventDelivered {
		t.Errorf("stored %+v; want one delivered event", stored)
	}
}
