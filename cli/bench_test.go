package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bigtables/bigtables/bench"
)

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 50000: "50,000", 100000: "100,000",
		1000000: "1,000,000", -1000: "-1,000", -100: "-100", -100000: "-100,000"} {
		if got := bench.Thousands(n); got != want {
			t.Errorf("bench.Thousands(%d) = %q; want %q", n, got, want)
		}
	}
}

// A missed target is printed; with --check it is also an error (exit 1).
func TestCheckTargets(t *testing.T) {
	slow := bench.Result{SpeedupVsBaseline: 12}
	for _, check := range []bool{false, true} {
		var stderr bytes.Buffer
		err := checkTargets(env{stderr: &stderr}, slow, check)
		if (err != nil) != check {
			t.Errorf("check %v: err %v", check, err)
		}
		if !strings.Contains(stderr.String(), "target missed: speed-up over the row-at-a-time design 12.0x; target >= 20x") {
			t.Errorf("check %v: stderr %q", check, stderr.String())
		}
	}
	var stderr bytes.Buffer
	if err := checkTargets(env{stderr: &stderr}, bench.Result{SpeedupVsBaseline: 30}, true); err != nil || stderr.Len() > 0 {
		t.Errorf("all met: err %v, stderr %q", err, stderr.String())
	}
}

// bench-short's sizes: a poller RSS ratio over the target is printed as not
// judged, not as a miss, and --check passes; at the full size it fails.
func TestCheckTargetsRSSJudgedOnlyAtFullSize(t *testing.T) {
	var stderr bytes.Buffer
	small := bench.Result{SpeedupVsBaseline: 30, PollerRSSRatio: 2.4, PollerBacklog: 20_000, PollerSmallBacklog: 1000}
	if err := checkTargets(env{stderr: &stderr}, small, true); err != nil {
		t.Errorf("small: --check failed: %v", err)
	}
	if s := stderr.String(); strings.Contains(s, "missed") || !strings.Contains(s, "target not judged at this size: poller peak RSS ratio") {
		t.Errorf("small: stderr %q; want the RSS target marked not judged, no miss", s)
	}
	stderr.Reset()
	full := bench.Result{SpeedupVsBaseline: 30, PollerRSSRatio: 2.4, PollerBacklog: 1_000_000, PollerSmallBacklog: 50_000}
	if err := checkTargets(env{stderr: &stderr}, full, true); err == nil || !strings.Contains(stderr.String(), "target missed: poller peak RSS ratio 2.40") {
		t.Errorf("full: err %v, stderr %q; want a miss and --check failing", err, stderr.String())
	}
}
