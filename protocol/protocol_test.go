package protocol

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestDecodeResult(t *testing.T) {
	r, err := DecodeResult([]byte(`{"big_table_uid":"bt1","refresh_attempt_uid":"c1","type":"failure","retryable":false,"user_friendly_reason":"Provided URL is invalid: x","extra":{"ignored":true}}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.BigTableUID != "bt1" || r.AttemptUID != "c1" || r.Type != Failure || !r.NotRetryable() || r.UserFriendlyReason != "Provided URL is invalid: x" {
		t.Errorf("DecodeResult = %+v", r)
	}
	long := strings.Repeat("é", MaxTextLen+10)
	r, err = DecodeResult([]byte(`{"big_table_uid":"bt1","refresh_attempt_uid":"c1","type":"success","message":"`+long+`"}`), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if n := utf8.RuneCountInString(r.Message); n != MaxTextLen || !strings.HasSuffix(r.Message, "…(truncated)") {
		t.Errorf("long message kept %d characters: %q...", n, r.Message[len(r.Message)-20:])
	}

	bad := []struct{ in, want string }{
		{``, "not a JSON object"},
		{`[1,2]`, "not a JSON object"},
		{`{"big_table_uid":"bt1"`, "invalid JSON"},
		{`{"big_table_uid":1,"refresh_attempt_uid":"c1","type":"success"}`, "field big_table_uid is a JSON number: expected a string"},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"failure","retryable":"no"}`, "field retryable is a JSON string: expected true or false"},
		{`{"refresh_attempt_uid":"c1","type":"success"}`, "big_table_uid is missing"},
		{`{"big_table_uid":"b","type":"success"}`, "refresh_attempt_uid is missing"},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1"}`, "type is missing"},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"done"}`, `unknown type "done"`},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"success","retryable":false}`, "retryable is only allowed on a failure"},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"success"} {}`, "data after the object"},
		{`{"big_table_uid":"` + strings.Repeat("x", 300) + `","refresh_attempt_uid":"c1","type":"success"}`, "longer than 200"},
		{"{\"big_table_uid\":\"b\xff\"}", "not valid UTF-8"},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"success","message":"` + strings.Repeat("x", 100) + `"}`, "over the limit of 100"},
		{`{"big_table_uid":"b\u0000","refresh_attempt_uid":"c1","type":"success"}`, "big_table_uid contains a NUL character"},
		{`{"big_table_uid":"b","refresh_attempt_uid":"\u0000c1","type":"success"}`, "refresh_attempt_uid contains a NUL character"},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"success","kind":"rate_limited"}`, "kind is only allowed on a failure"},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"user_friendly_status","retry_after":3}`, "retry_after is only allowed on a failure"},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"failure","kind":"rate limited"}`, `kind "rate limited": expected no spaces`},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"failure","kind":"` + strings.Repeat("k", 65) + `"}`, "kind is longer than 64 bytes"},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"failure","kind":7}`, "field kind is a JSON number: expected a string"},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"failure","retry_after":-5}`, "retry_after -5: expected 0 to 315360000 seconds"},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"failure","retry_after":1e12}`, "retry_after 1e12: expected 0 to"},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"failure","retry_after":"in a bit"}`, `retry_after "in a bit": expected a number of seconds or an RFC 3339 time`},
		{`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"failure","retry_after":true}`, "field retry_after is a JSON bool"},
	}
	for _, tt := range bad {
		_, err := DecodeResult([]byte(tt.in), 100+boolInt(!strings.Contains(tt.want, "limit"))*1000)
		if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("DecodeResult(%.60s) error = %v; want ErrMalformed containing %q", tt.in, err, tt.want)
		}
	}
}

// A failure's kind and retry_after: seconds from when the result is
// applied, or an RFC 3339 time.
func TestDecodeResultKindAndRetryAfter(t *testing.T) {
	now := time.Date(2024, 3, 4, 6, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		`30`:                          now.Add(30 * time.Second),
		`0.5`:                         now.Add(500 * time.Millisecond),
		`0`:                           now,
		`"2024-03-04T08:00:00+01:00"`: now.Add(time.Hour),
		`"2024-03-04T06:00:30.25Z"`:   now.Add(30250 * time.Millisecond),
	} {
		r, err := DecodeResult([]byte(`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"failure","kind":"rate_limited","retry_after":`+in+`}`), 0)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if r.Kind != "rate_limited" || !r.RetryAfter.Time(now).Equal(want) {
			t.Errorf("retry_after %s: kind %q, time %v; want %v", in, r.Kind, r.RetryAfter.Time(now), want)
		}
		again, err := DecodeResult(r.Encode(), 0)
		if err != nil || !again.RetryAfter.Time(now).Equal(want) || again.Kind != r.Kind {
			t.Errorf("round trip of %s: %s, %v", in, r.Encode(), err)
		}
	}
	r, _ := DecodeResult([]byte(`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"failure"}`), 0)
	if r.RetryAfter != nil || !r.RetryAfter.Time(now).IsZero() || strings.Contains(string(r.Encode()), "retry_after") {
		t.Errorf("no retry_after: %+v %s", r, r.Encode())
	}
}

// PostgreSQL text cannot hold NUL: the texts a worker sets are cleaned (the
// uids are refused, above), so a result never fails the database's write.
func TestDecodeResultCleansNUL(t *testing.T) {
	r, err := DecodeResult([]byte(`{"big_table_uid":"b","refresh_attempt_uid":"c1","type":"failure","message":"a\u0000b","user_friendly_reason":"\u0000x"}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Message != "a\uFFFDb" || r.UserFriendlyReason != "\uFFFDx" {
		t.Errorf("message %q reason %q; want each NUL replaced by U+FFFD", r.Message, r.UserFriendlyReason)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestJobRoundTrip(t *testing.T) {
	j := Job{BigTableUID: "bt", AttemptUID: "c1", InputURL: "http://x/", AttemptNo: 2,
		DeadlineAt: time.Date(2024, 1, 2, 3, 4, 5, 600, time.FixedZone("X", 3600))}
	got, err := DecodeJob(j.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !got.DeadlineAt.Equal(j.DeadlineAt.Truncate(time.Microsecond)) || got.AttemptUID != "c1" || got.AttemptNo != 2 {
		t.Errorf("round trip = %+v", got)
	}
	if !strings.Contains(string(j.Encode()), `"deadline_at":"2024-01-02T02:04:05Z"`) {
		t.Errorf("deadline not RFC 3339 UTC: %s", j.Encode())
	}
	if _, err := DecodeJob([]byte(`{"big_table_uid":"b","refresh_attempt_uid":"c"}`)); err == nil {
		t.Error("job without deadline accepted")
	}
}

func FuzzDecodeResult(f *testing.F) {
	for _, s := range []string{
		`{"big_table_uid":"bt1","refresh_attempt_uid":"c1","type":"success"}`,
		`{"big_table_uid":"bt1","refresh_attempt_uid":"c1","type":"failure","retryable":false,"user_friendly_reason":"r"}`,
		`{"big_table_uid":"bt1","refresh_attempt_uid":"c1","type":"user_friendly_status","message":"50%"}`,
		`{"big_table_uid":1}`, `[]`, `null`, "{\"a\":\"\xff\"}",
		`{"big_table_uid":"bt1","refresh_attempt_uid":"c1","type":"failure","kind":"rate_limited","retry_after":30}`,
		`{"big_table_uid":"bt1","refresh_attempt_uid":"c1","type":"failure","kind":"x","retry_after":"2024-03-04T06:00:00Z"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResult(b, 4096)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if r.BigTableUID == "" || r.AttemptUID == "" || (r.Type != Success && r.Type != Failure && r.Type != Status) {
			t.Fatalf("accepted an invalid result: %+v", r)
		}
		if utf8.RuneCountInString(r.Message) > MaxTextLen || utf8.RuneCountInString(r.UserFriendlyReason) > MaxTextLen {
			t.Fatalf("text over the limit kept")
		}
		if r.Type != Failure && (r.Kind != "" || r.RetryAfter != nil) {
			t.Fatalf("kind or retry_after accepted on a %s", r.Type)
		}
		if len(r.Kind) > MaxKindLen || (r.RetryAfter != nil && (r.RetryAfter.Seconds < 0 || r.RetryAfter.Seconds > MaxRetryAfterSeconds)) {
			t.Fatalf("kind or retry_after out of bounds: %+v", r)
		}
		for _, s := range []string{r.BigTableUID, r.AttemptUID, r.Message, r.UserFriendlyReason, r.Kind} {
			if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
				t.Fatalf("accepted a text PostgreSQL cannot store: %q", s)
			}
		}
		// What was accepted survives a round trip.
		again, err := DecodeResult(r.Encode(), 1<<20)
		now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
		if err != nil || again.AttemptUID != r.AttemptUID || again.Type != r.Type || again.Message != r.Message ||
			again.Kind != r.Kind || !again.RetryAfter.Time(now).Equal(r.RetryAfter.Time(now)) {
			t.Fatalf("round trip of %+v: %+v, %v", r, again, err)
		}
	})
}

func FuzzDecodeJob(f *testing.F) {
	f.Add([]byte(`{"big_table_uid":"b","refresh_attempt_uid":"c","input_url":"http://x","attempt_no":1,"deadline_at":"2024-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"deadline_at":"yesterday"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := DecodeJob(b)
		if err != nil {
			return
		}
		if j.BigTableUID == "" || j.AttemptUID == "" || j.DeadlineAt.IsZero() {
			t.Fatalf("accepted an invalid job: %+v", j)
		}
	})
}

func BenchmarkDecodeResult(b *testing.B) {
	raw := []byte(`{"big_table_uid":"report-42","refresh_attempt_uid":"cmwpzf4mg0000hl7dhmg8qfwt","type":"success","message":"ok"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeResult(raw, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeJob(b *testing.B) {
	j := Job{BigTableUID: "report-42", AttemptUID: "cmwpzf4mg0000hl7dhmg8qfwt", InputURL: "https://example.com/r.csv", AttemptNo: 1, DeadlineAt: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		j.Encode()
	}
}
