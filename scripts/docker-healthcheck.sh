#!/bin/bash
# The image's HEALTHCHECK (Dockerfile): GET /healthz on the port of
# BIGTABLES_HTTP, the address scheduler, poller and worker serve their
# metrics and health on (README, "Metrics and health"); healthy on a 200.
# Without BIGTABLES_HTTP there is no endpoint to ask (a one-off command such
# as migrate): healthy. Bash for /dev/tcp: the image has no curl.
set -u
addr=${BIGTABLES_HTTP:-}
[ -n "$addr" ] || exit 0
port=${addr##*:}
if ! { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
  echo "healthcheck: nothing listens on 127.0.0.1:$port (BIGTABLES_HTTP=$addr)"
  exit 1
fi
printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
if ! IFS= read -r -t 5 status <&3; then
  echo "healthcheck: no answer from 127.0.0.1:$port/healthz"
  exit 1
fi
case $status in
  *" 200 "*) exit 0 ;;
esac
echo "healthcheck: /healthz answered ${status%$'\r'}"
exit 1
