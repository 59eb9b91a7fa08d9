#!/usr/bin/env bash
# What one request costs tcmd's heap thread, in instructions (callgrind:
# repeatable whatever else the machine does). Starts BUILD/tcmd under
# callgrind (one output file per thread, --spin-us 0 so that idle polling
# does not count), runs a client that makes it serve known requests (page
# runs, then refill/return batches), and divides the heap thread's
# instructions by the requests it served.
#   bench/run_daemon_cost.sh [BUILD_DIR [CLIENT]]
# BUILD_DIR defaults to build-bench; CLIENT to BUILD_DIR/bench/tcm-bench-daemon-ops
# env: PAGES, BATCHES (rounds), SIZE and COUNT (objects of SIZE bytes per round)
# (give one built against the same libtcm as BUILD_DIR's tcmd).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-bench}
client=${2:-$build/bench/tcm-bench-daemon-ops}
pages=${PAGES:-20000} batches=${BATCHES:-40} size=${SIZE:-16384} count=${COUNT:-4096}
work=$(mktemp -d /tmp/tcm-daemon-cost.XXXXXX)
trap 'kill "$daemon" 2>/dev/null || true; rm -rf "$work"' EXIT
sock=$work/tcmd.sock
valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/cg.out" \
    "$build/tcmd" --foreground --socket "$sock" --name "cost$$" --spin-us 0 --log "$work/tcmd.log" \
    2> "$work/valgrind.log" &
daemon=$!
for _ in $(seq 600); do "$build/tcmctl" --socket "$sock" ping >/dev/null 2>&1 && break; sleep 0.1; done
TCM_SOCKET=$sock "$client" --pages "$pages" --batches "$batches" --size "$size" --count "$count"
requests=$("$build/tcmctl" --socket "$sock" --json stats | grep -o '"requests":[0-9]*' | cut -d: -f2)
kill -TERM "$daemon"
wait "$daemon" || true
daemon=
# the heap thread is the thread whose file holds the serving code
best=0
for f in "$work"/cg.out*; do
    ir=$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}' || true)
    [[ -n $ir ]] && ((ir > best)) && best=$ir
done
awk -v ir="$best" -v r="$requests" 'BEGIN { printf "heap thread: %d instructions for %d requests: %.0f per request\n", ir, r, ir / r }'
