// Package protocol is the wire contract between bigtables and workers in any
// language: the JSON job the scheduler pushes onto the input list, the JSON
// result a worker pushes onto the output list, and the dead-letter envelope
// for results that cannot be applied.
//
// Decoding is tolerant where a contract should be (unknown fields are
// ignored) and strict everywhere else: a result that is too large, not a JSON
// object, has a field of the wrong type, lacks a required field or has an
// unknown type is refused with an error that says which and why. Every text
// a result carries can be stored by PostgreSQL: a uid holding a NUL
// character (\u0000, which PostgreSQL text cannot hold) is refused, and NULs
// in message and user_friendly_reason are replaced by U+FFFD; invalid UTF-8
// is refused whole (JSON escapes cannot produce it: Go decodes a lone
// surrogate as U+FFFD).
package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Default queue names.
const (
	DefaultInputQueue  = "bigtables-input"
	DefaultOutputQueue = "bigtables-output"
	DefaultDeadQueue   = "bigtables-output-dead"
	// DefaultEventsList is the list the notifier appends events to.
	DefaultEventsList = "bigtables-events"
)

// Limits on what a worker can send.
const (
	// DefaultMaxResultBytes is the default largest result accepted; larger
	// ones are dead-lettered without being parsed.
	DefaultMaxResultBytes = 64 << 10
	// MaxUIDLen bounds big_table_uid and refresh_attempt_uid.
	MaxUIDLen = 200
	// MaxTextLen bounds message and user_friendly_reason (in characters);
	// longer texts are cut and marked, never refused.
	MaxTextLen = 2000
	// MaxKindLen bounds kind, in bytes.
	MaxKindLen = 64
	// MaxRetryAfterSeconds bounds a retry_after given in seconds (ten
	// years); the record's policy caps the delay it sets much lower.
	MaxRetryAfterSeconds = 10 * 365 * 24 * 3600
)

// Job is what the scheduler pushes for each started attempt.
type Job struct {
	BigTableUID string `json:"big_table_uid"`
	// AttemptUID must be echoed in every result for this job.
	AttemptUID string `json:"refresh_attempt_uid"`
	InputURL   string `json:"input_url"`
	// AttemptNo is 1 for the first attempt since the last success.
	AttemptNo int `json:"attempt_no"`
	// DeadlineAt is when the attempt counts as timed out; a result after it
	// is ignored.
	DeadlineAt time.Time `json:"deadline_at"`
}

// Encode returns the job's JSON. deadline_at is RFC 3339 in UTC with at most
// six fractional digits, which every language's date parser reads.
func (j Job) Encode() []byte {
	j.DeadlineAt = j.DeadlineAt.UTC().Truncate(time.Microsecond)
	b, err := json.Marshal(j)
	if err != nil {
		panic(err) // strings, an int and a time: cannot fail
	}
	return b
}

// DecodeJob parses a job, for workers written in Go.
func DecodeJob(b []byte) (Job, error) {
	var j Job
	if err := strictObject(b, &j); err != nil {
		return Job{}, fmt.Errorf("decode job: %w", err)
	}
	switch {
	case j.BigTableUID == "":
		return Job{}, errors.New("decode job: big_table_uid is missing")
	case j.AttemptUID == "":
		return Job{}, errors.New("decode job: refresh_attempt_uid is missing")
	case j.DeadlineAt.IsZero():
		return Job{}, errors.New("decode job: deadline_at is missing")
	}
	return j, nil
}

// Type is the kind of a result.
type Type string

// Result types.
const (
	// Success ends the attempt successfully; the record's next refresh is the
	// next planned one.
	Success Type = "success"
	// Failure ends the attempt as failed; it is retried by the record's
	// policy unless Retryable is false.
	Failure Type = "failure"
	// Status reports progress: its message becomes the record's
	// status_message; the attempt goes on.
	Status Type = "user_friendly_status"
)

