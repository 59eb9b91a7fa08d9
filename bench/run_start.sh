#!/usr/bin/env bash
# What a short program pays for its allocator: bench/start/short.c (one
# block of each of 64 sizes, then exit) run N times in a row under the
# preload of tcm, jemalloc, tcmalloc and mimalloc and under plain glibc,
# ROUNDS rounds alternating the allocators; per allocator the median over
# the rounds of the wall time a run (forked and exec'd by this shell, as a
# script runs its programs) and one run's peak RSS (GNU time's %M).
#   bench/run_start.sh [BUILD_DIR]     (default build-bench; N=200 ROUNDS=5)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-bench}
n=${N:-200} rounds=${ROUNDS:-5}
source "$root/tests/common/lib.sh"
scratch start-bench
source "$root/bench/lib.sh"
preload_allocs "$build"
cc -O2 -o "$work/short" "$root/bench/start/short.c"
declare -A times
for _ in $(seq "$rounds"); do
  for a in "${allocs[@]}"; do
    lib=${a#*:} t0=$EPOCHREALTIME
    for _ in $(seq "$n"); do LD_PRELOAD=$lib "$work/short"; done
    t1=$EPOCHREALTIME
    times[${a%%:*}]+="$(awk -v a="$t0" -v b="$t1" -v n="$n" 'BEGIN{printf "%.3f", (b - a) * 1000 / n}') "
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END{print v[int((NR+1)/2)] " (" v[1] "-" v[NR] ")"}'; }
printf '| allocator | ms a run, median (range) of %s rounds of %s | peak RSS, KB |\n|---|---:|---:|\n' "$rounds" "$n"
for a in "${allocs[@]}"; do
  /usr/bin/time -f %M -o "$work/rss" env LD_PRELOAD="${a#*:}" "$work/short"
  echo "| ${a%%:*} | $(echo "${times[${a%%:*}]}" | median) | $(cat "$work/rss") |"
done
