// Package notifier delivers the events of the transactional outbox
// (store.WriteEvents: disabled, gave_up, recovered, ...) at least once to
// webhooks and to a Redis list, and prunes old events.
//
// Notifiers side by side claim events with FOR UPDATE SKIP LOCKED for a
// lease (store.ClaimEvents): one that dies holding events leaves them to
// the others once the lease has run out. A round that fails for some
// destination is retried after a delay chosen by a retry strategy of
// package refresh (by default exponential), to the destinations that did
// not take the event yet; after the strategy's last retry the event is
// dead, listed by `bigtables events --dead` and requeued by hand.
//
// A webhook receives the event's JSON (schema/event.schema.json) in a POST
// with the headers X-Bigtables-Event-Id (de-duplicate by it: delivery is at
// least once), X-Bigtables-Event-Type and, with a secret, an HMAC-SHA256 of
// the body in X-Bigtables-Signature-256: "sha256=<hex>" (the form of
// GitHub's X-Hub-Signature-256). A record's own URL (its policy's notify)
// is called only when its host is on the operator's allow-list, so a record
// cannot make the notifier call arbitrary internal addresses. Redirects are
// never followed. No secret appears in an event, a log line or an error:
// webhooks are named by scheme, host and a short digest of the URL.
package notifier

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bigtables/bigtables/internal/wait"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

// Headers of a webhook delivery.
const (
	HeaderEventID   = "X-Bigtables-Event-Id"
	HeaderEventType = "X-Bigtables-Event-Type"
	HeaderSignature = "X-Bigtables-Signature-256"
)

// DefaultRetry is the delivery retry strategy when none is given: 5 s,
// doubling, capped at 10 minutes, 10 rounds in all (about 45 minutes).
const DefaultRetry = "exponential initial=5s multiplier=2 max=10m max_attempts=10"

// Defaults of Config.
const (
	DefaultTimeout    = 10 * time.Second
	DefaultBatch      = 16
	DefaultInterval   = time.Second
	DefaultKeep       = 30 * 24 * time.Hour
	DefaultPruneBatch = 1000
	DefaultPruneEvery = time.Minute
)

// Config is a notifier's configuration; zero fields take the defaults.
type Config struct {
	// Webhooks receive every event.
	Webhooks []string
	// Secret signs webhook bodies (HMAC-SHA256); "" sends no signature.
	Secret string
	// AllowHosts are the hosts a record's own notify URL may name: a
	// hostname, or "*.example.com" for its subdomains. Empty refuses every
	// record's URL.
	AllowHosts []string
	// EventsList, when set, is the Redis list every event is appended to
	// (Queue must be set).
	EventsList string
	Queue      *queue.Queue
	// Timeout bounds one webhook call (default 10 s).
	Timeout time.Duration
	// Retry chooses the delay after a failed round, and when to give up
	// (default DefaultRetry).
	Retry *refresh.Strategy
	// Lease is how long a claimed event is held before another notifier
	// may claim it; it must exceed a round's longest run (every
	// destination timing out). Default: twice that, at least 1 minute.
	Lease time.Duration
	// Batch is the most events claimed (and delivered concurrently) at once.
	Batch int
	// Interval is the pause when no event is due.
	Interval time.Duration
	// Keep is how long delivered and dead events are kept (default 30
	// days); PruneBatch events are deleted per statement, every PruneEvery.
	Keep       time.Duration
	PruneBatch int
	PruneEvery time.Duration
	// ID names this notifier in its claims (default host-pid-random).
	ID string
	// Client makes the webhook calls (default: one with Timeout that
	// follows no redirect).
	Client *http.Client
	// Draw returns uniform random numbers in [0, 1) for randomized retry
	// strategies (default math/rand).
	Draw func() float64
	// Now is the loop's clock, for pruning's pace (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Notifier delivers events.
type Notifier struct {
	st    *store.Store
	cfg   Config
	retry refresh.Strategy
	hooks []webhook
	log   *slog.Logger
	seq   int
	mu    sync.Mutex
}

// webhook is a destination URL and the names it is known by.
type webhook struct {
	url  string
	key  string // delivered_to key: a digest of the URL
	name string // for logs and errors: scheme, host and the key
}

func newWebhook(raw string) (webhook, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return webhook{}, fmt.Errorf("webhook %s: expected an http or https URL", safeName(raw))
	}
	return webhook{url: raw, key: "webhook:" + digest(raw), name: safeName(raw)}, nil
}

