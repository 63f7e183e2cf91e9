#!/usr/bin/env bash
# Install what the example workers and the tests need, only where it is
# missing: Debian's python3-redis and python3-dateutil (for /usr/bin/python3,
# the interpreter README's commands name; dateutil is the reference of
# schedule's differential test), jq, redis-cli and curl, and the Node
# example's npm packages. A different python3 first on PATH (pyenv, a venv)
# is only checked: it gets the redis package from `python3 -m pip install redis`.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
say() { printf 'example-deps: %s\n' "$*" >&2; }
sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
/usr/bin/python3 -c 'import redis' 2>/dev/null || missing+=(python3-redis)
/usr/bin/python3 -c 'import dateutil.rrule' 2>/dev/null || missing+=(python3-dateutil)
command -v jq >/dev/null || missing+=(jq)
command -v redis-cli >/dev/null || missing+=(redis-tools)
command -v curl >/dev/null || missing+=(curl)
command -v node >/dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ! -d "$here/examples/node/node_modules/redis" ]; then
  say "installing the Node example's packages"
  (cd "$here/examples/node" && npm ci --no-audit --no-fund --loglevel=error)
fi
py=$(command -v python3 || true)
if [ -n "$py" ] && ! python3 -c 'import redis' 2>/dev/null; then
  say "note: $py (the python3 on PATH) has no redis module; run the Python example with"
  say "  /usr/bin/python3 examples/python/worker.py, or install it there: python3 -m pip install redis"
fi
