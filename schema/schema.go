// Package schema holds the published JSON Schemas of bigtables' contracts:
// the policy stored per record (policy.schema.json). They are embedded so
// tests check the Go code against them and tools can print them.
package schema

import _ "embed"

// Policy is the JSON Schema of a record's policy.
//
//go:embed policy.schema.json
var Policy []byte