// Result is what a worker pushes about an attempt.
type Result struct {
	BigTableUID string `json:"big_table_uid"`
	AttemptUID  string `json:"refresh_attempt_uid"`
	Type        Type   `json:"type"`
	Message     string `json:"message,omitempty"`
	// Retryable, on a failure, false means retrying cannot help (the URL is
	// invalid): the failure is final at once. Absent means true.
	Retryable *bool `json:"retryable,omitempty"`
	// UserFriendlyReason, on a failure, is shown to the customer if the
	// failure disables the record.
	UserFriendlyReason string `json:"user_friendly_reason,omitempty"`
	// Kind, on a failure, names its kind (free text such as rate_limited,
	// upstream_5xx, bad_input: 1 to 64 bytes, no spaces or control
	// characters); the record's policy may route it (on_kind).
	Kind string `json:"kind,omitempty"`
	// RetryAfter, on a failure, is when the worker asks to be retried (an
	// HTTP Retry-After): it sets the delay of this failure, up to the
	// policy's max_retry_after, still aligned with the schedule.
	RetryAfter *RetryAfter `json:"retry_after,omitempty"`
}

// RetryAfter is a result's retry_after: a number of seconds (from when the
// result is applied), or an RFC 3339 time.
type RetryAfter struct {
	// Seconds, when At is zero.
	Seconds float64
	// At is the time given, else zero.
	At time.Time
}

// RetryAfterSeconds is a retry_after of n seconds.
func RetryAfterSeconds(n float64) *RetryAfter { return &RetryAfter{Seconds: n} }

// RetryAfterAt is a retry_after at t.
func RetryAfterAt(t time.Time) *RetryAfter { return &RetryAfter{At: t.UTC()} }

// Time returns when the retry is asked for, seconds counted from now; the
// zero time for a nil RetryAfter.
func (r *RetryAfter) Time(now time.Time) time.Time {
	switch {
	case r == nil:
		return time.Time{}
	case !r.At.IsZero():
		return r.At
	}
	return now.Add(time.Duration(r.Seconds * float64(time.Second)))
}

// MarshalJSON writes a number of seconds or an RFC 3339 time.
func (r RetryAfter) MarshalJSON() ([]byte, error) {
	if !r.At.IsZero() {
		return json.Marshal(r.At.UTC().Format(time.RFC3339Nano))
	}
	return json.Marshal(r.Seconds)
}

// UnmarshalJSON reads a non-negative number of seconds, at most
// MaxRetryAfterSeconds, or an RFC 3339 time.
func (r *RetryAfter) UnmarshalJSON(b []byte) error {
	var n float64
	if err := json.Unmarshal(b, &n); err == nil {
		if n < 0 || n > MaxRetryAfterSeconds {
			return fieldError{fmt.Sprintf("retry_after %s: expected 0 to %d seconds, or an RFC 3339 time", Clip(string(b), 30), MaxRetryAfterSeconds)}
		}
		*r = RetryAfter{Seconds: n}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fieldError{fmt.Sprintf("field retry_after is a JSON %s: expected a number of seconds or an RFC 3339 time", jsonValueKind(b))}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fieldError{fmt.Sprintf("retry_after %q: expected a number of seconds or an RFC 3339 time (2024-03-04T06:00:00Z)", Clip(s, 40))}
	}
	*r = RetryAfter{At: t.UTC()}
	return nil
}

// fieldError is a field's own decoding error, reported as is.
type fieldError struct{ msg string }

func (e fieldError) Error() string { return e.msg }

// jsonValueKind names the kind of a JSON value for an error.
func jsonValueKind(b []byte) string {
	switch t := bytes.TrimSpace(b); {
	case len(t) == 0:
		return "nothing"
	case t[0] == '{':
		return "object"
	case t[0] == '[':
		return "array"
	case t[0] == 't' || t[0] == 'f':
		return "bool"
	case t[0] == 'n':
		return "null"
	}
	return "value"
}

// NotRetryable reports whether the result is a failure marked not retryable.
func (r Result) NotRetryable() bool { return r.Type == Failure && r.Retryable != nil && !*r.Retryable }

// Encode returns the result's JSON.
func (r Result) Encode() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return b
}

// ErrMalformed is wrapped by every DecodeResult error: the result cannot be
// applied and belongs in the dead-letter list.
var ErrMalformed = errors.New("malformed result")

