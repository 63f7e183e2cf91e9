# bigtables: run `make` for the list of targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
GO ?= go
BIN := bin/bigtables
# Execution counts, not durations: with a duration, Go 1.26's fuzz coordinator
# can report its own deadline as a failure (golang/go#75804, fixed in 1.27).
FUZZTIME ?= 500000x

.PHONY: help chaos chaos-short failover redis-cluster redis-cluster-stop redis-sentinel redis-sentinel-stop example-deps browser-deps build test check unit bench-smoke bench bench-short bench-scale soak fuzz schedule-diff services run demo-reset migrate docker-up docker-down docker-config screenshots web clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-19s %s\n", $$1, $$2}'

build: ## build bin/bigtables
	$(GO) build -o $(BIN) ./cmd/bigtables

test: services example-deps browser-deps docker-config check bench-smoke unit ## everything CI checks: formatting, vet, docker-compose.yml, race tests on real PostgreSQL and Redis, benchmarks once

check: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff

unit: ## unit, integration and end-to-end tests with the race detector; failures in full, skips listed with their reason, a summary last
	@echo "$(GO) test -race -count=1 -json ./... | $(GO) run ./internal/testsummary"
	@set -o pipefail; $(GO) test -race -count=1 -json ./... | $(GO) run ./internal/testsummary

bench-smoke: ## compile and run every benchmark once, so none rots
	$(GO) test -short -run '^$$' -bench . -benchtime 1x ./...

bench: build services ## the full bench: 100,000 records, 1,000,000-row scale and backlog tests (several minutes)
	$(BIN) bench $(BENCHFLAGS)

bench-short: build services ## the bench on small sizes, as CI runs it, and bench-scale's smallest form
	$(BIN) bench --records 3000 --scale-rows 30000 --backlog 20000 $(BENCHFLAGS)
	$(BIN) bench-scale --stored 30000 --burst 1000

bench-scale: build services ## not in CI: 10,000,000 records stored, two 1,000,000-record bursts, ticks, queries, disk per record (SCALEFLAGS, e.g. --partitions 8)
	$(BIN) bench-scale $(SCALEFLAGS)

DURATION ?= 30m
soak: build services ## not in CI: a steady load at half the peak for DURATION (default 30m); table and plot docs/soak.svg (SOAKFLAGS)
	$(BIN) soak --duration $(DURATION) --plot docs/soak.svg $(SOAKFLAGS)

chaos: build services ## the long fault run: 3,000 records, 2 minutes of kills, frozen and stopped pollers, lost Redis replies and outages, a Redis restart, poison results and misbehaving workers
	$(BIN) chaos --records 3000 --faults 120s $(CHAOSFLAGS)

chaos-short: build services ## the fault run's short form, as CI runs it
	$(BIN) chaos --records 300 --faults 20s $(CHAOSFLAGS)

failover: build services ## the failover run: kill the Sentinel-managed Redis master under load, twice, then once after cutting its replica off
	$(BIN) failover --kills 2 $(FAILOVERFLAGS)
	$(BIN) failover --kills 1 --lag 500ms $(FAILOVERFLAGS)

redis-cluster: ## start a private Redis Cluster (3 masters, 3 replicas) on ports 7101-7106; prints its REDIS_URL
	@scripts/redis-cluster.sh start

redis-cluster-stop: ## stop it
	@scripts/redis-cluster.sh stop

redis-sentinel: ## start a private master, replica and 3 Sentinels on ports 7111-7115; prints its REDIS_URL
	@scripts/redis-sentinel.sh start

redis-sentinel-stop: ## stop them
	@scripts/redis-sentinel.sh stop

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

browser-deps: ## install Debian's chromium and chromium-driver for the dashboard's browser test, where missing
	@scripts/browser-deps.sh

screenshots: ## retake the dashboard screenshots in docs/ (headless Chromium)
	UPDATE_SCREENSHOTS=1 $(GO) test -count=1 -run '^TestBrowser$$' ./web

web: build services ## the dashboard on 127.0.0.1:8080 (read-only unless BIGTABLES_ADMIN_TOKEN is set)
	$(BIN) web

run: ## the demo, in database bigtables_demo and Redis lists bigtables-demo-*: four records, scheduler + poller + worker + dashboard (:8080), metrics on :9100-9102 (Ctrl-C stops)
	@scripts/demo.sh

demo-reset: ## drop the demo's database (bigtables_demo) and its Redis keys (bigtables-demo-*)
	@scripts/demo.sh reset

migrate: build ## apply database migrations (DATABASE_URL)
	$(BIN) migrate

docker-up: ## the whole system in Docker: Redis, PostgreSQL, migrate, scheduler, poller, worker (one image, built once)
	scripts/compose.sh up --build -d

docker-down: ## stop the Docker system (its volumes stay; `scripts/compose.sh down -v` removes them)
	scripts/compose.sh down

docker-config: ## validate docker-compose.yml with Compose (installs Debian's docker-compose if no Compose exists)
	COMPOSE_INSTALL=1 scripts/compose.sh config -q && echo "docker-compose.yml: valid"

clean: ## remove build output
	rm -rf bin
