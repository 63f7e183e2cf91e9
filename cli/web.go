package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/bigtables/bigtables/metrics"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/web"
)

func runWeb(ctx context.Context, e env, args []string) error {
	var cfg Config
	var addr, token string
	fs := flagSet(e, "web", "web [--addr ADDR] [--admin-token TOKEN]", &cfg)
	fs.StringVar(&addr, "addr", e.get("BIGTABLES_WEB_ADDR", "127.0.0.1:8080"), "serve the dashboard on this address (env BIGTABLES_WEB_ADDR); it also serves /metrics, /healthz and /readyz")
	fs.StringVar(&token, "admin-token", e.getenv("BIGTABLES_ADMIN_TOKEN"), "enable actions for whoever signs in with this token (env BIGTABLES_ADMIN_TOKEN, which keeps it out of ps; default: read-only)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if token != "" && len(token) < 12 {
		return usagef("--admin-token: use at least 12 characters")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return usagef("--addr %q: expected host:port, e.g. 127.0.0.1:8080", addr)
	}
	log, err := cfg.startProcess(e)
	if err != nil {
		return err
	}
	return cfg.runProcess(ctx, e, log, true, func(st *store.Store, q *queue.Queue) error {
		src := metrics.Sources{Depths: q.Depths, DueLag: st.DueLag, Parked: st.CountParked, Upstreams: st.Upstreams, Logger: log,
			PollersAlive: func(ctx context.Context) (int, error) { return q.PollersAlive(ctx, time.Now()) }}
		m := metrics.New(src, metrics.NewHealth(nil))
		ops := m.Handler([]metrics.Probe{{Name: "postgres", Check: st.Ping}, {Name: "redis", Check: q.Ping}})
		srv, err := web.New(web.Options{Store: st, Queue: q, AdminToken: token, Logger: log, Ops: ops})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen on %s for the dashboard: %w", addr, err)
		}
		hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
		mode := "read-only (no --admin-token)"
		if token != "" {
			mode = "actions enabled for admins"
		}
		url := "http://" + ln.Addr().String() + "/"
		log.Info("serving the dashboard", "url", url, "mode", mode, "metrics", url+"metrics")
		if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() {
			log.Warn("the dashboard listens beyond this host: anyone who reaches it can read every record (put it behind a proxy with authentication)", "addr", ln.Addr().String())
		}
		done := make(chan error, 1)
		go func() { done <- hs.Serve(ln) }()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			return err
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
}
