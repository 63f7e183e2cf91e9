// Package web is bigtables' dashboard: server-rendered pages (html/template
// and embedded files, no build step) that show the records by phase, the
// queues, the attempts of the last hour, each record's policy, plan and
// history, and the dead letters, and the few actions an operator takes
// (refresh now, re-enable, pause, resume, delete, requeue). Pages read
// without JavaScript; a small script only reloads them on a timer.
//
// Access: reading needs nothing (bind to a trusted address; the default
// is 127.0.0.1). Actions exist only when an admin token is configured:
// a person signs in with it, and every action is a POST carrying a
// per-session CSRF token (an HMAC of the session id under a key drawn at
// start), checked against the session cookie, and is logged with who did
// what.
package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure a dashboard.
type Options struct {
	Store *store.Store
	Queue *queue.Queue
	// AdminToken enables the actions for whoever signs in with it; empty
	// makes the dashboard read-only.
	AdminToken string
	Logger     *slog.Logger
	// Ops, when set, serves /metrics, /healthz and /readyz.
	Ops http.Handler
	// CacheTTL is how long the overview's counts and chart are reused
	// between page views (default 5 seconds).
	CacheTTL time.Duration
	// Wall is the wall clock, for the pollers' leases (default time.Now);
	// everything else uses the database's clock (Store.Now).
	Wall func() time.Time
}

// Server is a dashboard.
type Server struct {
	opt   Options
	key   []byte // signs sessions and CSRF tokens; drawn at start
	pages map[string]*template.Template
	rules *refresh.RulesCache

	mu     sync.Mutex
	cached *overviewData
	cachedAt,
	cachedUntil time.Time

	actMu sync.Mutex
	act   activityCache
}

// New returns a dashboard.
func New(opt Options) (*Server, error) {
	if opt.Store == nil || opt.Queue == nil {
		return nil, fmt.Errorf("dashboard: a store and a queue are required")
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.CacheTTL <= 0 {
		opt.CacheTTL = 5 * time.Second
	}
	if opt.Wall == nil {
		opt.Wall = time.Now
	}
	s := &Server{opt: opt, key: make([]byte, 32), pages: map[string]*template.Template{}, rules: refresh.NewRulesCache(1000)}
	if _, err := rand.Read(s.key); err != nil {
		return nil, fmt.Errorf("dashboard: draw session key: %w", err)
	}
	for _, name := range []string{"overview", "records", "record", "upstreams", "dead", "message", "login"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: parse template %s: %w", name, err)
		}
		s.pages[name] = t
	}
	return s, nil
}

// Handler returns the dashboard's routes behind its security headers.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.overview)
	mux.HandleFunc("GET /records", s.records)
	mux.HandleFunc("GET /record", s.record)
	mux.HandleFunc("GET /upstreams", s.upstreams)
	mux.HandleFunc("GET /dead", s.dead)
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	mux.HandleFunc("POST /actions/{action}", s.action)
	if s.opt.Ops != nil {
		for _, p := range []string{"GET /metrics", "GET /healthz", "GET /readyz"} {
			mux.Handle(p, s.opt.Ops)
		}
	}
	return secureHeaders(mux)
}

// secureHeaders sets the headers every answer carries: no framing, no
// sniffing, no referrer leaving the site, and a content security policy
// that allows only this origin's scripts and styles (no inline code).
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// Cookies of a browser session.
const (
	sessionCookie = "bt_session"
	adminCookie   = "bt_admin"
)

// session is what the request's cookies prove.
type session struct {
	id   string // "" until the first page sets it
	csrf string
	who  string // "" unless signed in as an admin
}

func (s *Server) mac(parts ...string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(m.Sum(nil))
}

var sessionIDRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// whoRE is what a person may call themselves when signing in: it goes into
// logs and a cookie, so it stays plain.
var whoRE = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,40}$`)

// session reads the request's session, or starts one (setting its cookie
// on w) when it has none.
func (s *Server) session(w http.ResponseWriter, r *http.Request) session {
	var se session
	if c, err := r.Cookie(sessionCookie); err == nil && sessionIDRE.MatchString(c.Value) {
		se.id = c.Value
	} else if w != nil {
		b := make([]byte, 16)
		rand.Read(b)
		se.id = hex.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: se.id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	}
	if se.id == "" {
		return se
	}
	se.csrf = s.mac("csrf", se.id)
	if c, err := r.Cookie(adminCookie); err == nil && s.opt.AdminToken != "" {
		who, sig, ok := strings.Cut(c.Value, ".")
		if ok && whoRE.MatchString(who) && hmac.Equal([]byte(sig), []byte(s.mac("admin", se.id, who))) {
			se.who = who
		}
	}
	return se
}

// checkPost refuses a POST that is not from this site's own form: an
// Origin header naming another site, or a CSRF token that is not the
// session's.
func (s *Server) checkPost(r *http.Request, se session) error {
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return fmt.Errorf("cross-origin request from %q refused", o)
		}
	}
	if se.id == "" {
		return fmt.Errorf("no session cookie: load a page of the dashboard first")
	}
	got := r.PostFormValue("csrf")
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(se.csrf)) != 1 {
		return fmt.Errorf("CSRF token missing or wrong: reload the page and try again")
	}
	return nil
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "login", "Sign in", nil)
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	se := s.session(nil, r)
	if s.opt.AdminToken == "" {
		s.fail(w, r, http.StatusForbidden, "The dashboard is read-only: start it with --admin-token (or BIGTABLES_ADMIN_TOKEN) to enable actions.")
		return
	}
	if err := s.checkPost(r, se); err != nil {
		s.fail(w, r, http.StatusForbidden, err.Error())
		return
	}
	who := r.PostFormValue("who")
	if who == "" {
		who = "admin"
	}
	if !whoRE.MatchString(who) {
		s.fail(w, r, http.StatusBadRequest, "Name: 1 to 40 letters, digits or . _ @ -")
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("token")), []byte(s.opt.AdminToken)) != 1 {
		s.opt.Logger.Warn("dashboard sign-in refused: wrong token", "who", who, "remote", r.RemoteAddr)
		s.fail(w, r, http.StatusForbidden, "Wrong admin token.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: adminCookie, Value: who + "." + s.mac("admin", se.id, who), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	s.opt.Logger.Info("dashboard sign-in", "who", who, "remote", r.RemoteAddr)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	se := s.session(nil, r)
	if err := s.checkPost(r, se); err != nil {
		s.fail(w, r, http.StatusForbidden, err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{Name: adminCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// page is what every template gets.
type page struct {
	Title    string
	Nav      string
	CSRF     string
	Who      string
	CanAdmin bool // an admin token is configured
	Admin    bool // signed in as an admin
	Notice   string
	Data     any
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	se := s.session(w, r)
	p := page{Title: title, Nav: name, CSRF: se.csrf, Who: se.who, CanAdmin: s.opt.AdminToken != "", Admin: se.who != "", Data: data,
		Notice: notices[r.URL.Query().Get("done")]}
	var b strings.Builder
	if err := s.pages[name].Execute(&b, p); err != nil {
		s.opt.Logger.Error("dashboard: render page", "page", name, "err", err)
		http.Error(w, "cannot render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprint(w, b.String())
}

// fail answers with a page saying what went wrong (escaped like every value).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s.render(w, r, status, "message", http.StatusText(status), msg)
}

// notices are the messages an action's redirect may show (?done=...):
// fixed texts, so a link cannot make the dashboard say anything else.
var notices = map[string]string{
	"run":      "The record is due now: a scheduler starts it on its next tick.",
	"reenable": "The record is enabled again, its attempt count reset, and due now.",
	"pause":    "The record is paused: nothing starts until it is resumed.",
	"resume":   "The record is resumed.",
	"delete":   "The record and its history are deleted.",
	"requeue":  "The dead letter is back on the output list: a poller applies it again.",
	"dropdead": "The dead letter is deleted.",
	"requeued": "The dead letters are back on the output list.",
	"purged":   "The dead letters are deleted.",
}

// ctxTimeout bounds each page's and action's work.
const ctxTimeout = 10 * time.Second

func (s *Server) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), ctxTimeout)
}
