#!/usr/bin/env bash
# A private Sentinel-managed Redis on 127.0.0.1 for tests and trials: a
# master on PORT, its replica on PORT+1 and three Sentinels on PORT+2..PORT+4
# monitoring it as "bigtables" (down after 1s, quorum 2), without
# persistence, files in ${TMPDIR:-/tmp}/bigtables-redis-sentinel-PORT. It
# never touches the shared Redis on 6379. Installs Debian's redis-server and
# redis-tools when missing; runs the Sentinels with redis-sentinel when
# installed, else with redis-server --sentinel (the same program).
#
#   scripts/redis-sentinel.sh start [PORT]   start what is not running, wait until
#                                            healthy; print the REDIS_URL
#   scripts/redis-sentinel.sh stop [PORT]    stop it and remove its files
#
# PORT defaults to $REDIS_SENTINEL_PORT, else 7111. With REDIS_PASSWORD set,
# the servers and the Sentinels require it, and the URL carries it.
#
# start also restarts a server that was killed: it comes back empty and the
# Sentinels make it a replica of the current master. Restart a killed master
# only after the Sentinels have promoted its replica, or the replica copies
# the empty restarted master.
set -eu
. "$(dirname "$0")/redis-common.sh"

action=${1:-}
port=${2:-${REDIS_SENTINEL_PORT:-7111}}
password=${REDIS_PASSWORD:-}
say() { printf 'redis-sentinel: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
case "$port" in '' | *[!0-9]*) die "port '$port': expected a number" ;; esac
[ "$port" -ge 1024 ] && [ "$port" -le 65530 ] || die "port $port: expected 1024 to 65530"
[ "$port" -gt 6379 ] || [ $((port + 4)) -lt 6379 ] || die "ports $port..$((port + 4)) include 6379, the shared Redis"
case "$password" in *[[:space:]\"\'\\]*) die "REDIS_PASSWORD: no spaces, quotes or backslashes (a Sentinel rewrites its configuration without quoting)" ;; esac
data="$port $((port + 1))"
sentinels="$((port + 2)) $((port + 3)) $((port + 4))"
dir=${TMPDIR:-/tmp}/bigtables-redis-sentinel-$port
name=bigtables

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
need() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return
  say "installing Debian packages: redis-server redis-tools"
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
}
cli() { REDISCLI_AUTH=$password redis-cli --no-auth-warning -h 127.0.0.1 -p "$@" 2>/dev/null | tr -d '\r'; }
busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ours() { # the process in the pid file of port $1 is still our server
  [ -s "$dir/$1.pid" ] && grep -qa "127.0.0.1:$1" "/proc/$(cat "$dir/$1.pid")/cmdline" 2>/dev/null
}
url() {
  local auth="" addrs
  [ -z "$password" ] || auth=":$(printf %s "$password" | od -An -tx1 -v | tr -d ' \n' | sed 's/../%&/g')@"
  addrs=$(for p in $sentinels; do printf '127.0.0.1:%s,' "$p"; done)
  echo "redis-sentinel://$auth${addrs%,}/0?master=$name"
}
healthy() { # every Sentinel knows the others and a master with a linked replica
  local master="" m
  for p in $sentinels; do
    info=$(cli "$p" sentinel master "$name" | paste -sd' ') || return 1
    case "$info" in *"flags master "*"num-other-sentinels 2 "*) ;; *) return 1 ;; esac
    m=$(cli "$p" sentinel get-master-addr-by-name "$name" | paste -sd:)
    [ -z "$master" ] || [ "$m" = "$master" ] || return 1
    master=$m
  done
  case "$(cli "${master#*:}" info replication | paste -sd' ')" in *role:master*connected_slaves:1*state=online*) ;; *) return 1 ;; esac
}
wait_for() { # what probe...
  local what=$1
  shift
  for _ in $(seq 1 150); do
    if "$@"; then return 0; fi
    sleep 0.1
  done
  die "$what not ready within 15s (logs in $dir)"
}

launch_data() { # port [replicaof-port]
  local p=$1 args=()
  [ $# -lt 2 ] || args+=(--replicaof 127.0.0.1 "$2")
  [ -z "$password" ] || args+=(--requirepass "$password" --masterauth "$password")
  redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$dir/$p.pid" --logfile "$dir/$p.log" "${args[@]}"
}
launch_sentinel() { # port
  local p=$1 conf=$dir/sentinel-$1.conf
  if [ ! -e "$conf" ]; then
    {
      echo "port $p"
      echo "bind 127.0.0.1"
      echo "daemonize yes"
      echo "pidfile $dir/$p.pid"
      echo "logfile $dir/$p.log"
      echo "dir $dir"
      echo "sentinel monitor $name 127.0.0.1 $port 2"
      echo "sentinel down-after-milliseconds $name 1000"
      echo "sentinel failover-timeout $name 10000"
      echo "sentinel parallel-syncs $name 1"
      if [ -n "$password" ]; then
        echo "sentinel auth-pass $name $password"
        echo "requirepass $password"
      fi
    } >"$conf"
  fi
  if command -v redis-sentinel >/dev/null; then
    redis-sentinel "$conf"
  else
    redis-server "$conf" --sentinel
  fi
}

stop() {
  [ -d "$dir" ] || return 0
  local pids=()
  for p in $data $sentinels; do
    if ours "$p"; then
      pids+=("$(cat "$dir/$p.pid")")
    fi
  done
  stop_pids "${pids[@]}"
  rm -rf "$dir"
}

start() {
  need
  local running=0 p
  for p in $data $sentinels; do ! ours "$p" || running=$((running + 1)); done
  if [ "$running" = 0 ]; then
    stop # the remains of an earlier run
    for p in $data $sentinels; do busy "$p" && die "port $p is taken by something else: choose another PORT"; done
    mkdir -p "$dir"
    launch_data "$port"
    launch_data $((port + 1)) "$port"
    for p in $data; do wait_for "server $p" test "$(cli "$p" ping)" = PONG; done
    for p in $sentinels; do launch_sentinel "$p"; done
  else
    # Restart what was killed; the Sentinels reconfigure a returning server.
    for p in $data; do ours "$p" || launch_data "$p"; done
    for p in $sentinels; do ours "$p" || launch_sentinel "$p"; done
  fi
  wait_for "the Sentinels" healthy
  say "servers on ports $port and $((port + 1)) (master: $(cli $((port + 2)) sentinel get-master-addr-by-name "$name" | paste -sd:)), Sentinels on $((port + 2))..$((port + 4)), files in $dir"
  url
}

case "$action" in
start) start ;;
stop) stop ;;
*) die "usage: $0 start|stop [PORT]" ;;
esac
