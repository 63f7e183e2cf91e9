module github.com/bigtables/bigtables

go 1.26.8

require (
	github.com/lucsky/cuid v1.2.1
	github.com/teambition/rrule-go v1.8.2
)
