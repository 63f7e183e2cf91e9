package refresh

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseReadableSeeds(t *testing.T) {
	tests := []struct {
		name, text, schedule string
		want                 Policy
	}{
		{"the original design's expr", `
        - Refresh the model every 2 hours
        - Allow 1 hour for a response
        - On the first failure, retry immediately
        - On the second failure, retry after 1 minute
        - On the third failure, retry after 5 minutes
        - On the fourth failure, retry after 10 minutes
        - On the fifth failure, retry after 15 minutes
        - Panic`, "RRULE:FREQ=HOURLY;INTERVAL=2",
			Policy{Timeout: Duration(time.Hour), Retries: mins(0, 1, 5, 10, 15), Align: true, OnExhausted: Disable}},
	}
	for _, tt := range tests {
		got, err := ParseReadable(tt.text, nil)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got.Schedule != tt.schedule || string(got.Policy.JSON()) != string(tt.want.JSON()) {
			t.Errorf("%s:\n got %q %s\nwant %q %s", tt.name, got.Schedule, got.Policy.JSON(), tt.schedule, tt.want.JSON())
		}
	}
}

// The original design's real-world scenarios, exactly as it writes them
// (testdata/scenarios): every sentence is understood, or kept as a note.
func TestParseReadableScenarios(t *testing.T) {
	daily := "RRULE:FREQ=DAILY;BYHOUR=6,16;BYMINUTE=0;BYSECOND=0"
	tests := []struct {
		file, schedule string
		want           Policy
	}{
		{"thumbnail.txt", "", Policy{Timeout: Duration(time.Minute), Retries: mins(0, 1, 5), Align: true, OnExhausted: Disable,
			FinalReason: "thumbnail creation failed", Notes: []string{"Send a request to the thumbnailer service"}}},
		{"twice-a-day.txt", daily, Policy{Timeout: Duration(time.Hour), Retries: defaultDelays, Align: true, OnExhausted: Disable,
			NotifyFinal: true}},
		{"give-up-after-a-week.txt", daily, Policy{Timeout: Duration(time.Hour), Retries: defaultDelays, Align: true,
			OnExhausted: WaitNext, GiveUpAfter: Duration(7 * 24 * time.Hour), NotifyFinal: true}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join("testdata", "scenarios", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseReadable(string(text), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got.Schedule != tt.schedule || string(got.Policy.JSON()) != string(tt.want.JSON()) {
				t.Errorf("\n got %q %s\nwant %q %s", got.Schedule, got.Policy.JSON(), tt.schedule, tt.want.JSON())
			}
			// What explain prints reads back into the same policy.
			back, err := ParseReadable(strings.Join(Explain(got.Schedule, got.Policy), "\n"), nil)
			if err != nil || string(back.Policy.JSON()) != string(got.Policy.JSON()) || back.Schedule != got.Schedule {
				t.Errorf("explained and read back: %s, %v", back.Policy.JSON(), err)
			}
		})
	}
}

// Each of the sentences that tell the customer does something.
func TestParseReadableCustomerSentences(t *testing.T) {
	tests := []struct {
		text string
		want func(p Policy) bool
	}{
		{"Email the customer about the final failure", func(p Policy) bool { return p.NotifyFinal }},
		{"mark the record as 'thumbnail creation failed'", func(p Policy) bool { return p.FinalReason == "thumbnail creation failed" }},
		{`Mark the banner with “Thumbnail creation failed.”`, func(p Policy) bool { return p.FinalReason == "Thumbnail creation failed" }},
		{"Send a request to the thumbnailer service", func(p Policy) bool {
			return len(p.Notes) == 1 && p.Notes[0] == "Send a request to the thumbnailer service"
		}},
		{"Note: Ask Dana before changing this", func(p Policy) bool { return len(p.Notes) == 1 && p.Notes[0] == "Ask Dana before changing this" }},
		{"If the worker reports a failure of kind bad_input, stop refreshing at once until a person updates the record",
			func(p Policy) bool { return p.OnKind["bad_input"].Final }},
		{"Honour a worker's retry_after up to 2 hours", func(p Policy) bool { return p.MaxRetryAfter == Duration(2*time.Hour) }},
		{"Send this record's events to https://hooks.example.com/Bt", func(p Policy) bool { return p.Notify == "https://hooks.example.com/Bt" }},
		{"After the last retry, stop refreshing until a person updates the record", func(p Policy) bool {
			return p.OnExhausted == Disable && len(p.Retries) == 0
		}},
	}
	for _, tt := range tests {
		got, err := ParseReadable(tt.text, nil)
		if err != nil || !tt.want(got.Policy) {
			t.Errorf("ParseReadable(%q) = %s, %v", tt.text, got.Policy.JSON(), err)
		}
	}
}

func TestParseReadableErrorsQuoteThePhrase(t *testing.T) {
	bad := []struct{ text, want string }{
		{"Refresh the model every 2 hours\nDance on the table", `"Dance on the table": not understood`},
		{"On the second failure, retry after 1 minute", `"On the second failure, retry after 1 minute": expected the first failure next`},
		{"Allow forever for a response", `"Allow forever for a response": duration "forever"`},
		{"Refresh BigTable twice per day at 6 AM and teatime", `"Refresh BigTable twice per day at 6 AM and teatime": expected times`},
		{"Refresh BigTable daily at 6:15 and 7:30", "share their minutes"},
		{"On the third failure, mark the banner with \"x\"", `"On the third failure, mark the banner with \"x\"": the retries listed end with the first failure`},
		{"If the worker reports a failure of kind rate_limited: retry after 1 minute", "give it in --policy"},
		{"Send this record's events to ftp://x", "expected an http:// or https:// URL"},
		{"Sing to the customer", `"Sing to the customer": not understood`},
	}
	for _, tt := range bad {
		_, err := ParseReadable(tt.text, nil)
		if err == nil || !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseReadable(%q) = %v; want %q", tt.text, err, tt.want)
		}
	}
}

