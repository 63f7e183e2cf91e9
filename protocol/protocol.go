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
	case strings.IndexByte(r.BigTableUID, 0) >= 0:
		return bad("big_table_uid contains a NUL character (\\u0000), which no record uid can hold")
	case strings.IndexByte(r.AttemptUID, 0) >= 0:
		return bad("refresh_attempt_uid contains a NUL character (\\u0000), which no attempt uid can hold")
	}
	r.Message = Clip(storable(r.Message), MaxTextLen)
	r.UserFriendlyReason = Clip(storable(r.UserFriendlyReason), MaxTextLen)
	return r, nil
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
