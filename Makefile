# bigtables: run `make` for the list of targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
GO ?= go
BIN := bin/bigtables
# Execution counts, not durations: with a duration, Go 1.26's fuzz coordinator
# can report its own deadline as a failure (golang/go#75804, fixed in 1.27).
FUZZTIME ?= 500000x

.PHONY: help chaos chaos-short example-deps build test check unit bench-smoke bench bench-short fuzz schedule-diff services run migrate docker-up docker-down clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

build: ## build bin/bigtables
	$(GO) build -o $(BIN) ./cmd/bigtables

test: services example-deps check unit bench-smoke ## everything CI checks: formatting, vet, race tests on real PostgreSQL and Redis, benchmarks once

check: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff

unit: ## unit, integration and end-to-end tests with the race detector
	$(GO) test -race -count=1 ./...

bench-smoke: ## compile and run every benchmark once, so none rots
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

bench: build services ## the full bench: 100,000 records, 1,000,000-row scale and backlog tests (several minutes)
	$(BIN) bench $(BENCHFLAGS)

bench-short: build services ## the bench on small sizes, as CI runs it
	$(BIN) bench --records 3000 --scale-rows 30000 --backlog 20000 $(BENCHFLAGS)

chaos: build services ## the long fault run: 3,000 records, 2 minutes of kills, a Redis restart and misbehaving workers
	$(BIN) chaos --records 3000 --faults 120s $(CHAOSFLAGS)

chaos-short: build services ## the fault run's short form, as CI runs it
	$(BIN) chaos --records 300 --faults 20s $(CHAOSFLAGS)

fuzz: ## fuzz the decoders and parsers, FUZZTIME each (default 500000x executions)
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeResult$$' -fuzztime $(FUZZTIME) ./protocol
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeJob$$' -fuzztime $(FUZZTIME) ./protocol
	$(GO) test -run '^$$' -fuzz '^FuzzParseDuration$$' -fuzztime $(FUZZTIME) ./refresh
	$(GO) test -run '^$$' -fuzz '^FuzzParsePolicy$$' -fuzztime $(FUZZTIME) ./refresh
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./schedule

schedule-diff: example-deps ## the long differential test of schedules against python-dateutil (20,000 rules)
	SCHEDULE_DIFF=long $(GO) test -count=1 -timeout 60m -run '^TestDifferentialDateutil$$' -v ./schedule

services: ## start PostgreSQL and Redis unless they already answer
	@scripts/services.sh

example-deps: ## install what the example workers and tests need (Python redis and dateutil, jq, redis-cli, curl, npm packages) where missing
	@scripts/example-deps.sh

run: ## the demo: services, migrate, demo records, scheduler + poller + worker (Ctrl-C stops)
	@scripts/demo.sh

migrate: build ## apply database migrations (DATABASE_URL)
	$(BIN) migrate

docker-up: ## the whole system in Docker: Redis, PostgreSQL, migrate, scheduler, poller, worker
	docker compose up --build -d

docker-down: ## stop the Docker system
	docker compose down

clean: ## remove build output
	rm -rf bin
