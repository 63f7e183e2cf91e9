package refresh

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"90s", 90 * time.Second},
		{"1h30m", 90 * time.Minute},
		{"PT5M", 5 * time.Minute},
		{"pt1h", time.Hour},
		{"P1D", 24 * time.Hour},
		{"P1W", 7 * 24 * time.Hour},
		{"P1DT2H30M15S", 26*time.Hour + 30*time.Minute + 15*time.Second},
		{"PT0.5S", 500 * time.Millisecond},
		{"1 minute", time.Minute},
		{"5 minute", 5 * time.Minute},
		{"10 minutes", 10 * time.Minute},
		{"2 hours", 2 * time.Hour},
		{"1 hour 30 minutes", 90 * time.Minute},
		{"1 hour and 30 minutes", 90 * time.Minute},
		{"1 week", 7 * 24 * time.Hour},
		{"  3 days ", 72 * time.Hour},
		{"30 sec", 30 * time.Second},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	bad := []struct{ in, want string }{
		{"", "empty duration"},
		{"-5m", "negative"},
		{"5 fortnights", "expected a Go duration"},
		{"P1Y", "years and months"},
		{"P1M", "years and months"},
		{"PT", "ISO 8601"},
		{"P", "ISO 8601"},
		{"11 years", "expected a Go duration"},
		{"600 weeks", `duration "600 weeks" is too long: expected from 0s to 10 years`},
		{"100000h", `duration "100000h" is too long: expected from 0s to 10 years`},
		{"100000000000h", "too long"},
		{"P10000000000W", "too long"},
		{"--5m", "expected a Go duration"},
		{"minutes", "expected a Go duration"},
	}
	for _, tt := range bad {
		if _, err := ParseDuration(tt.in); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseDuration(%q) error = %v; want it to contain %q", tt.in, err, tt.want)
		}
	}
}

// Each range states its rule the same way in every error; the policy's
// Validate states the same rules.
func TestRangesStateOneRule(t *testing.T) {
	for _, tt := range []struct {
		r    Range
		in   string
		want string
	}{
		{TimeoutRange, "-5m", `duration "-5m" is negative: expected from 1s to 7 days`},
		{TimeoutRange, "0", `duration "0" is too short: expected from 1s to 7 days`},
		{TimeoutRange, "100000h", `duration "100000h" is too long: expected from 1s to 7 days`},
		{TimeoutRange, "", "empty duration: expected e.g. 90s, 5m, PT5M or \"5 minutes\", from 1s to 7 days"},
		{DelayRange, "-1 minute", `duration "-1 minute" is negative: expected from 0s to 365 days`},
		{GiveUpRange, "600 weeks", `duration "600 weeks" is too long: expected from 0s (never) to 10 years`},
	} {
		if _, err := tt.r.Parse(tt.in); err == nil || err.Error() != tt.want {
			t.Errorf("%v.Parse(%q) = %v; want %s", tt.r, tt.in, err, tt.want)
		}
	}
	if d, err := TimeoutRange.Parse("7 days"); err != nil || d != MaxTimeout {
		t.Errorf("TimeoutRange.Parse(7 days) = %v, %v", d, err)
	}
	p := DefaultPolicy()
	p.Timeout = 0
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "timeout 0s: expected "+TimeoutRange.String()) {
		t.Errorf("Validate: %v", err)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", time.Hour: "1h", 90 * time.Minute: "1h30m", 90 * time.Second: "1m30s", 5 * time.Minute: "5m", time.Hour + time.Second: "1h0m1s"} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q; want %q", d, got, want)
		}
		back, err := ParseDuration(FormatDuration(d))
		if err != nil || back != d {
			t.Errorf("round trip of %v = %v, %v", d, back, err)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"timeout":"PT10M","retries":["0","1 minute"],"align":false}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Timeout != Duration(10*time.Minute) || len(p.Retries) != 2 || p.Align || p.OnExhausted != Disable {
		t.Errorf("ParsePolicy = %+v", p)
	}
	if got := string(p.JSON()); got != `{"timeout":"10m","align":false,"on_exhausted":"disable","retries":["0s","1m"]}` {
		t.Errorf("JSON = %s", got)
	}
	// Missing fields come from the base.
	def := DefaultPolicy()
	q, err := ParsePolicy([]byte(`{"on_exhausted":"wait_next","give_up_after":"1 week"}`), &def)
	if err != nil || len(q.Retries) != 6 || !q.Align || q.GiveUpAfter != Duration(168*time.Hour) {
		t.Errorf("ParsePolicy on default = %+v, %v", q, err)
	}
	bad := []struct{ in, want string }{
		{`{"timeout":"0s"}`, `timeout: duration "0s" is too short: expected from 1s to 7 days`},
		{`{"timeout":"8 days"}`, `timeout: duration "8 days" is too long: expected from 1s to 7 days`},
		{`{"timeout":"-5m"}`, `timeout: duration "-5m" is negative: expected from 1s to 7 days`},
		{`{"timeout":"100000h"}`, `timeout: duration "100000h" is too long: expected from 1s to 7 days`},
		{`{"give_up_after":"P100000W"}`, `give_up_after: duration "P100000W" is too long: expected from 0s (never) to 10 years`},
		{`{"timeout":60}`, `expected a string such as "5m"`},
		{`{"retries":["1m","-1m"]}`, "negative"},
		{`{"retries":["1m","400 days"]}`, `retries[1]: duration "400 days" is too long: expected from 0s to 365 days`},
		{`{"on_exhausted":"panic"}`, `on_exhausted "panic": expected "disable" or "wait_next"`},
		{`{"colour":"red"}`, `unknown field "colour"`},
		{`{"align":"yes"}`, "align"},
		{`{} {}`, "trailing data"},
		{`not json`, "invalid"},
	}
	for _, tt := range bad {
		_, err := ParsePolicy([]byte(tt.in), nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("ParsePolicy(%s) error = %v; want ErrInvalidPolicy containing %q", tt.in, err, tt.want)
		}
	}
}

