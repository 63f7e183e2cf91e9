#!/bin/sh
# A bigtables worker in POSIX shell: pop a job, GET its input_url before its
# deadline, push one result. Needs redis-cli, jq and curl.
#
# Environment: REDIS_URL, BIGTABLES_INPUT_QUEUE, BIGTABLES_OUTPUT_QUEUE.
# SIGTERM or SIGINT: finish the job in hand, then exit 0.
set -u
redis_url=${REDIS_URL:-redis://127.0.0.1:6379/0}
input=${BIGTABLES_INPUT_QUEUE:-bigtables-input}
output=${BIGTABLES_OUTPUT_QUEUE:-bigtables-output}
redis() { redis-cli --no-auth-warning -u "$redis_url" "$@"; }
say() { echo "job $(printf '%s' "$job" | jq -r '"\(.big_table_uid) attempt \(.attempt_no)"'): $*"; } # one line per job

stopping=0
trap 'stopping=1' TERM INT
tmp=$(mktemp) && hdr=$(mktemp) && trap 'rm -f "$tmp" "$hdr"' EXIT
# The URL with its password hidden.
echo "worker: input $input, output $output, redis $(printf '%s' "$redis_url" | sed -E 's#//([^:/@]*):[^@/]*@#//\1:xxxxx@#')"

while [ "$stopping" = 0 ]; do
  # BLPOP prints the list's name, then the job; nothing after 1 s without one.
  job=$(redis --raw BLPOP "$input" 1 | sed -n 2p)
  [ -n "$job" ] || continue

  # Drop, without work, a job that can no longer count: a result after the
  # deadline, or for a cancelled (superseded) attempt, would be ignored.
  url=$(printf '%s' "$job" | jq -r .input_url)
  deadline=$(printf '%s' "$job" | jq -r '.deadline_at | sub("\\.[0-9]+"; "") | fromdateiso8601')
  remaining=$((deadline - $(date +%s)))
  if [ "$remaining" -le 0 ]; then say "skipped, its deadline has passed"; continue; fi
  attempt=$(printf '%s' "$job" | jq -r .refresh_attempt_uid)
  if [ "$(redis EXISTS "$input:cancelled:$attempt")" != 0 ]; then say "skipped, its attempt was cancelled"; continue; fi

  # In the background, where a Ctrl-C (SIGINT) does not reach it; wait again
  # when a signal interrupts the wait: the job in hand is finished.
  curl -s -o /dev/null -D "$hdr" -w '%{http_code}' --max-time "$remaining" "$url" >"$tmp" &
  while wait $!; status=$?; [ "$status" -gt 128 ] && kill -0 $! 2>/dev/null; do :; done
  code=$(cat "$tmp")
  if [ "$status" = 0 ] && [ "$code" -ge 200 ] && [ "$code" -lt 300 ]; then
    result=$(printf '%s' "$job" | jq -c '{big_table_uid, refresh_attempt_uid, type: "success"}')
  elif [ "$code" = 404 ] || [ "$code" = 410 ]; then # retrying cannot help
    result=$(printf '%s' "$job" | jq -c --arg code "$code" '{big_table_uid, refresh_attempt_uid, type: "failure",
      message: ("GET " + .input_url + ": " + $code), kind: "gone", retryable: false,
      user_friendly_reason: ("Provided URL is invalid: " + .input_url)}')
  elif [ "$code" = 429 ] || [ "${code:-0}" -ge 500 ]; then # a kind the policy may route; Retry-After in seconds sets the delay
    kind=upstream_5xx; [ "$code" = 429 ] && kind=rate_limited
    after=$(tr -d '\r' <"$hdr" | sed -n 's/^[Rr]etry-[Aa]fter: *\([0-9][0-9]*\) *$/\1/p' | tail -n 1)
    result=$(printf '%s' "$job" | jq -c --arg code "$code" --arg kind "$kind" --arg after "$after" '{big_table_uid,
      refresh_attempt_uid, type: "failure", message: ("GET " + .input_url + ": " + $code), kind: $kind}
      + (if $after == "" then {} else {retry_after: ($after | tonumber)} end)')
  else # server errors, network errors, the deadline: retried by the policy
    result=$(printf '%s' "$job" | jq -c --arg code "$code" --arg status "$status" '{big_table_uid, refresh_attempt_uid,
      type: "failure", message: ("GET " + .input_url + ": HTTP " + $code + ", curl exit " + $status)}')
  fi
  redis RPUSH "$output" "$result" >/dev/null
  say "$(printf '%s' "$result" | jq -r '[.type, .message // empty] | join(" ")')"
done
