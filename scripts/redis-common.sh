# Shared by scripts/redis-cluster.sh and scripts/redis-sentinel.sh (sourced).

# stop_pids PID...: SIGTERM each, wait up to 5 s for it to exit, then SIGKILL.
stop_pids() {
  local pid pids=()
  for pid in "$@"; do kill "$pid" 2>/dev/null && pids+=("$pid"); done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}
