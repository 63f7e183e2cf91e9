package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Health tracks the loops of a process for /healthz: a loop is alive while
// it has run a round (a tick, a poll) within its MaxSilence, whether that
// round succeeded or not (a database outage is /readyz's business, and
// restarting the process would not cure it).
type Health struct {
	now   func() time.Time
	mu    sync.Mutex
	loops map[string]*loop
}

type loop struct {
	maxSilence time.Duration
	last       time.Time // last round; zero: none yet
	lastErr    string
	registered time.Time
}

// NewHealth returns a Health on the clock now (nil: time.Now).
func NewHealth(now func() time.Time) *Health {
	if now == nil {
		now = time.Now
	}
	return &Health{now: now, loops: map[string]*loop{}}
}

// Loop registers a loop that must beat at least every maxSilence; until its
// first beat it counts from now.
func (h *Health) Loop(name string, maxSilence time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loops[name] = &loop{maxSilence: maxSilence, registered: h.now()}
}

// Beat records a round of the loop, with its error (nil: it succeeded).
// Beats of unregistered loops are ignored.
func (h *Health) Beat(name string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l, ok := h.loops[name]
	if !ok {
		return
	}
	l.last = h.now()
	l.lastErr = ""
	if err != nil {
		l.lastErr = err.Error()
	}
}

// LoopStatus is one loop in /healthz's body.
type LoopStatus struct {
	OK bool `json:"ok"`
	// LastRound is when the loop last ran a round (absent: never).
	LastRound *time.Time `json:"last_round,omitempty"`
	// LastError is the last round's error, if it failed.
	LastError string `json:"last_error,omitempty"`
	// Problem says what is wrong when not OK.
	Problem string `json:"problem,omitempty"`
}

// Report is /healthz's and /readyz's body.
type Report struct {
	OK     bool                  `json:"ok"`
	Checks map[string]LoopStatus `json:"checks"`
}

// Check reports every loop.
func (h *Health) Check() Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	r := Report{OK: true, Checks: map[string]LoopStatus{}}
	for name, l := range h.loops {
		s := LoopStatus{OK: true, LastError: l.lastErr}
		since := l.registered
		if !l.last.IsZero() {
			t := l.last.UTC()
			s.LastRound, since = &t, l.last
		}
		if silent := now.Sub(since); silent > l.maxSilence {
			s.OK, r.OK = false, false
			if l.last.IsZero() {
				s.Problem = fmt.Sprintf("no round completed in the %v since start (limit %v)", silent.Round(time.Millisecond), l.maxSilence)
			} else {
				s.Problem = fmt.Sprintf("last round %v ago (limit %v): the loop is stuck", silent.Round(time.Millisecond), l.maxSilence)
			}
		}
		r.Checks[name] = s
	}
	return r
}

// Probe is one readiness check: nil when the service answers.
type Probe struct {
	Name  string
	Check func(context.Context) error
}

// Handler serves /metrics, /healthz and /readyz. Readiness runs every
// probe with a timeout of 3 seconds each.
func (m *Metrics) Handler(probes []Probe) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeReport(w, m.Health.Check())
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rep := Report{OK: true, Checks: map[string]LoopStatus{}}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, p := range probes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
				defer cancel()
				err := p.Check(ctx)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					rep.OK = false
					rep.Checks[p.Name] = LoopStatus{Problem: err.Error()}
					return
				}
				rep.Checks[p.Name] = LoopStatus{OK: true}
			}()
		}
		wg.Wait()
		writeReport(w, rep)
	})
	return mux
}

func writeReport(w http.ResponseWriter, r Report) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !r.OK {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(r)
}

// Serve listens on addr and serves h until ctx is done. It returns once
// listening, with the address it listens on (addr may have port 0) and a
// function that stops the server and waits for it.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listen on %s for metrics: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-done
	}
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ln.Addr().String(), stop, nil
}