// digest is a short digest of a URL that may hold a token: it names the
// URL without revealing it.
func digest(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(sum[:6])
}

// safeName names a URL by its scheme, host and digest only: a webhook URL
// often carries a token in its path or query.
func safeName(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unparsable URL " + digest(raw) + ")"
	}
	return u.Scheme + "://" + u.Host + "/… (" + digest(raw) + ")"
}

// New checks the configuration and returns a notifier.
func New(st *store.Store, cfg Config) (*Notifier, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.PruneBatch <= 0 {
		cfg.PruneBatch = DefaultPruneBatch
	}
	if cfg.PruneEvery <= 0 {
		cfg.PruneEvery = DefaultPruneEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Draw == nil {
		cfg.Draw = mrand.Float64
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		rand.Read(b)
		cfg.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	if cfg.EventsList != "" && cfg.Queue == nil {
		return nil, errors.New("notifier: an events list needs a Redis queue")
	}
	n := &Notifier{st: st, cfg: cfg, log: cfg.Logger}
	for _, raw := range cfg.Webhooks {
		w, err := newWebhook(raw)
		if err != nil {
			return nil, err
		}
		n.hooks = append(n.hooks, w)
	}
	for _, h := range cfg.AllowHosts {
		if h == "" || strings.ContainsAny(h, "/:@ ") || strings.Contains(h[1:], "*") || (h[0] == '*' && !strings.HasPrefix(h, "*.")) {
			return nil, fmt.Errorf("allowed host %q: expected a hostname or *.domain", h)
		}
	}
	rounds := len(n.hooks) + 2 // the operator's webhooks, the record's, the list
	if need := time.Duration(rounds) * cfg.Timeout; cfg.Lease <= 0 {
		n.cfg.Lease = max(2*need, time.Minute)
	} else if cfg.Lease <= need {
		return nil, fmt.Errorf("lease %v: a round may take %v (%d destinations × timeout %v); give a longer lease", cfg.Lease, need, rounds, cfg.Timeout)
	}
	if cfg.Retry != nil {
		n.retry = *cfg.Retry
	} else {
		s, err := refresh.ParseStrategy(DefaultRetry)
		if err != nil {
			return nil, fmt.Errorf("default retry strategy: %w", err) // a bug
		}
		n.retry = s
	}
	if err := n.retry.Validate(); err != nil {
		return nil, fmt.Errorf("retry strategy: %w", err)
	}
	if n.retry.Attempts() == 0 {
		return nil, errors.New("retry strategy: it must give up at some point (set max_attempts or max_retry)")
	}
	if n.cfg.Client == nil {
		n.cfg.Client = &http.Client{
			Timeout:       cfg.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return n, nil
}

// Body returns the JSON a webhook and the events list receive for e.
func Body(e store.Event) []byte { return body(e, false) }

// body is Body, with notify_customer set when the record's policy asks that
// its customer be told of the final failure (notify_final) and e is one.
func body(e store.Event, notifyCustomer bool) []byte {
	p := protocol.Event{ID: strconv.FormatInt(e.ID, 10), Type: string(e.Type), BigTableUID: e.UID, At: e.At.UTC(),
		Reason: e.Reason, Attempts: e.Attempts, Upstream: e.Upstream, From: e.From, To: e.To, Why: e.Why,
		Parked: e.Parked, Message: e.Message, NotifyCustomer: notifyCustomer}
	if !e.FailingSince.IsZero() {
		t := e.FailingSince.UTC()
		p.FailingSince = &t
	}
	if e.CoolDown > 0 {
		p.CoolDown = refresh.FormatDuration(e.CoolDown)
	}
	if !e.NextProbeAt.IsZero() {
		t := e.NextProbeAt.UTC()
		p.NextProbeAt = &t
	}
	return p.Encode()
}

// Sign returns the signature header's value for body: "sha256=" and the
// hex HMAC-SHA256 of body keyed by secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether header is body's signature with secret, in
// constant time: what a receiver checks.
func Verify(secret string, body []byte, header string) bool {
	return hmac.Equal([]byte(header), []byte(Sign(secret, body)))
}

// notifyFinal reports whether a record's policy JSON asks that its customer
// be told of its final failure (field notify_final; tolerant, like notifyURL).
func notifyFinal(policy []byte) bool {
	var p struct {
		NotifyFinal bool `json:"notify_final"`
	}
	return json.Unmarshal(policy, &p) == nil && p.NotifyFinal
}

// notifyURL reads a record's own webhook from its policy JSON (field
// notify); tolerant: any other field or shape is ignored.
func notifyURL(policy []byte) (string, error) {
	if len(policy) == 0 {
		return "", nil
	}
	var p struct {
		Notify json.RawMessage `json:"notify"`
	}
	if err := json.Unmarshal(policy, &p); err != nil || len(p.Notify) == 0 || string(p.Notify) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(p.Notify, &s); err != nil {
		return "", errors.New("its policy's notify is not a string")
	}
	return s, nil
}

// allowed says why a record's URL may not be called, or "".
func (n *Notifier) allowed(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "not an http or https URL"
	}
	host := strings.ToLower(u.Hostname())
	for _, a := range n.cfg.AllowHosts {
		a = strings.ToLower(a)
		if host == a || (strings.HasPrefix(a, "*.") && strings.HasSuffix(host, a[1:])) {
			return ""
		}
	}
	return fmt.Sprintf("host %q is not on the allow-list (--allow-host)", u.Hostname())
}

// Once claims a batch of due events, delivers them concurrently and marks
// each round's end. It returns how many events it claimed. When ctx is
// cancelled during delivery, the events in hand are left unmarked: they are
// delivered again (by any notifier) once their lease has run out.
func (n *Notifier) Once(ctx context.Context) (int, error) {
	n.mu.Lock()
	n.seq++
	claim := fmt.Sprintf("%s#%d", n.cfg.ID, n.seq)
	n.mu.Unlock()
	events, err := n.st.ClaimEvents(ctx, claim, n.cfg.Batch, n.cfg.Lease)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, c := range events {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.round(ctx, c)
		}()
	}
	wg.Wait()
	return len(events), ctx.Err()
}

// round delivers one claimed event to the destinations that did not take
// it yet, and marks the outcome.
func (n *Notifier) round(ctx context.Context, c store.Claimed) {
	final := c.Type == store.EventDisabled || c.Type == store.EventGaveUp
	body := body(c.Event, final && notifyFinal(c.Policy))
	done := map[string]bool{}
	for _, k := range c.DeliveredTo {
		done[k] = true
	}
	delivered := append([]string(nil), c.DeliveredTo...)
	var errs []string
	try := func(key string, send func() error) {
		if done[key] {
			return
		}
		if err := send(); err != nil {
			errs = append(errs, err.Error())
			return
		}
		done[key] = true
		delivered = append(delivered, key)
	}
	id := strconv.FormatInt(c.ID, 10)
	if n.cfg.EventsList != "" {
		try("list:"+n.cfg.EventsList, func() error { return n.cfg.Queue.PushEvent(ctx, n.cfg.EventsList, body) })
	}
	for _, w := range n.hooks {
		try(w.key, func() error { return n.post(ctx, w, id, c.Type, body) })
	}
	if raw, err := notifyURL(c.Policy); err != nil {
		n.log.Warn("record's webhook refused", "event", c.ID, "uid", c.UID, "reason", err.Error())
	} else if raw != "" {
		if why := n.allowed(raw); why != "" {
			n.log.Warn("record's webhook refused", "event", c.ID, "uid", c.UID, "url", safeName(raw), "reason", why)
		} else {
			w := webhook{url: raw, key: "notify:" + digest(raw), name: safeName(raw)}
			try(w.key, func() error { return n.post(ctx, w, id, c.Type, body) })
		}
	}
	if ctx.Err() != nil {
		return // stopped mid-round: the lease brings the event back
	}
	d := store.Delivery{State: store.EventDelivered, DeliveredTo: delivered}
	if len(errs) > 0 {
		d.Error = strings.Join(errs, "; ")
		now, err := n.st.Now(ctx)
		if err != nil {
			n.log.Error("event not marked: its lease will bring it back", "event", c.ID, "error", err.Error())
			return
		}
		delay, ok := n.retry.Delay(refresh.Input{Failure: c.Tries + 1, Draw: n.cfg.Draw()})
		if ok {
			d.State, d.RetryAt = store.EventPending, now.Add(delay)
			n.log.Warn("event delivery failed; retrying", "event", c.ID, "type", c.Type, "uid", c.UID,
				"try", c.Tries+1, "retry_in", delay.String(), "error", d.Error)
		} else {
			d.State = store.EventDead
			n.log.Error("event delivery failed after the last retry: dead (bigtables events --dead; requeue with bigtables events requeue ID)",
				"event", c.ID, "type", c.Type, "uid", c.UID, "tries", c.Tries+1, "error", d.Error)
		}
	}
	ok, err := n.st.MarkEvent(ctx, c.ID, c.Claim, d)
	switch {
	case err != nil:
		n.log.Error("event not marked: its lease will bring it back", "event", c.ID, "error", err.Error())
	case !ok:
		n.log.Warn("event's lease ran out before its round ended: another notifier has it", "event", c.ID)
	case d.State == store.EventDelivered:
		n.log.Debug("event delivered", "event", c.ID, "type", c.Type, "uid", c.UID)
	}
}

// post sends one webhook call. Its errors name the webhook safely.
func (n *Notifier) post(ctx context.Context, w webhook, id string, typ store.EventType, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("POST %s: cannot build the request", w.name)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "bigtables-notifier")
	req.Header.Set(HeaderEventID, id)
	req.Header.Set(HeaderEventType, string(typ))
	if n.cfg.Secret != "" {
		req.Header.Set(HeaderSignature, Sign(n.cfg.Secret, body))
	}
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text holds the whole URL
		}
		return fmt.Errorf("POST %s: %v", w.name, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("POST %s: HTTP %s", w.name, resp.Status)
	}
	return nil
}

