package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

func TestPages(t *testing.T) {
	s := newSystem(t)
	s.seed()
	c := newClient(t, s.dashboard("").URL)

	code, body, h := c.get("/")
	if code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	for name, want := range map[string]string{
		"Content-Security-Policy": "default-src 'none'", "X-Frame-Options": "DENY",
		"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
	} {
		if !strings.Contains(h.Get(name), want) {
			t.Errorf("header %s = %q; want %q", name, h.Get(name), want)
		}
	}
	contains(t, "overview", body, `href="/records?phase=running">running</a></th><td>1<`,
		`href="/records?phase=disabled">disabled</a></th><td>1<`, `href="/records?phase=waiting">waiting</a></th><td>3<`,
		`<svg class="chart"`, "The file at the URL does not exist", "read-only", `<th><a href="/dead">dead</a></th><td>2</td>`)
	if strings.Contains(body, "<b>escaped</b>") {
		t.Error("overview: a uid came out unescaped")
	}

	code, body, _ = c.get("/records")
	if code != http.StatusOK {
		t.Fatalf("records: %d\n%s", code, body)
	}
	// Sorted by next refresh: the retrying record (10 minutes) before the
	// waiting ones (10 hours); running, disabled, paused, idle are not due.
	if i, j := strings.Index(body, ">retrying</a>"), strings.Index(body, ">waiting</a>"); i < 0 || j < 0 || i > j {
		t.Errorf("records by next refresh: retrying at %d, waiting at %d", i, j)
	}
	contains(t, "records", body, "&lt;b&gt;escaped&lt;/b&gt;", `<span class="o o-failure">failure</span>`)
	if strings.Contains(body, ">running</a>") {
		t.Error("records by next refresh lists the running record")
	}
	for _, p := range store.Phases {
		_, body := c.getOK("/records?phase=" + string(p) + "&sort=uid")
		if !strings.Contains(body, `<a href="/record?uid=`+string(p)+`">`) {
			t.Errorf("records?phase=%s lacks its record", p)
		}
	}
	_, body = c.getOK("/records?prefix=wait&sort=uid")
	contains(t, "prefix wait", body, ">waiting</a>", ">waiting-2</a>")
	if strings.Contains(body, ">retrying</a>") {
		t.Error("prefix wait lists retrying")
	}
	if code, body, _ := c.get("/records?phase=sleeping"); code != http.StatusBadRequest || !strings.Contains(body, "expected one of waiting") {
		t.Errorf("bad phase: %d", code)
	}

	_, body = c.getOK("/record?uid=retrying")
	contains(t, "record retrying", body, "On the first failure, retry after 10 minutes", "Allow 30 minutes for a response",
		"Next: attempt 2 of 3 starts at", "If it fails (after 1 minute), retry at", "attempt 3 of 3", `<svg class="gantt"`,
		"worker says failure", "failing_since")
	_, body = c.getOK("/record?uid=running")
	contains(t, "record running", body, "Attempt 1 of 3 is running since", "If it fails now, retry at", "attempt 2 of 3", "If no answer comes by")
	_, body = c.getOK("/record?uid=disabled")
	contains(t, "record disabled", body, "Disabled: &#34;The file at the URL does not exist&#34;", "not_retryable")
	_, body = c.getOK("/record?uid=paused")
	contains(t, "record paused", body, "Paused: nothing starts until it is resumed", "cancelled by a pause")
	_, body = c.getOK("/record?uid=" + url.QueryEscape("<b>escaped</b>"))
	contains(t, "record escaped", body, "<h1>&lt;b&gt;escaped&lt;/b&gt;")
	if code, _, _ := c.get("/record?uid=nobody"); code != http.StatusNotFound {
		t.Errorf("unknown record: %d", code)
	}

	_, body = c.getOK("/dead")
	contains(t, "dead", body, "unknown record", "&lt;script&gt;alert(1)&lt;/script&gt; not json", "2 results could not be applied")
	if strings.Contains(body, "<script>alert") {
		t.Error("dead letter came out unescaped")
	}
	_, body = c.getOK("/static/app.js")
	contains(t, "app.js", body, "autorefresh")
}

