# lib.sh — what the shell tests share: a scratch directory and a tcmd of
# their own, both gone when the test exits however it exits.
#   scratch NAME             make $work (/tmp/tcm-NAME.XXXXXX)
#   start_tcmd BIN SOCK ARGS start BIN/tcmd --foreground on SOCK (ARGS
#                            added), wait until BIN/tcmctl pings it; $daemon
#   stop_tcmd                SIGTERM, and its exit status must be 0
# At exit the heap of the test's tcmd goes too: a tcmd stopped while some
# client is still recorded leaves its segments for the next one (before
# this, a day of test runs had left 8 heaps, 1.4 GB of /dev/shm blocks).
work= daemon= heap_name=
tcm_cleanup() {
  if [[ -n $daemon ]]; then kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; fi
  if [[ -n $heap_name ]]; then rm -f /dev/shm/tcm."$heap_name".*; fi
  if [[ -n $work ]]; then rm -rf "$work"; fi
}
trap tcm_cleanup EXIT

scratch() { work=$(mktemp -d "/tmp/tcm-$1.XXXXXX"); }

start_tcmd() {
  local bin=$1 sock=$2 a prev=
  shift 2
  for a in "$@"; do [[ $prev == --name ]] && heap_name=$a; prev=$a; done
  "$bin/tcmd" --foreground --socket "$sock" "$@" &
  daemon=$!
  for _ in $(seq 200); do
    "$bin/tcmctl" --socket "$sock" ping > /dev/null 2>&1 && return 0
    kill -0 "$daemon" 2>/dev/null || { echo "tcmd exited at start"; return 1; }
    sleep 0.05
  done
  echo "tcmd did not answer on $sock"
  return 1
}

stop_tcmd() {
  kill "$daemon"
  wait "$daemon"
  daemon=
}