// Prune deletes delivered and dead events older than Keep, in bounded
// steps, at most ten steps per call; it returns how many it deleted.
func (n *Notifier) Prune(ctx context.Context) (int, error) {
	total := 0
	for range 10 {
		k, err := n.st.PruneEventsOlder(ctx, n.cfg.Keep, n.cfg.PruneBatch)
		total += k
		if err != nil || k < n.cfg.PruneBatch {
			return total, err
		}
	}
	return total, nil
}

// Run delivers events until ctx is cancelled, pruning old ones every
// PruneEvery; errors (PostgreSQL or Redis down) are logged and retried with
// backoff. It returns nil when ctx is cancelled.
func (n *Notifier) Run(ctx context.Context) error {
	n.log.Info("notifier started", "id", n.cfg.ID, "webhooks", len(n.hooks), "events_list", n.cfg.EventsList,
		"lease", n.cfg.Lease.String(), "keep", n.cfg.Keep.String())
	var lastPrune time.Time
	fail := time.Duration(0)
	for ctx.Err() == nil {
		if now := n.cfg.Now(); now.Sub(lastPrune) >= n.cfg.PruneEvery {
			lastPrune = now
			if k, err := n.Prune(ctx); err != nil && ctx.Err() == nil {
				n.log.Warn("prune events", "error", err.Error())
			} else if k > 0 {
				n.log.Info("pruned events", "deleted", k, "older_than", n.cfg.Keep.String())
			}
		}
		k, err := n.Once(ctx)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			fail = min(max(2*fail, time.Second), 30*time.Second)
			n.log.Warn("claim events; retrying", "error", err.Error(), "retry_in", fail.String())
			wait.Sleep(ctx, fail)
			continue
		}
		fail = 0
		if k == 0 {
			wait.Sleep(ctx, n.cfg.Interval)
		}
	}
	n.log.Info("notifier stopped", "id", n.cfg.ID)
	return nil
}
