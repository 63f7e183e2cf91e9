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

stopping=0
trap 'stopping=1' TERM INT

while [ "$stopping" = 0 ]; do
  # BLPOP prints the list's name, then the job; nothing after 1 s without one.
  job=$(redis-cli -u "$redis_url" --raw BLPOP "$input" 1 | sed -n 2p)
  [ -n "$job" ] || continue

  url=$(printf '%s' "$job" | jq -r .input_url)
  deadline=$(printf '%s' "$job" | jq -r '.deadline_at | sub("\\.[0-9]+"; "") | fromdateiso8601')
  remaining=$((deadline - $(date +%s)))
  [ "$remaining" -gt 0 ] || continue # too late: the attempt times out

  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time "$remaining" "$url")
  status=$?
  if [ "$status" = 0 ] && [ "$code" -ge 200 ] && [ "$code" -lt 300 ]; then
    result=$(printf '%s' "$job" | jq -c '{big_table_uid, refresh_attempt_uid, type: "success"}')
  elif [ "$code" = 404 ] || [ "$code" = 410 ]; then # retrying cannot help
    result=$(printf '%s' "$job" | jq -c --arg code "$code" '{big_table_uid, refresh_attempt_uid, type: "failure",
      message: ("GET " + .input_url + ": " + $code), retryable: false,
      user_friendly_reason: ("Provided URL is invalid: " + .input_url)}')
  else # server errors, network errors, the deadline: retried by the policy
    result=$(printf '%s' "$job" | jq -c --arg code "$code" --arg status "$status" '{big_table_uid, refresh_attempt_uid,
      type: "failure", message: ("GET " + .input_url + ": HTTP " + $code + ", curl exit " + $status)}')
  fi
  redis-cli -u "$redis_url" RPUSH "$output" "$result" >/dev/null
done
