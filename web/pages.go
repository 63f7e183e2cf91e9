package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// overviewData is the part of the overview read from PostgreSQL: cached
// for CacheTTL, so that a wall of dashboards costs the database one read
// every few seconds.
type overviewData struct {
	Now      time.Time
	Overview store.Overview
	Activity []store.MinuteCounts
	Failures []store.FinalFailure
	// Upstreams are the upstreams that have a row (store.Upstreams).
	Upstreams []store.UpstreamRow
}

// overviewData returns the cached counts, or reads them again.
func (s *Server) overviewData(r *http.Request) (*overviewData, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cached != nil && s.opt.Wall().Before(s.cachedUntil) {
		return s.cached, nil
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	now, err := s.opt.Store.Now(ctx)
	if err != nil {
		return nil, err
	}
	d := &overviewData{Now: now}
	if d.Overview, err = s.opt.Store.Overview(ctx); err != nil {
		return nil, err
	}
	if d.Activity, err = s.activity(ctx, now); err != nil {
		return nil, err
	}
	if d.Failures, err = s.opt.Store.FinalFailures(ctx, now.Add(-24*time.Hour), 10); err != nil {
		return nil, err
	}
	if d.Upstreams, err = s.opt.Store.Upstreams(ctx); err != nil {
		return nil, err
	}
	s.cached, s.cachedAt, s.cachedUntil = d, s.opt.Wall(), s.opt.Wall().Add(s.opt.CacheTTL)
	return d, nil
}

type phaseCount struct {
	Phase refresh.Phase
	Count int64
	Note  string
}

func phaseCounts(o store.Overview) []phaseCount {
	var out []phaseCount
	for _, p := range store.Phases {
		pc := phaseCount{Phase: p, Count: o.Phases[p]}
		if p == refresh.PhaseWaiting && !o.TotalExact {
			pc.Note = "estimated"
		}
		out = append(out, pc)
	}
	return out
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	d, err := s.overviewData(r)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	depths, err := s.opt.Queue.Depths(ctx)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	alive, err := s.opt.Queue.PollersAlive(ctx, s.opt.Wall())
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	var totals store.MinuteCounts
	for _, m := range d.Activity {
		totals.Started += m.Started
		totals.Succeeded += m.Succeeded
		totals.Failed += m.Failed
		totals.TimedOut += m.TimedOut
		totals.Cancelled += m.Cancelled
	}
	s.render(w, r, http.StatusOK, "overview", "Overview", map[string]any{
		"D": d, "Phases": phaseCounts(d.Overview), "Depths": depths, "Alive": alive, "Totals": totals,
		"Chart": activityChart(d.Activity), "Age": s.opt.Wall().Sub(s.cachedAt).Round(time.Second),
		"Breakers": breakerCounts(d.Upstreams), "Tripped": tripped(d.Upstreams, 10),
	})
}

// breakerCount is how many upstreams are in one breaker state.
type breakerCount struct {
	State upstream.BreakerState
	Count int
}

// breakerCounts counts the upstreams by breaker state, open first.
func breakerCounts(list []store.UpstreamRow) []breakerCount {
	out := []breakerCount{{State: upstream.Open}, {State: upstream.HalfOpen}, {State: upstream.Closed}}
	for _, u := range list {
		for i := range out {
			if out[i].State == u.State.Current() {
				out[i].Count++
			}
		}
	}
	return out
}

// tripped lists up to n upstreams whose breaker is not closed.
func tripped(list []store.UpstreamRow, n int) []upstreamView {
	var out []upstreamView
	for _, u := range list {
		if u.State.Current() != upstream.Closed && len(out) < n {
			out = append(out, viewUpstream(u))
		}
	}
	return out
}

// upstreamView is an upstream as the pages show it.
type upstreamView struct {
	Name       string
	Breaker    upstream.BreakerState
	Configured bool
	// FailuresInRow counts the failed attempts in a row; WindowFailures
	// estimates those of the failure-rate window.
	FailuresInRow, WindowFailures int
	InFlight                      int
	Parked                        int64
	NextProbe, ChangedAt          time.Time
	// Limits and Breaker policy, as sentences.
	Limits, Policy string
}

func viewUpstream(u store.UpstreamRow) upstreamView {
	c := u.Config
	var limits []string
	if c.MaxInFlight > 0 {
		limits = append(limits, fmt.Sprintf("at most %d in flight", c.MaxInFlight))
	}
	if c.Rate > 0 {
		limits = append(limits, fmt.Sprintf("%s starts/s (burst %s)", num(c.Rate), num(c.EffectiveBurst())))
	}
	if len(limits) == 0 {
		limits = append(limits, "none")
	}
	limits = append(limits, fmt.Sprintf("parked records released at %s/s", num(c.EffectiveReleaseRate())))
	b := c.Breaker
	var opens []string
	switch {
	case b.Consecutive == 1:
		opens = append(opens, "1 failure")
	case b.Consecutive > 1:
		opens = append(opens, fmt.Sprintf("%d failures in a row", b.Consecutive))
	}
	if b.FailureRate > 0 {
		opens = append(opens, fmt.Sprintf("%s%% of the attempts of %s (%d at least)", num(100*b.FailureRate), b.Window, b.MinVolume))
	}
	policy := "never opens"
	if len(opens) > 0 {
		policy = fmt.Sprintf("opens after %s; cool-down %s doubling up to %s; %d probes", strings.Join(opens, " or "),
			b.CoolDown, b.MaxCoolDown, b.Probes)
	}
	return upstreamView{Name: u.Name, Breaker: u.State.Current(), Configured: u.Configured, FailuresInRow: u.State.Failures,
		WindowFailures: u.WindowFailures, InFlight: u.InFlight, Parked: u.Parked, NextProbe: u.State.NextProbe,
		ChangedAt: u.State.ChangedAt, Limits: strings.Join(limits, ", "), Policy: policy}
}

// num prints a float without trailing zeros.
func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func (s *Server) upstreams(w http.ResponseWriter, r *http.Request) {
	d, err := s.overviewData(r)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	rows := make([]upstreamView, 0, len(d.Upstreams))
	for _, u := range d.Upstreams {
		rows = append(rows, viewUpstream(u))
	}
	s.render(w, r, http.StatusOK, "upstreams", "Upstreams", map[string]any{
		"Rows": rows, "Now": d.Now, "Breakers": breakerCounts(d.Upstreams), "Parked": d.Overview.Phases[refresh.PhaseParked],
		"Age": s.opt.Wall().Sub(s.cachedAt).Round(time.Second),
	})
}

func (s *Server) records(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	q := store.PageQuery{Prefix: qv.Get("prefix"), Phase: refresh.Phase(qv.Get("phase")), Sort: store.PageSort(qv.Get("sort")),
		AfterUID: qv.Get("after"), Limit: 50}
	if q.Sort == "" {
		q.Sort = store.SortNext
	}
	if v := qv.Get("after_at"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			s.fail(w, r, http.StatusBadRequest, "after_at "+strconv.Quote(v)+": expected an RFC 3339 time")
			return
		}
		q.AfterAt = t
	}
	if q.Phase != "" && !knownPhase(q.Phase) {
		s.fail(w, r, http.StatusBadRequest, "phase "+strconv.Quote(string(q.Phase))+": expected one of "+phaseList())
		return
	}
	if q.Sort != store.SortNext && q.Sort != store.SortUID {
		s.fail(w, r, http.StatusBadRequest, "sort "+strconv.Quote(string(q.Sort))+": expected next or uid")
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	rows, more, err := s.opt.Store.Page(ctx, q)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	d, err := s.overviewData(r)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	var next string
	if more {
		last := rows[len(rows)-1]
		v := url.Values{"after": {last.UID}, "sort": {string(q.Sort)}}
		if q.Prefix != "" {
			v.Set("prefix", q.Prefix)
		}
		if q.Phase != "" {
			v.Set("phase", string(q.Phase))
		}
		if q.Sort == store.SortNext && !last.RefreshAt.IsZero() {
			v.Set("after_at", last.RefreshAt.UTC().Format(time.RFC3339Nano))
		}
		next = "/records?" + v.Encode()
	}
	s.render(w, r, http.StatusOK, "records", "Records", map[string]any{
		"Q": q, "Rows": rows, "Next": next, "Phases": phaseCounts(d.Overview), "Now": d.Now, "First": q.AfterUID == "",
	})
}

func knownPhase(p refresh.Phase) bool {
	for _, k := range store.Phases {
		if k == p {
			return true
		}
	}
	return false
}

func phaseList() string {
	var names []string
	for _, p := range store.Phases {
		names = append(names, string(p))
	}
	return strings.Join(names, ", ")
}

func (s *Server) record(w http.ResponseWriter, r *http.Request) {
	uid := r.URL.Query().Get("uid")
	ctx, cancel := s.ctx(r)
	defer cancel()
	row, err := s.opt.Store.Get(ctx, uid)
	if errors.Is(err, store.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, "No record has the uid "+strconv.Quote(uid)+".")
		return
	}
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	now, err := s.opt.Store.Now(ctx)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	history, err := s.opt.Store.History(ctx, uid, 30)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	data := map[string]any{"Row": row, "Phase": row.Phase(), "History": history, "Now": now,
		"Gantt": gantt(history, row.State, now), "PolicyJSON": string(row.Policy)}
	rules, err := s.rules.Get(row.Schedule, row.Policy)
	if err != nil {
		data["RulesErr"] = err.Error()
	} else {
		rules = rules.ForRecord(row.UID) // its spread offset, as the scheduler plans
		rule := row.Schedule
		if _, after, ok := strings.Cut(rule, "\n"); ok {
			rule = after
		}
		data["Explain"] = refresh.Explain(rule, rules.Policy)
		data["Planned"] = planned(rules, now, 5)
		data["Next"] = whatNext(rules, row.State, now)
	}
	s.render(w, r, http.StatusOK, "record", row.UID, data)
}

