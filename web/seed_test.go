package web

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/internal/testsvc"
	"github.com/bigtables/bigtables/poller"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/schedule"
	"github.com/bigtables/bigtables/scheduler"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
	"github.com/redis/go-redis/v9"
)

// testToken is the admin token of the test dashboards.
const testToken = "test-admin-token-0123"

// system is a store, a queue, a scheduler and a poller on private
// PostgreSQL and Redis state, with records in every phase, made by the
// real scheduler's ticks and poller's rounds.
type system struct {
	t     testing.TB
	st    *store.Store
	q     *queue.Queue
	rdb   redis.UniversalClient
	sched *scheduler.Scheduler
	poll  *poller.Poller
	log   *syncLog
}

// syncLog collects the dashboard's log lines.
type syncLog struct{ testsvc.SyncBuffer }

func newSystem(t testing.TB) *system {
	t.Helper()
	st := testsvc.Store(t)
	_, rdb, names := testsvc.Redis(t)
	q := queue.New(rdb, names)
	return &system{t: t, st: st, q: q, rdb: rdb, sched: scheduler.New(st, q, scheduler.Config{}),
		poll: poller.New(st, q, poller.Config{ID: "test-poller"}), log: &syncLog{}}
}

// hourly is the schedule of the seeded records.
var hourly = schedule.MustParse("DTSTART:20240101T000000Z\nRRULE:FREQ=HOURLY").String()

// policy retries after 10 minutes, then an hour, then disables.
var policy = []byte(`{"timeout":"30m","retries":["10m","1h"]}`)

func (s *system) add(uid string, sched string, at *time.Time) {
	s.t.Helper()
	s.addOn("", uid, sched, at)
}

// addOn adds a record of the named upstream ("": the host of its input
// URL, example.com).
func (s *system) addOn(up, uid string, sched string, at *time.Time) {
	s.t.Helper()
	p, err := refresh.ParsePolicy(policy, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	def := store.Definition{InputURL: "https://example.com/" + uid, Schedule: sched, Policy: p.JSON(), Upstream: up}
	if _, err := s.st.Add(context.Background(), uid, def, at); err != nil {
		s.t.Fatal(err)
	}
}

// flaky is the seed's upstream whose breaker opens at its first failure.
const flaky = "flaky.example"

func (s *system) tick() {
	s.t.Helper()
	if _, err := s.sched.Tick(context.Background()); err != nil {
		s.t.Fatal(err)
	}
}

func (s *system) get(uid string) store.Row {
	s.t.Helper()
	r, err := s.st.Get(context.Background(), uid)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// answer pushes a worker's result for the running attempt of uid.
func (s *system) answer(uid string, typ protocol.Type, mod func(*protocol.Result)) {
	s.t.Helper()
	r := protocol.Result{BigTableUID: uid, AttemptUID: s.get(uid).AttemptUID, Type: typ, Message: "worker says " + string(typ)}
	if mod != nil {
		mod(&r)
	}
	if err := s.q.PushResult(context.Background(), r.Encode()); err != nil {
		s.t.Fatal(err)
	}
}

func (s *system) pollOnce() {
	s.t.Helper()
	if _, err := s.poll.Once(context.Background()); err != nil {
		s.t.Fatal(err)
	}
}

// seed makes one record per phase (uids are the phases' names, plus
// "waiting-2" and "<b>escaped</b>", whose name must come out escaped) and
// two dead letters. The retrying record's upstream, flaky, opens its
// breaker at the first failure (with limits set, to show them): that
// failure opens it, and the next tick parks the record "parked", due on
// the same upstream.
func (s *system) seed() {
	s.t.Helper()
	ctx := context.Background()
	cfg := upstream.DefaultConfig()
	cfg.MaxInFlight, cfg.Rate = 5, 2
	cfg.Breaker.Consecutive, cfg.Breaker.FailureRate = 1, 0
	if err := s.st.SetUpstream(ctx, flaky, cfg); err != nil {
		s.t.Fatal(err)
	}
	later := time.Now().Add(10 * time.Hour)
	s.add("waiting", hourly, &later)
	s.add("waiting-2", hourly, &later)
	s.add(`<b>escaped</b>`, hourly, &later)
	for _, uid := range []string{"running", "disabled", "paused"} {
		s.add(uid, hourly, nil)
	}
	s.addOn(flaky, "retrying", hourly, nil)
	s.add("idle", "", nil)
	s.tick()
	no := false
	s.answer("retrying", protocol.Failure, nil)
	s.answer("disabled", protocol.Failure, func(r *protocol.Result) {
		r.Retryable, r.UserFriendlyReason = &no, "The file at the URL does not exist"
	})
	s.answer("idle", protocol.Success, nil)
	if err := s.q.PushResult(context.Background(), []byte(`{"type":"success","big_table_uid":"nobody","refresh_attempt_uid":"x"}`)); err != nil {
		s.t.Fatal(err)
	}
	if err := s.q.PushResult(context.Background(), []byte(`<script>alert(1)</script> not json`)); err != nil {
		s.t.Fatal(err)
	}
	s.pollOnce()
	if _, _, err := s.st.Pause(context.Background(), "paused"); err != nil {
		s.t.Fatal(err)
	}
	s.addOn(flaky, "parked", hourly, nil)
	s.tick()
	for _, p := range store.Phases {
		if got := s.get(string(p)).Phase(); got != p {
			s.t.Fatalf("seed: record %s is %s", p, got)
		}
	}
	if d, err := s.q.Depths(context.Background()); err != nil || d.Dead != 2 {
		s.t.Fatalf("seed: dead letters %+v %v", d, err)
	}
}

// dashboard serves a dashboard on the system (token "" is read-only).
func (s *system) dashboard(token string) *httptest.Server {
	s.t.Helper()
	srv, err := New(Options{Store: s.st, Queue: s.q, AdminToken: token, CacheTTL: time.Nanosecond,
		Logger: slog.New(slog.NewTextHandler(s.log, nil))})
	if err != nil {
		s.t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	s.t.Cleanup(ts.Close)
	return ts
}

// client is a browser-like HTTP client: cookies, no redirects followed.
type client struct {
	t    testing.TB
	base string
	hc   *http.Client
}

func newClient(t testing.TB, base string) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: base, hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

func (c *client) get(path string) (int, string, http.Header) {
	c.t.Helper()
	resp, err := c.hc.Get(c.base + path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func (c *client) post(path string, form url.Values) (int, string, http.Header) {
	c.t.Helper()
	resp, err := c.hc.PostForm(c.base+path, form)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf loads a page and returns the CSRF token in its forms.
func (c *client) csrf() string {
	c.t.Helper()
	_, body, _ := c.get("/login")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		c.t.Fatalf("no CSRF token in /login:\n%s", body)
	}
	return m[1]
}

// signIn signs in as who with the token.
func (c *client) signIn(who, token string) {
	c.t.Helper()
	code, body, _ := c.post("/login", url.Values{"csrf": {c.csrf()}, "who": {who}, "token": {token}})
	if code != http.StatusSeeOther {
		c.t.Fatalf("sign in: %d %s", code, body)
	}
}

func contains(t testing.TB, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}
