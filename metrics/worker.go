package metrics

import (
	"sync/atomic"

	"github.com/bigtables/bigtables/worker"
	"github.com/prometheus/client_golang/prometheus"
)

// ObserveWorker exports the worker's job counters as
// bigtables_worker_jobs_total{outcome}, read at scrape time.
func (m *Metrics) ObserveWorker(s *worker.Stats) {
	for _, c := range []struct {
		outcome string
		v       *atomic.Int64
	}{
		{"pushed", &s.Pushed}, {"expired", &s.Expired}, {"cancelled", &s.Cancelled}, {"superseded", &s.Superseded},
		{"stopped", &s.Stopped}, {"timed_out", &s.TimedOut}, {"lost", &s.Lost}, {"duplicate", &s.Duplicates}, {"malformed", &s.Malformed},
	} {
		m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "bigtables_worker_jobs_total", Help: "Jobs this worker handled, by what became of them.",
			ConstLabels: prometheus.Labels{"outcome": c.outcome},
		}, func() float64 { return float64(c.v.Load()) }))
	}
}