// A record parked by its upstream's open breaker shows as parked in the
// overview, the records filter and its page, and the upstreams page shows
// each upstream's breaker, counts and limits, names escaped.
func TestParkedAndUpstreams(t *testing.T) {
	s := newSystem(t)
	s.seed()
	if err := s.st.SetUpstream(context.Background(), "<i>odd</i>", upstream.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, s.dashboard("").URL)
	_, body := c.getOK("/")
	contains(t, "overview", body, `href="/records?phase=parked">parked</a></th><td>1<`, `<a href="/upstreams">Upstreams</a>`,
		`<span class="phase b-open">open</span></th><td>1<`, "flaky.example</th><td><span class=\"phase b-open\">open</span> 1 parked, probe ")
	_, body = c.getOK("/records?phase=parked&sort=uid")
	contains(t, "records parked", body, `<a href="/record?uid=parked">`, "the breaker of flaky.example is open")
	if strings.Contains(body, `uid=retrying"`) {
		t.Error("records?phase=parked lists the retrying record")
	}
	_, body = c.getOK("/record?uid=parked")
	contains(t, "record parked", body, `<span class="phase p-parked">parked</span>`, "Parked: its upstream&#39;s breaker is open",
		"starts as attempt 1 of 3 when the breaker lets it", "<th>parked_at</th><td>20", `<a href="/upstreams">flaky.example</a>`)

	_, body = c.getOK("/upstreams")
	contains(t, "upstreams", body, `aria-current="page">Upstreams</a>`, "&lt;i&gt;odd&lt;/i&gt;",
		"at most 5 in flight, 2 starts/s (burst 2), parked records released at 2/s",
		"opens after 1 failure; cool-down 30s doubling up to 10m; 2 probes",
		"opens after 5 failures in a row or 50% of the attempts of 1m (20 at least)")
	if strings.Contains(body, "<i>odd") {
		t.Error("upstreams: a name came out unescaped")
	}
	// flaky: open, one failure in the window and in a row, nothing in
	// flight, one parked record, a next probe; example.com (a row made by
	// the ticks): closed, with the defaults.
	flakyRow := regexp.MustCompile(`flaky\.example</td>\s*<td><span class="phase b-open">open</span></td>\s*<td>1</td>\s*<td>1</td>\s*<td>0</td>\s*<td>1</td>\s*<td>\d{4}-\d\d-\d\d \d\d:\d\d`)
	if !flakyRow.MatchString(body) {
		t.Errorf("upstreams lacks flaky.example open with 1 failure, 1 parked and a next probe:\n%s", body)
	}
	contains(t, "upstreams", body, `example.com <span class="muted">(defaults)</span></td>`+"\n      "+`<td><span class="phase b-closed">closed</span>`)
}

func (c *client) getOK(path string) (http.Header, string) {
	c.t.Helper()
	code, body, h := c.get(path)
	if code != http.StatusOK {
		c.t.Fatalf("GET %s: %d\n%s", path, code, body)
	}
	return h, body
}

func TestReadOnlyRefusesActions(t *testing.T) {
	s := newSystem(t)
	s.seed()
	srv, err := New(Options{Store: s.st, Queue: s.q})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	c := newClient(t, ts.URL)
	_, body := c.getOK("/record?uid=retrying")
	// A read-only page has no form: the token a form would carry.
	u, _ := url.Parse(ts.URL)
	var csrf string
	for _, ck := range c.hc.Jar.Cookies(u) {
		if ck.Name == sessionCookie {
			csrf = srv.mac("csrf", ck.Value)
		}
	}
	if csrf == "" {
		t.Fatal("no session cookie")
	}
	if strings.Contains(body, "act-run") {
		t.Error("a read-only dashboard shows action buttons")
	}
	code, body, _ := c.post("/actions/delete", url.Values{"csrf": {csrf}, "uid": {"retrying"}})
	if code != http.StatusForbidden || !strings.Contains(body, "The dashboard is read-only: start it with") {
		t.Errorf("delete on a read-only dashboard: %d", code)
	}
	code, _, _ = c.post("/login", url.Values{"csrf": {csrf}, "token": {""}})
	if code != http.StatusForbidden {
		t.Errorf("sign in on a read-only dashboard: %d", code)
	}
	s.get("retrying") // still there
}

