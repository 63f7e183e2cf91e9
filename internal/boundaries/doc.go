// Package boundaries holds no code: its test checks, with `go list`, the
// import rules that keep bigtables' packages apart (which package may reach
// a database, Redis or HTTP, and which never import each other). A change
// that breaks one fails with the rule's name and the import chain.
package boundaries
