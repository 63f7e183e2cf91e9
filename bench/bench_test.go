package bench

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestMisses(t *testing.T) {
	met := Result{SpeedupVsBaseline: 35, TwoEachCyclesPerSec: 40000, TwoEachExactlyOnce: true,
		TickCostRatio: 0.9, LargeTableRows: 1_000_000, PollerRSSRatio: 1.02, PollerBacklog: 1_000_000, PollerSmallBacklog: 50_000}
	for _, tc := range []struct {
		name   string
		change func(*Result)
		want   []string
	}{
		{"all met", func(*Result) {}, nil},
		{"nothing measured", func(r *Result) { *r = Result{} }, nil},
		{"slow", func(r *Result) { r.SpeedupVsBaseline = 12.34 }, []string{"speed-up over the row-at-a-time design 12.3x; target >= 20x"}},
		{"twice", func(r *Result) { r.TwoEachExactlyOnce = false }, []string{"two schedulers + two pollers did not start and apply each record exactly once"}},
		{"tick grows", func(r *Result) { r.TickCostRatio = 1.51 }, []string{"tick cost ratio 1.51 (1000000 vs 10,000 rows stored); target <= 1.5"}},
		{"memory grows", func(r *Result) { r.PollerRSSRatio = 3 }, []string{"poller peak RSS ratio 3.00 (backlog 1000000 vs 50000); target <= 1.5"}},
		// bench-short's sizes: the RSS ratio is noise there, not a miss.
		{"memory at a small size", func(r *Result) { r.PollerRSSRatio, r.PollerBacklog, r.PollerSmallBacklog = 3, 20_000, 1000 }, nil},
	} {
		r := met
		tc.change(&r)
		if got := r.Misses(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Misses() = %q; want %q", tc.name, got, tc.want)
		}
	}
}

// A target the run's sizes cannot judge is named as such, whatever the
// figure; at the sizes it is meant for, it is judged (TestMisses).
func TestNotJudged(t *testing.T) {
	small := Result{PollerRSSRatio: 1.1, PollerBacklog: 20_000, PollerSmallBacklog: 1000}
	want := []string{"poller peak RSS ratio (target <= 1.5): judged from --backlog 1000000; this run drained 20000"}
	if got := small.NotJudged(); !reflect.DeepEqual(got, want) {
		t.Errorf("NotJudged() = %q; want %q", got, want)
	}
	full := Result{PollerRSSRatio: 3, PollerBacklog: 1_000_000, PollerSmallBacklog: 50_000}
	if got := full.NotJudged(); got != nil {
		t.Errorf("full size: NotJudged() = %q; want none", got)
	}
	if got := (Result{}).NotJudged(); got != nil {
		t.Errorf("not measured: NotJudged() = %q; want none", got)
	}
}

// Off a terminal, each step is a line and the counters within it are left
// out; on a terminal each report replaces the last.
func TestProgress(t *testing.T) {
	var log bytes.Buffer
	p := &progress{w: &log}
	p.step("[%d/%d] %s...", 1, 2, "e2e")
	p.update("  e2e: %d/%d cycles", 10, 100)
	p.step("[%d/%d] %s...", 2, 2, "scale")
	p.end("done")
	if want := "[1/2] e2e...\n[2/2] scale...\ndone\n"; log.String() != want {
		t.Errorf("off a terminal: %q; want %q", log.String(), want)
	}

	var tty bytes.Buffer
	p = &progress{w: &tty, tty: true}
	p.step("[%d/%d] %s...", 1, 1, "e2e")
	p.update("  e2e: %d/%d cycles", 10, 100)
	p.end("done")
	if want := "\r\033[K[1/1] e2e...\r\033[K  e2e: 10/100 cycles\r\033[Kdone\n"; tty.String() != want {
		t.Errorf("on a terminal: %q; want %q", tty.String(), want)
	}
}

func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, x := range []io.Writer{w, f, &bytes.Buffer{}, &strings.Builder{}} {
		if isTerminal(x) {
			t.Errorf("isTerminal(%T) = true", x)
		}
	}
}
