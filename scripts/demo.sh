#!/usr/bin/env bash
# `make run`: services up, schema migrated, four demo records with short
# policies, then the scheduler, the poller and a reference worker, with logs
# that show every transition. Ctrl-C stops everything cleanly.
#
#   DEMO_SECONDS=N stops the demo by itself after N seconds.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/bigtables?sslmode=disable}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export BIGTABLES_LOG_LEVEL=${BIGTABLES_LOG_LEVEL:-debug}
bin=$here/bin/bigtables

scripts/services.sh
go build -o "$bin" ./cmd/bigtables

db=$(basename "${DATABASE_URL%%\?*}")
admin_url=${DATABASE_URL/\/$db/\/postgres}
if ! psql "$admin_url" -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
  psql "$admin_url" -qc "CREATE DATABASE \"$db\"" && echo "created database $db"
fi
"$bin" migrate

# Add each record, or update it (a manual save: re-enabled, refreshed now).
record() {
  uid=$1; shift
  "$bin" add --uid "$uid" "$@" >/dev/null 2>&1 || "$bin" update "$uid" "$@" >/dev/null
  echo "record $uid: $*"
}
record demo-healthy --input-url http://example.com/healthy --schedule 'RRULE:FREQ=SECONDLY;INTERVAL=10' --timeout 5s --retries 0,2s
record demo-flaky   --input-url http://example.com/flaky   --schedule 'RRULE:FREQ=SECONDLY;INTERVAL=15' --timeout 5s --retries 1s,2s,4s
record demo-failing --input-url http://example.com/failing --timeout 5s --retries 0,1s,3s
record demo-slow    --input-url http://example.com/slow    --timeout 2s --retries 1s

pids=()
stop() {
  trap - INT TERM EXIT
  echo; echo "stopping..."
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" || true; done
  "$bin" list
}
trap stop INT TERM EXIT
run() { # name args...
  name=$1; shift
  "$bin" "$@" > >(sed -u "s/^/[$name] /") 2>&1 &
  pids+=($!)
}
run scheduler scheduler --interval 500ms
run poller poller
run worker worker --concurrency 4 --exec "sh $here/scripts/demo-worker.sh"
echo "running; Ctrl-C to stop. 'bin/bigtables list' and 'bin/bigtables show UID --history 10' in another terminal."
if [ -n "${DEMO_SECONDS:-}" ]; then sleep "$DEMO_SECONDS"; else wait; fi
