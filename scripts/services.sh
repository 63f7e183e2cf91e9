#!/usr/bin/env bash
# Make PostgreSQL and Redis answer on their local ports, starting them only
# when they do not: with Docker Compose (v2 or v1) where a Docker engine runs,
# else with the local binaries, installing Debian's packages when they are
# missing.
#
#   PG_PORT (5432) and REDIS_PORT (6379) choose the ports.
set -eu

PG_PORT=${PG_PORT:-5432}
REDIS_PORT=${REDIS_PORT:-6379}
here=$(cd "$(dirname "$0")/.." && pwd)

say() { printf 'services: %s\n' "$*" >&2; }

# Probes that need no client tools: a TCP connection, then the real check
# where the client exists.
tcp_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pg_up() {
  if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -q -h 127.0.0.1 -p "$PG_PORT"
  else
    tcp_open "$PG_PORT"
  fi
}
redis_up() {
  if command -v redis-cli >/dev/null 2>&1; then
    [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]
  else
    tcp_open "$REDIS_PORT"
  fi
}

wait_for() { # name probe
  for _ in $(seq 1 60); do
    if "$2"; then say "$1 is answering"; return 0; fi
    sleep 0.5
  done
  say "$1 did not answer within 30s"; return 1
}

if pg_up && redis_up; then
  say "PostgreSQL (:$PG_PORT) and Redis (:$REDIS_PORT) already answer"
  exit 0
fi

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_install() {
  say "installing Debian packages: $*"
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

has_compose() { docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1; }
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 && has_compose; then
  say "starting PostgreSQL and Redis with Docker Compose on ports $PG_PORT and $REDIS_PORT"
  BIGTABLES_PG_PORT=$PG_PORT BIGTABLES_REDIS_PORT=$REDIS_PORT "$here/scripts/compose.sh" up -d postgres redis
  wait_for PostgreSQL pg_up
  wait_for Redis redis_up
  exit 0
fi

if ! pg_up; then
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    apt_install postgresql
    fresh=1
  fi
  ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$ver" ]; then
    ver=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
    sudo_ pg_createcluster "$ver" main >/dev/null
    fresh=1
  fi
  if [ "${fresh:-0}" = 1 ]; then
    # A cluster this script created serves local development and tests:
    # trust connections from this machine only.
    hba=/etc/postgresql/$ver/main/pg_hba.conf
    sudo_ sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/; s/^(local\s+all\s+postgres\s+)peer/\1trust/' "$hba"
    say "configured $hba: trust for 127.0.0.1 and ::1"
  fi
  say "starting PostgreSQL $ver"
  sudo_ pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  wait_for PostgreSQL pg_up
fi

if ! redis_up; then
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server redis-tools
  say "starting Redis"
  mkdir -p /tmp/bigtables-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir /tmp/bigtables-redis --logfile /tmp/bigtables-redis/redis.log
  wait_for Redis redis_up
fi