// deadRow is one dead letter as the page shows it.
type deadRow struct {
	Index  int64
	Digest string
	Reason string
	DeadAt time.Time
	Raw    string
	// Envelope is false for an entry that is not a dead-letter envelope.
	Envelope bool
}

func (s *Server) dead(w http.ResponseWriter, r *http.Request) {
	start, err := strconv.ParseInt(r.URL.Query().Get("start"), 10, 64)
	if r.URL.Query().Get("start") == "" {
		start, err = 0, nil
	}
	if err != nil || start < 0 {
		s.fail(w, r, http.StatusBadRequest, "start: expected a position, 0 or more")
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	depths, err := s.opt.Queue.Depths(ctx)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	const per = 50
	list, err := s.opt.Queue.DeadLetters(ctx, start, per)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	rows := make([]deadRow, 0, len(list))
	for i, v := range list {
		d := deadRow{Index: start + int64(i), Digest: queue.DeadLetterDigest(v), Raw: v}
		var dl protocol.DeadLetter
		if json.Unmarshal([]byte(v), &dl) == nil && dl.Raw != "" {
			d.Reason, d.DeadAt, d.Raw, d.Envelope = dl.Reason, dl.DeadAt, dl.Raw, true
		} else {
			d.Reason = "(not a dead-letter envelope)"
		}
		rows = append(rows, d)
	}
	data := map[string]any{"Rows": rows, "Total": depths.Dead, "Start": start, "Output": s.opt.Queue.Names().Output}
	if start+per < depths.Dead {
		data["Next"] = "/dead?start=" + strconv.FormatInt(start+per, 10)
	}
	if start > 0 {
		data["Prev"] = "/dead?start=" + strconv.FormatInt(max(start-per, 0), 10)
	}
	s.render(w, r, http.StatusOK, "dead", "Dead letters", data)
}

// action runs one operator action: POST only, admin only, CSRF-checked,
// logged with who did what and how it ended.
func (s *Server) action(w http.ResponseWriter, r *http.Request) {
	act := r.PathValue("action")
	se := s.session(nil, r)
	if s.opt.AdminToken == "" {
		s.fail(w, r, http.StatusForbidden, "The dashboard is read-only: start it with --admin-token (or BIGTABLES_ADMIN_TOKEN) to enable actions.")
		return
	}
	if err := s.checkPost(r, se); err != nil {
		s.opt.Logger.Warn("dashboard action refused", "action", act, "remote", r.RemoteAddr, "err", err)
		s.fail(w, r, http.StatusForbidden, err.Error())
		return
	}
	if se.who == "" {
		s.fail(w, r, http.StatusForbidden, "Sign in with the admin token first.")
		return
	}
	uid := r.PostFormValue("uid")
	ctx, cancel := s.ctx(r)
	defer cancel()
	back := "/record?uid=" + url.QueryEscape(uid) + "&done=" + act
	var cancelled *store.Cancelled
	var err error
	var what string
	switch act {
	case "run":
		what = "refresh now " + uid
		_, err = s.opt.Store.RunNow(ctx, uid)
	case "reenable":
		what = "re-enable " + uid
		_, cancelled, err = s.opt.Store.Update(ctx, uid, func(*store.Definition) error { return nil }, nil)
	case "pause":
		what = "pause " + uid
		_, cancelled, err = s.opt.Store.Pause(ctx, uid)
	case "resume":
		what = "resume " + uid
		_, err = s.opt.Store.Resume(ctx, uid)
	case "delete":
		what = "delete " + uid
		cancelled, err = s.opt.Store.Delete(ctx, uid)
		back = "/records?done=delete"
	case "requeue", "dropdead":
		index, perr := strconv.ParseInt(r.PostFormValue("index"), 10, 64)
		digest := r.PostFormValue("digest")
		if perr != nil || digest == "" {
			s.fail(w, r, http.StatusBadRequest, "index and digest of the dead letter are required")
			return
		}
		what = act + " dead letter " + strconv.FormatInt(index, 10) + " (" + digest + ")"
		if act == "requeue" {
			err = s.opt.Queue.RequeueOne(ctx, index, digest)
		} else {
			err = s.opt.Queue.DeleteOne(ctx, index, digest)
		}
		back = "/dead?done=" + act
	case "requeued", "purged":
		n, perr := strconv.ParseInt(r.PostFormValue("count"), 10, 64)
		if perr != nil || n <= 0 {
			s.fail(w, r, http.StatusBadRequest, "count: expected how many dead letters, oldest first")
			return
		}
		var done int64
		if act == "requeued" {
			done, err = s.opt.Queue.Requeue(ctx, n)
		} else {
			done, err = s.opt.Queue.Purge(ctx, n)
		}
		what = act + " " + strconv.FormatInt(done, 10) + " of " + strconv.FormatInt(n, 10) + " dead letters"
		back = "/dead?done=" + act
	default:
		s.fail(w, r, http.StatusNotFound, "No action "+strconv.Quote(act)+".")
		return
	}
	log := s.opt.Logger.With("who", se.who, "remote", r.RemoteAddr, "action", act, "what", what)
	if err != nil {
		log.Warn("dashboard action failed", "err", err)
		status := http.StatusConflict
		if errors.Is(err, store.ErrNotFound) {
			status = http.StatusNotFound
		}
		s.fail(w, r, status, err.Error())
		return
	}
	if cancelled != nil {
		// Tell the worker to stop: best effort, its results are stale anyway.
		if cerr := s.opt.Queue.Cancel(ctx, map[string]time.Time{cancelled.AttemptUID: cancelled.DeadlineAt}); cerr != nil {
			log.Warn("dashboard action: could not tell the worker of the cancelled attempt", "attempt_uid", cancelled.AttemptUID, "err", cerr)
		}
		log = log.With("cancelled_attempt", cancelled.AttemptUID)
	}
	log.Info("dashboard action")
	s.invalidate()
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// invalidate drops the cached overview after an action, so the next page
// shows its effect.
func (s *Server) invalidate() {
	s.mu.Lock()
	s.cached = nil
	s.mu.Unlock()
}

// recordURL is the record page of uid.
func recordURL(uid string) template.URL {
	return template.URL("/record?uid=" + url.QueryEscape(uid))
}