// Explain renders a list policy into sentences that read back into it.
func TestExplainRoundTrip(t *testing.T) {
	policies := []struct {
		rule string
		p    Policy
	}{
		{"RRULE:FREQ=HOURLY;INTERVAL=2", Policy{Timeout: Duration(time.Hour), Retries: mins(0, 1, 5, 10, 15), Align: true, OnExhausted: Disable}},
		{"RRULE:FREQ=DAILY;BYHOUR=6,16;BYMINUTE=0;BYSECOND=0", Policy{Timeout: Duration(90 * time.Minute), Retries: defaultDelays, Align: false,
			OnExhausted: WaitNext, GiveUpAfter: Duration(7 * 24 * time.Hour)}},
		{"RRULE:FREQ=DAILY;BYHOUR=9,21;BYMINUTE=30;BYSECOND=0", Policy{Timeout: Duration(time.Minute), Retries: []Duration{}, Align: true, OnExhausted: Disable}},
		{"", Policy{Timeout: Duration(time.Minute), Retries: mins(0, 1), Align: true, OnExhausted: Disable, FinalReason: `Say "hi"`,
			NotifyFinal: true, Notify: "https://hooks.example.com/x", MaxRetryAfter: Duration(time.Hour), Notes: []string{"a", "b"},
			OnKind: map[string]KindRule{"bad_input": {Final: true}, "gone": {Final: true}}}},
		{"RRULE:FREQ=DAILY;BYHOUR=0;BYMINUTE=0;BYSECOND=0", Policy{Timeout: Duration(time.Hour), Retries: mins(0, 1), Align: true, OnExhausted: Disable,
			Spread: Duration(15 * time.Minute)}},
	}
	for _, tt := range policies {
		text := strings.Join(Explain(tt.rule, tt.p), "\n")
		back, err := ParseReadable(text, nil)
		if err != nil {
			t.Errorf("explained text does not parse: %v\n%s", err, text)
			continue
		}
		if strings.Contains(text, "Panic") {
			t.Errorf("explain prints an internal word:\n%s", text)
		}
		if back.Schedule != tt.rule || string(back.Policy.JSON()) != string(tt.p.JSON()) {
			t.Errorf("round trip:\n%s\n got %q %s\nwant %q %s", text, back.Schedule, back.Policy.JSON(), tt.rule, tt.p.JSON())
		}
	}
}

func TestExplainStrategies(t *testing.T) {
	for text, want := range map[string]string{
		"exponential initial=5s max=300s max_attempts=8 jitter=additive":    "After failure k, retry after 5 seconds × 2^(k-1), at most 5 minutes, plus a random 0 to 25% of it; the eighth failure ends the retries",
		"random-exp-backoff base_ms=3000 pct=0.5 max_ms=240000 max_retry=3": "After failure k, retry after safely's exponential backoff from 3 seconds (3 seconds, 9 seconds, 27 seconds, ...), at most 4 minutes, ± 50%; the fourth failure ends the retries",
		"progressive bands=24h:5m,168h:1h":                                  "Retry every 5 minutes while failing for less than 1 day, every 1 hour while failing for less than 1 week, then stop retrying",
		"fibonacci unit=1m max_attempts=7":                                  "After failure k, retry after 1 minute × fib(k) (1, 1, 2, 3, 5, 8, ...); the seventh failure ends the retries",
	} {
		p := DefaultPolicy()
		p.SetStrategy(mustStrategy(t, text))
		lines := Explain("", p)
		if lines[2] != want {
			t.Errorf("%s:\n got %s\nwant %s", text, lines[2], want)
		}
	}
	if got := HumanDuration(90*time.Minute + 1500*time.Millisecond); got != "1 hour 30 minutes 1.5 seconds" {
		t.Errorf("HumanDuration = %q", got)
	}
}