func TestActionsNeedCSRFAndSignIn(t *testing.T) {
	s := newSystem(t)
	s.seed()
	ts := s.dashboard(testToken)
	c := newClient(t, ts.URL)
	c.signIn("alice", testToken)
	before := s.get("waiting")

	// Signed in, but no CSRF token, a wrong one, or another origin.
	for name, form := range map[string]url.Values{
		"no token":    {"uid": {"waiting"}},
		"wrong token": {"uid": {"waiting"}, "csrf": {strings.Repeat("0", 64)}},
	} {
		if code, body, _ := c.post("/actions/run", form); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("%s: %d", name, code)
		}
	}
	req, _ := http.NewRequest("POST", ts.URL+"/actions/run", strings.NewReader(url.Values{"uid": {"waiting"}, "csrf": {c.csrf()}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	if resp, err := c.hc.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin POST: %v %v", resp.StatusCode, err)
	}
	// Another browser's session token does not work with this session.
	other := newClient(t, ts.URL)
	if code, _, _ := c.post("/actions/run", url.Values{"uid": {"waiting"}, "csrf": {other.csrf()}}); code != http.StatusForbidden {
		t.Errorf("another session's CSRF token: %d", code)
	}
	// Not signed in: the CSRF token is right, the admin cookie missing.
	if code, body, _ := other.post("/actions/run", url.Values{"uid": {"waiting"}, "csrf": {other.csrf()}}); code != http.StatusForbidden || !strings.Contains(body, "Sign in") {
		t.Errorf("not signed in: %d", code)
	}
	// A wrong admin token does not sign in.
	if code, _, _ := other.post("/login", url.Values{"csrf": {other.csrf()}, "token": {"wrong-token-0123"}}); code != http.StatusForbidden {
		t.Errorf("wrong admin token: %d", code)
	}
	if after := s.get("waiting"); !after.RefreshAt.Equal(before.RefreshAt) {
		t.Errorf("a refused action changed the record: %v -> %v", before.RefreshAt, after.RefreshAt)
	}
}

func TestActions(t *testing.T) {
	s := newSystem(t)
	s.seed()
	c := newClient(t, s.dashboard(testToken).URL)
	c.signIn("alice", testToken)
	csrf := c.csrf()
	act := func(action string, form url.Values, wantCode int) string {
		t.Helper()
		form.Set("csrf", csrf)
		code, body, h := c.post("/actions/"+action, form)
		if code != wantCode {
			t.Fatalf("%s %v: %d; want %d\n%s", action, form, code, wantCode, body)
		}
		return h.Get("Location")
	}
	ctx := context.Background()

	_, body := c.getOK("/record?uid=waiting")
	contains(t, "record page signed in", body, `id="act-run"`, `id="act-pause"`, "signed in as <b>alice</b>")

	// Refresh now: due now, nothing else changed.
	before := s.get("waiting")
	if loc := act("run", url.Values{"uid": {"waiting"}}, http.StatusSeeOther); loc != "/record?uid=waiting&done=run" {
		t.Errorf("run redirects to %q", loc)
	}
	if r := s.get("waiting"); !r.RefreshAt.Before(before.RefreshAt) || r.AttemptNo != 0 || r.Phase() != refresh.PhaseWaiting {
		t.Errorf("after run: %+v", r.State)
	}
	_, body = c.getOK("/record?uid=waiting&done=run")
	contains(t, "notice", body, "The record is due now")
	// Run now on a disabled record is refused with the reason.
	act("run", url.Values{"uid": {"disabled"}}, http.StatusConflict)

	// Re-enable: the disabled record is enabled, attempt count reset.
	act("reenable", url.Values{"uid": {"disabled"}}, http.StatusSeeOther)
	if r := s.get("disabled"); r.Disabled || r.AttemptNo != 0 || r.RefreshAt.IsZero() {
		t.Errorf("after re-enable: %+v", r.State)
	}
	// Re-enabling the running record cancels its attempt and tells the worker.
	old := s.get("running").AttemptUID
	act("reenable", url.Values{"uid": {"running"}}, http.StatusSeeOther)
	if r := s.get("running"); r.Running() {
		t.Errorf("after re-enable the attempt still runs: %+v", r.State)
	}
	if ok, err := s.q.Cancelled(ctx, old); err != nil || !ok {
		t.Errorf("the cancelled attempt %s was not marked for its worker: %v %v", old, ok, err)
	}

	// Pause and resume.
	act("pause", url.Values{"uid": {"waiting-2"}}, http.StatusSeeOther)
	if !s.get("waiting-2").Paused {
		t.Error("pause did not pause")
	}
	act("resume", url.Values{"uid": {"waiting-2"}}, http.StatusSeeOther)
	if s.get("waiting-2").Paused {
		t.Error("resume did not resume")
	}

	// Delete.
	if loc := act("delete", url.Values{"uid": {"idle"}}, http.StatusSeeOther); loc != "/records?done=delete" {
		t.Errorf("delete redirects to %q", loc)
	}
	if _, err := s.st.Get(ctx, "idle"); err == nil {
		t.Error("delete left the record")
	}
	act("delete", url.Values{"uid": {"idle"}}, http.StatusNotFound)

	// Dead letters: requeue the first (an envelope), delete the second.
	list, err := s.q.DeadLetters(ctx, 0, 10)
	if err != nil || len(list) != 2 {
		t.Fatalf("dead letters: %v %v", list, err)
	}
	env, junk := 0, 1 // the envelope of the unknown record's result, and the malformed one
	if !strings.Contains(list[0], "nobody") {
		env, junk = 1, 0
	}
	// A digest that does not match (the list changed) is refused, and so
	// is requeueing what holds no result.
	act("requeue", url.Values{"index": {"0"}, "digest": {queue.DeadLetterDigest(list[1])}}, http.StatusConflict)
	act("requeue", url.Values{"index": {strconv.Itoa(env)}, "digest": {queue.DeadLetterDigest(list[env])}}, http.StatusSeeOther)
	act("dropdead", url.Values{"index": {"0"}, "digest": {queue.DeadLetterDigest(list[junk])}}, http.StatusSeeOther)
	d, err := s.q.Depths(ctx)
	if err != nil || d.Dead != 0 || d.Output != 1 {
		t.Errorf("after requeue and delete: %+v %v", d, err)
	}
	out, _ := s.rdb.LRange(ctx, s.q.Names().Output, 0, -1).Result()
	if len(out) != 1 || !strings.Contains(out[0], `"big_table_uid":"nobody"`) {
		t.Errorf("output after requeue: %q", out)
	}

	// Every action is logged with who did what.
	log := s.log.String()
	for _, want := range []string{`who=alice`, `what="refresh now waiting"`, `what="re-enable disabled"`, `what="delete idle"`,
		`action=requeue`, `cancelled_attempt=` + old, `msg="dashboard sign-in" who=alice`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

func TestRecordsPaging(t *testing.T) {
	s := newSystem(t)
	ctx := context.Background()
	base := time.Now().Add(time.Hour).Truncate(time.Second)
	var want []string
	for i := range 120 {
		uid := "r" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		at := base.Add(time.Duration(i/2) * time.Minute) // pairs share a refresh_at: the uid breaks the tie
		s.add(uid, hourly, &at)
		want = append(want, uid)
	}
	for _, sort := range []string{"next", "uid"} {
		var got []string
		seen := map[string]bool{}
		rows, more, err := s.st.Page(ctx, store.PageQuery{Sort: store.PageSort(sort), Limit: 50})
		for pages := 0; ; pages++ {
			if err != nil || pages > 5 {
				t.Fatalf("%s: %v after %d pages", sort, err, pages)
			}
			for _, r := range rows {
				if seen[r.UID] {
					t.Fatalf("%s: %s twice", sort, r.UID)
				}
				seen[r.UID] = true
				got = append(got, r.UID)
			}
			if !more {
				break
			}
			last := rows[len(rows)-1]
			rows, more, err = s.st.Page(ctx, store.PageQuery{Sort: store.PageSort(sort), Limit: 50, AfterUID: last.UID, AfterAt: last.RefreshAt})
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: pages gave %v", sort, got)
		}
	}
	// The page's next link carries the key.
	c := newClient(t, s.dashboard("").URL)
	_, body := c.getOK("/records")
	i := strings.Index(body, `<a href="/records?after=`)
	if i < 0 {
		t.Fatalf("no next link:\n%s", body)
	}
	link := body[i+9 : i+9+strings.Index(body[i+9:], `"`)]
	_, body = c.getOK(strings.ReplaceAll(link, "&amp;", "&"))
	contains(t, "page 2", body, ">rby</a>", ">rdv</a>")
	if strings.Contains(body, ">rbx</a>") || strings.Contains(body, ">rdw</a>") {
		t.Error("page 2 repeats page 1's last row")
	}
}

func TestActivity(t *testing.T) {
	s := newSystem(t)
	s.seed()
	now, _ := s.st.Now(context.Background())
	mins, err := s.st.Activity(context.Background(), now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(mins) != 60 || !mins[59].Minute.Equal(now.Truncate(time.Minute)) {
		t.Fatalf("%d minutes, last %v", len(mins), mins[len(mins)-1].Minute)
	}
	var sum [5]int64
	for _, m := range mins {
		sum[0] += m.Started
		sum[1] += m.Succeeded
		sum[2] += m.Failed
		sum[3] += m.TimedOut
		sum[4] += m.Cancelled
	}
	// Five starts (one still running), one success, two failures, one
	// attempt cancelled by the pause.
	if sum != [5]int64{5, 1, 2, 0, 1} {
		t.Errorf("started, succeeded, failed, timed out, cancelled = %v", sum)
	}
	ff, err := s.st.FinalFailures(context.Background(), now.Add(-time.Hour), 10)
	if err != nil || len(ff) != 1 || ff[0].UID != "disabled" {
		t.Errorf("final failures: %+v %v", ff, err)
	}
}

// TestActivityCache checks that the chart's cache of settled minutes adds
// up to a full read of the hour, as time passes and attempts finish in
// old and new minutes.
func TestActivityCache(t *testing.T) {
	s := newSystem(t)
	ctx := context.Background()
	srv, err := New(Options{Store: s.st, Queue: s.q})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 5, 6, 7, 30, 20, 0, time.UTC)
	n := 0
	record := func(started, finished time.Time, outcome store.Outcome) {
		t.Helper()
		n++
		err := s.st.InTx(ctx, func(tx *store.Tx) error {
			return tx.RecordAttempts(ctx, []store.Attempt{{AttemptUID: "a" + strconv.Itoa(n), UID: "u", AttemptNo: 1,
				StartedAt: started, FinishedAt: finished, Outcome: outcome}})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string) {
		t.Helper()
		got, err := srv.activity(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.st.Activity(ctx, now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d minutes; want %d", step, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: minute %v: cached %+v; full read %+v", step, want[i].Minute, got[i], want[i])
			}
		}
	}
	record(now.Add(-70*time.Minute), now.Add(-65*time.Minute), store.OutcomeSuccess) // before the hour
	record(now.Add(-50*time.Minute), now.Add(-49*time.Minute), store.OutcomeFailure)
	record(now.Add(-12*time.Minute), now.Add(-10*time.Minute), store.OutcomeTimeout)
	record(now.Add(-2*time.Minute), now.Add(-time.Minute), store.OutcomeSuccess)
	record(now, now, store.OutcomeCancelled)
	check("first view")
	for step := range 8 {
		// An attempt that started long ago finishes now, one starts and ends now.
		record(now.Add(-40*time.Minute), now, store.OutcomeTimeout)
		record(now.Add(-10*time.Second), now, store.OutcomeSuccess)
		now = now.Add(time.Duration(step+1) * 90 * time.Second)
		check("after " + strconv.Itoa(step+1) + " steps")
	}
	now = now.Add(3 * time.Hour) // a long pause: the cache starts over
	check("after a pause")
}

// A record's page plans its refreshes as the scheduler does: with its
// policy's spread, the schedule's occurrences shifted by the record's own
// offset (refresh.Rules.ForRecord), not the bare schedule.
func TestRecordPagePlansWithTheSpread(t *testing.T) {
	s := newSystem(t)
	p, err := refresh.ParsePolicy([]byte(`{"timeout":"30m","spread":"50m"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(10 * time.Hour)
	if _, err := s.st.Add(context.Background(), "spread", store.Definition{InputURL: "https://example.com/s",
		Schedule: hourly, Policy: p.JSON()}, &later); err != nil {
		t.Fatal(err)
	}
	rules, err := refresh.NewRulesCache(1).Get(hourly, p.JSON())
	if err != nil {
		t.Fatal(err)
	}
	own := rules.ForRecord("spread")
	now := time.Now()
	if own.Next(now).Equal(rules.Next(now)) {
		t.Fatal("the record's offset is zero: pick another uid or spread")
	}
	_, body, _ := newClient(t, s.dashboard("").URL).get("/record?uid=spread")
	if want := "<li>" + clock(own.Next(now)); !strings.Contains(body, want) {
		t.Errorf("record page plans without the record's offset: no %q in\n%s", want, body)
	}
}
