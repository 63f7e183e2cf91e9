// Package schema holds the published JSON Schemas of bigtables' contracts:
// the policy stored per record (policy.schema.json), and the job and result
// of the wire protocol (job.schema.json, result.schema.json), and the
// notifier's events (event.schema.json). They are
// embedded so tests check the Go code against them and tools can print them.
package schema

import _ "embed"

// Policy is the JSON Schema of a record's policy.
//
//go:embed policy.schema.json
var Policy []byte

// Job is the JSON Schema of a job on the input list.
//
//go:embed job.schema.json
var Job []byte

// Result is the JSON Schema of a result on the output list.
//
//go:embed result.schema.json
var Result []byte

// Event is the JSON Schema of an event, as webhooks and the events list
// receive it.
//
//go:embed event.schema.json
var Event []byte