// DecodeResult parses and checks a worker's result. maxBytes <= 0 means
// DefaultMaxResultBytes. Over-long message and user_friendly_reason texts are
// cut to MaxTextLen characters and marked, not refused.
func DecodeResult(b []byte, maxBytes int) (Result, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxResultBytes
	}
	bad := func(format string, args ...any) (Result, error) {
		return Result{}, fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if len(b) > maxBytes {
		return bad("%d bytes, over the limit of %d", len(b), maxBytes)
	}
	if !utf8.Valid(b) {
		return bad("not valid UTF-8")
	}
	var r Result
	if err := strictObject(b, &r); err != nil {
		return bad("%v", err)
	}
	switch {
	case r.BigTableUID == "":
		return bad("big_table_uid is missing or empty")
	case r.AttemptUID == "":
		return bad("refresh_attempt_uid is missing or empty")
	case len(r.BigTableUID) > MaxUIDLen:
		return bad("big_table_uid is longer than %d bytes", MaxUIDLen)
	case len(r.AttemptUID) > MaxUIDLen:
		return bad("refresh_attempt_uid is longer than %d bytes", MaxUIDLen)
	case r.Type == "":
		return bad("type is missing: expected %q, %q or %q", Success, Failure, Status)
	case r.Type != Success && r.Type != Failure && r.Type != Status:
		return bad("unknown type %q: expected %q, %q or %q", Clip(string(r.Type), 50), Success, Failure, Status)
	case r.Retryable != nil && r.Type != Failure:
		return bad("retryable is only allowed on a failure")
	case r.Kind != "" && r.Type != Failure:
		return bad("kind is only allowed on a failure")
	case r.RetryAfter != nil && r.Type != Failure:
		return bad("retry_after is only allowed on a failure")
	case strings.IndexByte(r.BigTableUID, 0) >= 0:
		return bad("big_table_uid contains a NUL character (\\u0000), which no record uid can hold")
	case strings.IndexByte(r.AttemptUID, 0) >= 0:
		return bad("refresh_attempt_uid contains a NUL character (\\u0000), which no attempt uid can hold")
	}
	if r.Kind != "" {
		if err := checkKind(r.Kind); err != nil {
			return bad("%v", err)
		}
	}
	r.Message = Clip(storable(r.Message), MaxTextLen)
	r.UserFriendlyReason = Clip(storable(r.UserFriendlyReason), MaxTextLen)
	return r, nil
}

// checkKind checks a failure's kind: at most MaxKindLen bytes, no spaces
// or control characters.
func checkKind(kind string) error {
	if len(kind) > MaxKindLen {
		return fmt.Errorf("kind is longer than %d bytes", MaxKindLen)
	}
	for _, r := range kind {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("kind %q: expected no spaces or control characters (e.g. rate_limited)", kind)
		}
	}
	return nil
}

// storable replaces the NUL characters PostgreSQL text cannot hold by
// U+FFFD, the character that stands for one that cannot be represented.
func storable(s string) string {
	if strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

// strictObject decodes one JSON object into v, with errors that name the
// field of the wrong type rather than Go's struct names.
func strictObject(b []byte, v any) error {
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return errors.New("not a JSON object")
	}
	// json.Unmarshal, not a Decoder: no allocation per result for the
	// decoder's buffer, and it refuses trailing data by itself.
	if err := json.Unmarshal(trimmed, v); err != nil {
		var fe fieldError
		if errors.As(err, &fe) {
			return fe
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("field %s is a JSON %s: expected %s", te.Field, te.Value, jsonKind(te.Type.String()))
		}
		if strings.Contains(err.Error(), "after top-level value") {
			return errors.New("invalid JSON: data after the object")
		}
		return fmt.Errorf("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

func jsonKind(goType string) string {
	switch goType {
	case "string", "protocol.Type":
		return "a string"
	case "int":
		return "a whole number"
	case "bool", "*bool":
		return "true or false"
	case "time.Time":
		return "an RFC 3339 time string"
	}
	return goType
}

// Clip cuts s to at most n characters, marking the cut.
func Clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	const mark = "…(truncated)"
	runes := []rune(s)
	return string(runes[:n-utf8.RuneCountInString(mark)]) + mark
}

// DeadLetter is the envelope pushed onto the dead-letter list: the raw value
// exactly as it arrived, and why it could not be applied.
type DeadLetter struct {
	Reason string    `json:"reason"`
	DeadAt time.Time `json:"dead_at"`
	Raw    string    `json:"raw"`
}

// Encode returns the envelope's JSON.
func (d DeadLetter) Encode() []byte {
	b, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	return b
}
