#!/usr/bin/env bash
# A private Redis Cluster on 127.0.0.1 for tests and trials: 3 masters and
# 3 replicas on ports PORT..PORT+5 (cluster bus: port + 10000), without
# persistence, files in ${TMPDIR:-/tmp}/bigtables-redis-cluster-PORT. It
# never touches the shared Redis on 6379. Installs Debian's redis-server and
# redis-tools when missing.
#
#   scripts/redis-cluster.sh start [PORT]   start it, or find it running; print its REDIS_URL
#   scripts/redis-cluster.sh stop [PORT]    stop it and remove its files
#
# PORT defaults to $REDIS_CLUSTER_PORT, else 7101.
set -eu
. "$(dirname "$0")/redis-common.sh"

action=${1:-}
port=${2:-${REDIS_CLUSTER_PORT:-7101}}
say() { printf 'redis-cluster: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
case "$port" in '' | *[!0-9]*) die "port '$port': expected a number" ;; esac
[ "$port" -ge 1024 ] && [ "$port" -le 55530 ] || die "port $port: expected 1024 to 55530 (the bus ports add 10000)"
[ "$port" -gt 6379 ] || [ $((port + 5)) -lt 6379 ] || die "ports $port..$((port + 5)) include 6379, the shared Redis"
ports=$(seq "$port" $((port + 5)))
dir=${TMPDIR:-/tmp}/bigtables-redis-cluster-$port

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
need() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return
  say "installing Debian packages: redis-server redis-tools"
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
}
cli() { redis-cli -h 127.0.0.1 -p "$@" 2>/dev/null | tr -d '\r'; }
busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
url() {
  local addrs
  addrs=$(for p in $ports; do printf '127.0.0.1:%s,' "$p"; done)
  echo "redis+cluster://${addrs%,}"
}
healthy() { # every node sees the whole cluster: all slots served, 3 replicas
  for p in $ports; do
    info=$(cli "$p" cluster info) || return 1
    case "$info" in *cluster_state:ok*cluster_slots_ok:16384*cluster_known_nodes:6*) ;; *) return 1 ;; esac
    [ "$(cli "$p" cluster nodes | grep -cE '[ ,]slave ')" = 3 ] || return 1
  done
}
wait_for() { # what probe...
  local what=$1
  shift
  for _ in $(seq 1 100); do
    if "$@"; then return 0; fi
    sleep 0.1
  done
  die "$what not ready within 10s (logs in $dir)"
}

stop() {
  [ -d "$dir" ] || return 0
  local pids=()
  for p in $ports; do
    [ -s "$dir/$p.pid" ] || continue
    pid=$(cat "$dir/$p.pid")
    # Only a redis-server of ours: its title names its port.
    if grep -qa "127.0.0.1:$p" "/proc/$pid/cmdline" 2>/dev/null; then
      pids+=("$pid")
    fi
  done
  stop_pids "${pids[@]}"
  rm -rf "$dir"
}

start() {
  need
  if healthy; then
    say "already running on ports $port..$((port + 5))"
    url
    return
  fi
  stop # the remains of an earlier run
  for p in $ports; do
    if busy "$p" || busy $((p + 10000)); then
      die "port $p or $((p + 10000)) is taken by something else: choose another PORT"
    fi
  done
  mkdir -p "$dir"
  for p in $ports; do
    redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file "$dir/nodes-$p.conf" \
      --cluster-node-timeout 2000 --save "" --appendonly no --dir "$dir" \
      --daemonize yes --pidfile "$dir/$p.pid" --logfile "$dir/$p.log"
  done
  for p in $ports; do wait_for "node $p" test "$(cli "$p" ping)" = PONG; done
  # shellcheck disable=SC2046
  redis-cli --cluster create $(for p in $ports; do printf '127.0.0.1:%s ' "$p"; done) \
    --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 || {
    cat "$dir/create.log" >&2
    die "redis-cli --cluster create failed"
  }
  wait_for "the cluster" healthy
  say "3 masters and 3 replicas on ports $port..$((port + 5)), files in $dir"
  url
}

case "$action" in
start) start ;;
stop) stop ;;
*) die "usage: $0 start|stop [PORT]" ;;
esac
