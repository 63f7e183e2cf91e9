#!/usr/bin/env bash
# Run Docker Compose, v2 (`docker compose`) or v1 (`docker-compose`, as Debian
# ships it), whichever is installed, on this repository's docker-compose.yml.
#
#   scripts/compose.sh up --build -d
#   COMPOSE_INSTALL=1 scripts/compose.sh config -q   # install Debian's docker-compose if neither exists
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
file=$here/docker-compose.yml

if docker compose version >/dev/null 2>&1; then
  exec docker compose -f "$file" "$@"
fi
if ! command -v docker-compose >/dev/null 2>&1 && [ "${COMPOSE_INSTALL:-0}" = 1 ]; then
  echo "compose: installing Debian's docker-compose" >&2
  sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null
fi
if command -v docker-compose >/dev/null 2>&1; then
  exec docker-compose -f "$file" "$@"
fi
echo "compose: neither 'docker compose' (v2) nor 'docker-compose' (v1) is installed" >&2
echo "compose: install one, e.g. 'apt-get install docker-compose' on Debian" >&2
exit 127
