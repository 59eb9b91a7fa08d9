# lib.sh — what the shell tests share: a scratch directory and a tcmd of
# their own, both gone when the test exits however it exits.
#   scratch NAME             make $work (/tmp/tcm-NAME.XXXXXX)
#   start_tcmd BIN SOCK ARGS start BIN/tcmd --foreground on SOCK (ARGS
#                            added), wait until BIN/tcmctl pings it; $daemon
#   stop_tcmd                SIGTERM, and its exit status must be 0
work= daemon=
tcm_cleanup() {
  if [[ -n $daemon ]]; then kill "$daemon" 2>/dev/null || true; fi
  if [[ -n $work ]]; then rm -rf "$work"; fi
}
trap tcm_cleanup EXIT

scratch() { work=$(mktemp -d "/tmp/tcm-$1.XXXXXX"); }

start_tcmd() {
  local bin=$1 sock=$2
  shift 2
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
