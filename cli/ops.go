package cli

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/bigtables/bigtables/metrics"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/store"
)

// httpFlag registers --http on a long-running command.
func httpFlag(e env, fs *flag.FlagSet, addr *string) {
	fs.StringVar(addr, "http", e.getenv("BIGTABLES_HTTP"),
		"serve /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:9100 (env BIGTABLES_HTTP; default off)")
}

// loopSilence is how long a loop may go without a round before /healthz
// reports it stuck: longer than a tick's or a batch's time limit (2
// minutes) plus the largest pause after errors (30 seconds).
const loopSilence = 3 * time.Minute

// serveOps starts the --http server of a long-running command, if addr is
// set: metrics with the gauges st and q can read (st may be nil), health
// of the loops named, readiness of PostgreSQL (when st) and Redis. It
// returns the metrics (nil when off) and a function that stops the server.
func serveOps(ctx context.Context, addr string, log *slog.Logger, st *store.Store, q *queue.Queue, loops ...string) (*metrics.Metrics, func(), error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	health := metrics.NewHealth(nil)
	for _, l := range loops {
		health.Loop(l, loopSilence)
	}
	src := metrics.Sources{Depths: q.Depths, Logger: log,
		PollersAlive: func(ctx context.Context) (int, error) { return q.PollersAlive(ctx, time.Now()) }}
	probes := []metrics.Probe{{Name: "redis", Check: q.Ping}}
	if st != nil {
		src.DueLag, src.Parked, src.Upstreams = st.DueLag, st.CountParked, st.Upstreams
		probes = append(probes, metrics.Probe{Name: "postgres", Check: st.Ping})
	}
	m := metrics.New(src, health)
	bound, stop, err := metrics.Serve(ctx, addr, m.Handler(probes), log)
	if err != nil {
		return nil, nil, err
	}
	log.Info("serving metrics and health", "metrics", "http://"+bound+"/metrics",
		"healthz", "http://"+bound+"/healthz", "readyz", "http://"+bound+"/readyz")
	return m, stop, nil
}
