package bench

import (
	"encoding/xml"
	"strings"
	"testing"
	"time"
)

// Each burst set holds one record in k, and the others fall due hours
// after both bursts, so the two bursts and the tick test never overlap.
func TestScaleSpec(t *testing.T) {
	a := time.Date(2024, 3, 4, 5, 0, 0, 0, time.UTC)
	s := newScaleSpec(100_000, 10_000, a)
	if s.k != 10 {
		t.Fatalf("k = %d; want 10", s.k)
	}
	if got := s.count(100_000, slotBurstA); got != 10_000 {
		t.Errorf("burst A holds %d records; want 10,000", got)
	}
	if got := s.count(100_000, slotBurstB); got != 10_000 {
		t.Errorf("burst B holds %d records; want 10,000", got)
	}
	if !s.at[slotBurstA-1].Equal(a) || !s.at[slotBurstB-1].Equal(a.Add(6*time.Hour)) {
		t.Errorf("burst times %v, %v", s.at[0], s.at[1])
	}
	for i := 1; i <= 1000; i++ {
		sl := s.slot(i)
		if sl > slotBurstB && s.at[sl-1].Before(a.Add(8*time.Hour)) {
			t.Fatalf("record %d (slot %d) falls due at %v, before the second burst is over", i, sl, s.at[sl-1])
		}
	}
	if want := "DTSTART:20240304T050000Z\nRRULE:FREQ=DAILY"; s.schedules[0] != want {
		t.Errorf("schedule %q; want %q", s.schedules[0], want)
	}
}

func TestScaleConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  ScaleConfig
		want string
	}{
		{ScaleConfig{}, ""},
		{ScaleConfig{Stored: 60_000, Burst: 10_000}, ""},
		{ScaleConfig{Stored: 20_000, Burst: 1000}, "stored 20000: at least 30,000"},
		{ScaleConfig{Stored: 100_000, Burst: 40_000}, "at most a third of stored"},
		{ScaleConfig{Stored: 100_000_000}, "at most 99,999,999"},
		{ScaleConfig{Partitions: -1}, "partitions -1"},
		{ScaleConfig{Load: "fast"}, `load "fast": auto, copy or generate`},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v; want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestSoakConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  SoakConfig
		want string
	}{
		{SoakConfig{}, ""},
		{SoakConfig{Duration: 5 * time.Minute, Step: 30 * time.Second, TableOptions: "fillfactor=70,autovacuum_vacuum_scale_factor=0.02"}, ""},
		{SoakConfig{Step: time.Second}, "step 1s"},
		{SoakConfig{Duration: time.Minute, Step: 2 * time.Minute}, "step 2m0s"},
		{SoakConfig{Rate: 400_000}, "at most 20,000,000 records"},
		{SoakConfig{Period: 61}, "period 61"},
		{SoakConfig{TableOptions: "fillfactor=70); DROP TABLE bigtables; --"}, "name=value pairs"},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v; want %q", tc.cfg, err, tc.want)
		}
	}
}

// The drift compares the mean of the first and last five minutes, or of
// a third of the run when it is shorter.
func TestSoakDrift(t *testing.T) {
	rates := func(v ...float64) []SoakSample {
		s := make([]SoakSample, len(v))
		for i, x := range v {
			s[i] = SoakSample{Minute: float64(i + 1), CyclesPerSec: x}
		}
		return s
	}
	r := SoakResult{Samples: rates(100, 100, 100, 100, 100, 50, 50, 90, 90, 90, 90, 90)}
	r.summarize(time.Minute)
	if r.Window != 4 || r.FirstRate != 100 || r.LastRate != 90 || r.Drift < 0.0999 || r.Drift > 0.1001 {
		t.Errorf("12 one-minute samples: window %d, first %.1f, last %.1f, drift %.3f; want 4, 100, 90, 0.1", r.Window, r.FirstRate, r.LastRate, r.Drift)
	}
	r = SoakResult{Samples: rates(make([]float64, 30)...)}
	for i := range r.Samples {
		r.Samples[i].CyclesPerSec = 100
	}
	r.Samples[29].CyclesPerSec = 160
	r.summarize(time.Minute)
	if r.Window != 5 || r.LastRate != 112 || r.Drift < 0.119 || r.Drift > 0.121 {
		t.Errorf("30 one-minute samples: window %d, last %.1f, drift %.3f; want 5, 112, 0.12", r.Window, r.LastRate, r.Drift)
	}
	r = SoakResult{Samples: rates(100, 80)}
	r.summarize(30 * time.Second)
	if r.Window != 1 || r.Drift < 0.199 || r.Drift > 0.201 {
		t.Errorf("2 samples: window %d, drift %.3f; want 1, 0.2", r.Window, r.Drift)
	}
}

// The plot is well-formed SVG with one line per series and escaped text.
func TestPlotSVG(t *testing.T) {
	x := []float64{1, 2, 3}
	svg := plotSVG("a <title> & more", x, []panel{
		{"rate", []series{{"cycles/s", "#000", []float64{10, 20, 15}}}},
		{"p99", []series{{"a", "#111", []float64{1, 2, 3}}, {"b", "#222", []float64{0, 0, 0}}}},
	})
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("not well-formed XML: %v", err)
	}
	if n := strings.Count(svg, "<polyline"); n != 3 {
		t.Errorf("%d polylines; want 3", n)
	}
	if !strings.Contains(svg, "a &lt;title&gt; &amp; more") {
		t.Error("title not escaped")
	}
	if strings.Contains(svg, "NaN") || strings.Contains(svg, "Inf") {
		t.Error("a coordinate is not a number (an all-zero series must not divide by zero)")
	}
}

func TestNiceCeilShortNum(t *testing.T) {
	for v, want := range map[float64]float64{0: 1, -3: 1, 0.7: 1, 1: 1, 1.2: 2, 3: 5, 7: 10, 4200: 5000, 19999: 20000} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v; want %v", v, got, want)
		}
	}
	for v, want := range map[float64]string{0: "0", 0.5: "0.5", 250: "250", 1000: "1k", 1250: "1.25k", 3750: "3.75k", 2.5e6: "2.5M", 0.25: "0.25"} {
		if got := shortNum(v); got != want {
			t.Errorf("shortNum(%v) = %q; want %q", v, got, want)
		}
	}
}
