package refresh

import (
	"errors"
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
		{"twice a day at 6 AM and 4 PM", `
1. Refresh BigTable twice per day at 6 AM and 4 PM
2. Allow 1 hour to complete
3. Retry policy:
   - On the first failure, retry immediately.
   - On the second failure, retry after 1 minute.
   - On the third failure, retry after 5 minutes.
   - On the fourth failure, retry after 15 minutes.
   - On the fifth failure, retry after 30 minutes.
   - On the sixth failure, retry after 1 hour.
4. Give up after the final unsuccessful retry:
    - Disable auto-refresh.
    - Email the customer that the BigTable refresh has been disabled.`, "RRULE:FREQ=DAILY;BYHOUR=6,16;BYMINUTE=0;BYSECOND=0",
			Policy{Timeout: Duration(time.Hour), Retries: defaultDelays, Align: true, OnExhausted: Disable}},
		{"give up only after a week", `
1. Refresh BigTable twice per day at 6 AM and 4 PM
2. Allow 1 hour to complete
3. Retry policy:
   - On the first failure, retry immediately.
   - On the second failure, retry after 1 minute.
   - On the third failure, retry after 5 minutes.
   - On the fourth failure, retry after 15 minutes.
   - On the fifth failure, retry after 30 minutes.
   - On the sixth failure, retry after 1 hour.
   - On the seventh failure:
     - Reset ` + "`attempt_no`" + `
     - Wait until next scheduled refresh
4. Give up after one week of unsuccessful refresh attempts:
   - Disable auto-refresh
   - Send the customer an email notifying them that BigTable refresh has been disabled`, "RRULE:FREQ=DAILY;BYHOUR=6,16;BYMINUTE=0;BYSECOND=0",
			Policy{Timeout: Duration(time.Hour), Retries: defaultDelays, Align: true, OnExhausted: WaitNext, GiveUpAfter: Duration(7 * 24 * time.Hour)}},
		{"thumbnail", `
2. Allow 1 minute to complete.
3. Retry policy:
    - On the first failure, retry immediately.
    - On the second failure, retry after 1 minute.
    - On the third failure, retry after 5 minutes.
    - On the fourth failure, mark the banner with "thumbnail creation failed."`, "",
			Policy{Timeout: Duration(time.Minute), Retries: mins(0, 1, 5), Align: true, OnExhausted: Disable}},
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

func TestParseReadableErrorsQuoteThePhrase(t *testing.T) {
	bad := []struct{ text, want string }{
		{"Refresh the model every 2 hours\nDance on the table", `"Dance on the table": not understood`},
		{"On the second failure, retry after 1 minute", `"On the second failure, retry after 1 minute": expected the first failure next`},
		{"Allow forever for a response", `"Allow forever for a response": duration "forever"`},
		{"Refresh BigTable twice per day at 6 AM and teatime", `"Refresh BigTable twice per day at 6 AM and teatime": expected times`},
		{"Refresh BigTable daily at 6:15 and 7:30", "share their minutes"},
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
	}
	for _, tt := range policies {
		text := strings.Join(Explain(tt.rule, tt.p), "\n")
		back, err := ParseReadable(text, nil)
		if err != nil {
			t.Errorf("explained text does not parse: %v\n%s", err, text)
			continue
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
