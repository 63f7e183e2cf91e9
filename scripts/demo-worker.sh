#!/bin/sh
# The demo's worker, run by `bigtables worker --exec` once per job with the
# job's JSON on stdin and BIGTABLES_* variables set. Exit 0 is a success;
# otherwise the last line on stderr is the failure message.
cat >/dev/null # the job JSON; this demo only needs the variables
sleep 0.2      # some work
case "$BIGTABLES_UID" in
  demo-healthy) exit 0 ;;
  demo-flaky)
    # Fails about two times in three.
    if [ $(( $(od -An -N1 -tu1 /dev/urandom) % 3 )) -ne 0 ]; then
      echo "upstream timed out (flaky)" >&2; exit 1
    fi
    exit 0 ;;
  demo-slow) sleep 30 ;; # never answers before its deadline: times out
  *) echo "upstream answered 500 for $BIGTABLES_INPUT_URL" >&2; exit 1 ;;
esac