func TestParseDelays(t *testing.T) {
	got, err := ParseDelays("0, 1 minute, PT5M,15m")
	if err != nil || len(got) != 4 || got[1] != Duration(time.Minute) || got[2] != Duration(5*time.Minute) {
		t.Errorf("ParseDelays = %v, %v", got, err)
	}
	if _, err := ParseDelays("0,,5m"); err == nil || !strings.Contains(err.Error(), "retry 2: empty duration") {
		t.Errorf("ParseDelays with a hole: %v", err)
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"90s", "PT5M", "1 hour and 30 minutes", "P1DT2H", "-1s", "5 minute", "P99999999W"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		if d < 0 || d > MaxDuration {
			t.Fatalf("ParseDuration(%q) = %v outside [0, MaxDuration]", s, d)
		}
		back, err := ParseDuration(FormatDuration(d))
		if err != nil || back != d {
			t.Fatalf("round trip of %q: %v -> %q -> %v, %v", s, d, FormatDuration(d), back, err)
		}
	})
}

func TestValidateRecord(t *testing.T) {
	for _, ok := range []string{"https://example.com/a.csv", "http://127.0.0.1:8080/x?y=1", "s3://bucket/key"} {
		if err := ValidateInputURL(ok); err != nil {
			t.Errorf("ValidateInputURL(%q) = %v", ok, err)
		}
	}
	for in, want := range map[string]string{
		"":                                      "empty",
		"example.com/x":                         "no scheme",
		"http:///x":                             "no host",
		"http://x/a b":                          "spaces",
		"http://x/" + strings.Repeat("a", 2100): "at most 2048",
	} {
		if err := ValidateInputURL(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateInputURL(%.40q) = %v; want %q", in, err, want)
		}
	}
	for in, want := range map[string]string{"": "empty", "a b": "spaces", strings.Repeat("x", 201): "at most 200"} {
		if err := ValidateUID(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateUID(%.40q) = %v; want %q", in, err, want)
		}
	}
	if err := ValidateUID("report-2024.q1:eu"); err != nil {
		t.Error(err)
	}
}

// FuzzParsePolicy checks that any input is refused with ErrInvalidPolicy or
// yields a valid policy whose stored JSON parses back to the same policy.
func FuzzParsePolicy(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePolicy(b, nil)
		if err != nil {
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("error %v does not wrap ErrInvalidPolicy", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted an invalid policy: %v", err)
		}
		back, err := ParsePolicy(p.JSON(), nil)
		if err != nil || string(back.JSON()) != string(p.JSON()) {
			t.Fatalf("stored JSON %s does not parse back: %v", p.JSON(), err)
		}
	})
}
