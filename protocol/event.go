package protocol

import (
	"encoding/json"
	"time"
)

// Event is the JSON of one event as webhooks receive it and the events list
// (default bigtables-events) holds it: schema/event.schema.json. Receivers
// may get an event more than once and de-duplicate by ID; unknown fields
// may be added later and must be ignored.
type Event struct {
	// ID is unique per event and the same in every delivery of it.
	ID string `json:"id"`
	// Type is disabled, gave_up, recovered, reenabled, paused, resumed,
	// deleted, breaker_opened, breaker_half_open or breaker_closed.
	Type string `json:"type"`
	// BigTableUID is the record; absent for an upstream's events.
	BigTableUID string `json:"big_table_uid,omitempty"`
	// At is when the transition happened (RFC 3339, UTC).
	At time.Time `json:"at"`
	// Reason is the disabled reason (disabled, gave_up), or the reason a
	// re-enabled record had.
	Reason string `json:"reason,omitempty"`
	// Attempts is the number of attempts that failed in a row (disabled,
	// gave_up) or before the success (recovered).
	Attempts int `json:"attempts,omitempty"`
	// FailingSince is when the record started failing.
	FailingSince *time.Time `json:"failing_since,omitempty"`
	// Upstream names the upstream of a breaker event.
	Upstream string `json:"upstream,omitempty"`
	// From and To are a breaker event's states (closed, open, half_open).
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Why says what moved the breaker (breaker events).
	Why string `json:"why,omitempty"`
	// CoolDown is how long an opened breaker stays open ("30s", "1m";
	// breaker_opened), NextProbeAt when it turns half-open.
	CoolDown    string     `json:"cool_down,omitempty"`
	NextProbeAt *time.Time `json:"next_probe_at,omitempty"`
	// Parked counts the upstream's parked records at the transition
	// (breaker events; absent when none).
	Parked int `json:"parked,omitempty"`
	// Message is free text for a person.
	Message string `json:"message,omitempty"`
	// NotifyCustomer is true on the final failure (disabled, gave_up) of a
	// record whose policy says notify_final ("Email the customer about the
	// final failure"): the receiver tells the record's customer.
	NotifyCustomer bool `json:"notify_customer,omitempty"`
}

// Encode returns the event's JSON.
func (e Event) Encode() []byte {
	b, _ := json.Marshal(e) // strings, ints and times always encode
	return b
}
