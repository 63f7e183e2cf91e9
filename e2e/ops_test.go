package e2e_test

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var metricsURL = regexp.MustCompile(`metrics=(http://127\.0\.0\.1:\d+)/metrics`)

// base waits for the process's log line naming its metrics URL.
func (s *system) base(p *proc) string {
	s.t.Helper()
	var url string
	s.waitFor(p.name+" metrics URL", 20*time.Second, func() bool {
		m := metricsURL.FindStringSubmatch(p.out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	return url
}

func scrape(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// value returns a sample's value in a /metrics body, -1 when absent.
func value(body, series string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// TestProcessesServeMetricsAndHealth runs the three processes with --http
// on free ports and scrapes them while a record is refreshed.
func TestProcessesServeMetricsAndHealth(t *testing.T) {
	s := newSystem(t)
	sched := s.start("scheduler", "--http", "127.0.0.1:0", "--interval", "100ms")
	poll := s.start("poller", "--http", "127.0.0.1:0")
	work := s.start("worker", "--http", "127.0.0.1:0", "--exec", "true")
	sb, pb, wb := s.base(sched), s.base(poll), s.base(work)

	if out, code := s.run("add", "--uid", "m1", "--input-url", "https://example.com/m1"); code != 0 {
		t.Fatalf("add: %d %s", code, out)
	}
	s.waitFor("the scheduler's started counter", 20*time.Second, func() bool {
		_, body := scrape(t, sb+"/metrics")
		return value(body, "bigtables_attempts_started_total") >= 1
	})
	s.waitFor("the poller's applied success", 20*time.Second, func() bool {
		_, body := scrape(t, pb+"/metrics")
		return value(body, `bigtables_results_total{outcome="applied",type="success"}`) >= 1
	})
	_, body := scrape(t, sb+"/metrics")
	for _, series := range []string{`bigtables_queue_length{queue="input"}`, `bigtables_queue_length{queue="dead"}`,
		"bigtables_due_lag_seconds", "bigtables_tick_duration_seconds_count", "go_goroutines", "process_cpu_seconds_total"} {
		if value(body, series) < 0 {
			t.Errorf("scheduler /metrics lacks %s", series)
		}
	}
	if v := value(body, "bigtables_pollers_alive"); v != 1 {
		t.Errorf("bigtables_pollers_alive = %v; want 1", v)
	}
	_, body = scrape(t, wb+"/metrics")
	if value(body, `bigtables_worker_jobs_total{outcome="pushed"}`) < 1 {
		t.Errorf("worker /metrics: no pushed job:\n%s", body)
	}
	for _, base := range []string{sb, pb, wb} {
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, body := scrape(t, base+path); code != 200 || !strings.Contains(body, `"ok": true`) {
				t.Errorf("%s%s: %d %s", base, path, code, body)
			}
		}
	}
	for _, p := range []*proc{work, poll, sched} {
		p.stop(t)
	}
}
