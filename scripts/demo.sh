#!/usr/bin/env bash
# `make run`: services up, schema migrated, four demo records with short
# policies, then the scheduler, the poller and a reference worker, with logs
# that show every transition. Ctrl-C stops everything cleanly: the scheduler
# first, then the worker (it finishes the jobs in hand), then the poller
# (it applies their results), and the records are listed.
#
# The demo keeps to its own data: database bigtables_demo and the Redis
# lists bigtables-demo-input, -output and -output-dead (keys bigtables-demo-*
# in Redis DB 0). `make demo-reset` (scripts/demo.sh reset) drops them.
#
#   DEMO_DATABASE_URL, DEMO_REDIS_URL   where (defaults: the local services)
#   DEMO_SECONDS=N                      stop by itself after N seconds
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export DATABASE_URL=${DEMO_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/bigtables_demo?sslmode=disable}
export REDIS_URL=${DEMO_REDIS_URL:-redis://127.0.0.1:6379/0}
prefix=bigtables-demo-
export BIGTABLES_INPUT_QUEUE=${prefix}input BIGTABLES_OUTPUT_QUEUE=${prefix}output BIGTABLES_DEAD_QUEUE=${prefix}output-dead
export BIGTABLES_LOG_LEVEL=${BIGTABLES_LOG_LEVEL:-debug}
bin=$here/bin/bigtables

db=$(basename "${DATABASE_URL%%\?*}")
admin_url=${DATABASE_URL/\/$db/\/postgres}
redis_cli() { redis-cli --no-auth-warning -u "$REDIS_URL" "$@"; }

if [ "${1:-}" = reset ]; then
  case "$db" in
    *demo*) ;;
    *) echo "demo-reset: refusing to drop database $db: its name has no 'demo'" >&2; exit 2 ;;
  esac
  psql "$admin_url" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" && echo "dropped database $db"
  if command -v redis-cli >/dev/null 2>&1; then
    keys=$(redis_cli --scan --pattern "${prefix}*")
    [ -z "$keys" ] || echo "$keys" | xargs redis-cli --no-auth-warning -u "$REDIS_URL" del >/dev/null
    echo "deleted $(printf '%s' "$keys" | grep -c . || true) Redis keys ${prefix}*"
  else
    echo "demo-reset: redis-cli is missing (make example-deps installs it): Redis keys ${prefix}* left" >&2
  fi
  exit 0
fi

scripts/services.sh
go build -o "$bin" ./cmd/bigtables

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
record demo-flaky   --input-url http://example.com/flaky   --schedule 'RRULE:FREQ=SECONDLY;INTERVAL=15' --timeout 5s --retries 1s,2s,4s --on-exhausted wait_next
record demo-failing --input-url http://example.com/failing --timeout 5s --retries 0,1s,3s
record demo-slow    --input-url http://example.com/slow    --timeout 2s --retries 1s

cat <<EOF

What the four records show (the worker is scripts/demo-worker.sh; no URL is fetched):
  demo-healthy  succeeds every 10 s: a success, attempt_no back to 0, refresh_at 10 s later.
  demo-flaky    fails about 2 times in 3: retries after 1 s, 2 s, 4 s (attempt_no climbs);
                a success resets attempt_no, and after 4 failures in a row it is not
                disabled (--on-exhausted wait_next) but waits for its next 15 s occurrence.
  demo-failing  always fails: retried at once, after 1 s, after 3 s, then disabled
                ("Cannot refresh BigTable after 4 attempts: upstream answered 500 for
                http://example.com/failing"); no schedule, so it stays so.
  demo-slow     never answers: the worker stops each job at its 2 s deadline and pushes
                nothing, the attempt times out, one retry after 1 s, then disabled
                ("Cannot refresh BigTable after 2 attempts: timeout").
Look at the "attempt started" and "attempt ended" lines (uid=, attempt_no=, outcome=,
decision=, refresh_at=), and in another terminal:
  export DATABASE_URL='$DATABASE_URL'
  bin/bigtables list
  bin/bigtables show demo-flaky --history 10
Data: database $db, Redis lists ${prefix}input/output/output-dead; \`make demo-reset\` drops them.

EOF

# Each process runs in its own session (setsid), so Ctrl-C reaches only this
# script, which then stops them in order with SIGTERM. Its log goes through a
# FIFO (no pipe descriptor leaks into the process and the jobs it runs) to a
# prefixer that ignores SIGINT, so it reads until the process exits.
fifos=$(mktemp -d)
declare -A pid
start() { # name args...
  local name=$1; shift
  mkfifo "$fifos/$name"
  (trap '' INT; exec sed -u "s/^/[$name] /" <"$fifos/$name") &
  setsid "$bin" "$@" >"$fifos/$name" 2>&1 &
  pid[$name]=$!
}
stop_one() { # name
  local p=${pid[$1]}
  kill -TERM "$p" 2>/dev/null || true
  wait "$p" || true
}
stop() {
  trap '' INT TERM # a second Ctrl-C does not cut the orderly stop short
  echo; echo "stopping: scheduler, worker (finishing its jobs), poller (applying their results)..."
  stop_one scheduler
  stop_one worker
  # Let the poller apply the results the worker pushed while finishing.
  if command -v redis-cli >/dev/null 2>&1; then
    for _ in $(seq 1 50); do
      [ "$(redis_cli llen "$BIGTABLES_OUTPUT_QUEUE" 2>/dev/null)" = 0 ] && break
      sleep 0.1
    done
  else
    sleep 1
  fi
  stop_one poller
  stop_one web
  wait # for the prefixers to print the last lines
  rm -rf "$fifos"
  "$bin" list
}
trap : INT TERM # interrupt the wait below; stop() then runs

# Ports of the dashboard and of the processes' metrics and health endpoints:
# DEMO_WEB_PORT (8080) and DEMO_METRICS_PORT (9100, then 9101 and 9102).
web_port=${DEMO_WEB_PORT:-8080}
m=${DEMO_METRICS_PORT:-9100}
start scheduler scheduler --interval 500ms --http "127.0.0.1:$m"
start poller poller --http "127.0.0.1:$((m + 1))"
start worker worker --concurrency 4 --exec "sh $here/scripts/demo-worker.sh" --http "127.0.0.1:$((m + 2))"
start web web --addr "127.0.0.1:$web_port"
cat <<EOF
running; Ctrl-C to stop.
  dashboard:  http://127.0.0.1:$web_port/   (read-only; set BIGTABLES_ADMIN_TOKEN for actions)
  metrics:    http://127.0.0.1:$m/metrics (scheduler), :$((m + 1))/metrics (poller), :$((m + 2))/metrics (worker)
  health:     /healthz and /readyz on the same ports
EOF
waitfor=("${pid[@]}")
if [ -n "${DEMO_SECONDS:-}" ]; then
  sleep "$DEMO_SECONDS" &
  timer=$!
  waitfor+=("$timer")
fi
wait -n "${waitfor[@]}" || true
if [ -n "${timer:-}" ]; then kill "$timer" 2>/dev/null || true; fi
stop
