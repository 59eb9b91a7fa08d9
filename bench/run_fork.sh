#!/usr/bin/env bash
# fork under each malloc (bench/fork.c): fork+exit, fork+exec and a BGSAVE
# writer, with 0 and 512 MiB held by the forking process and, meanwhile, by
# another process of the same malloc (for tcm with TCM_MALLOC_FORK=shared,
# in the one shared heap). Medians of ITER forks in microseconds, then
# medians of RUNS runs of those; one table, glibc first.
#   bench/run_fork.sh [BUILD_DIR]      (default build-bench; RUNS=3 ITER=20)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-bench}
runs=${RUNS:-3} iter=${ITER:-20}
source "$root/tests/common/lib.sh"
scratch fork-bench
D=/usr/lib/x86_64-linux-gnu
allocs=(glibc: "jemalloc:$D/libjemalloc.so.2" "tcm:$build/libtcm-malloc.so" "tcm-shared:$build/libtcm-malloc.so")
cc -O2 -o "$work/fork" "$root/bench/fork.c"
export TCM_SOCKET=$work/tcmd.sock
start_tcmd "$build" "$TCM_SOCKET" --name "fbench$$" --log "$work/tcmd.log" --heap-size 4G
# hold MIB of a malloc (touched) in another process, until killed; sets holder
hold() {
  local lib=$1 shared=$2 mib=$3
  : > "$work/held"
  TCM_MALLOC_FORK=$shared LD_PRELOAD=$lib "$work/fork" "$mib" 0 hold > "$work/held" &
  holder=$!
  for _ in $(seq 1200); do [[ -s $work/held ]] && return 0; sleep 0.05; done
  echo "run_fork.sh: the holder did not start" >&2; return 1
}
: > "$work/raw"
for ((r = 0; r < runs; r++)); do
  for a in "${allocs[@]}"; do
    name=${a%%:*} lib=${a#*:} shared=
    [[ $name == tcm-shared ]] && shared=shared
    for other in 0 512; do
      holder=
      ((other)) && hold "$lib" "$shared" "$other"
      for self in 0 512; do
        for mode in exit exec save; do
          us=$(TCM_MALLOC_FORK=$shared LD_PRELOAD=$lib "$work/fork" "$self" "$iter" "$mode")
          echo "$name $mode $self $other $us" >> "$work/raw"
        done
      done
      [[ -n $holder ]] && { kill "$holder"; wait "$holder" 2> /dev/null || true; }
    done
  done
done
python3 - "$work/raw" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, mode, self_, other, us = line.split()
    rows.setdefault((mode, int(self_), int(other)), {}).setdefault(name, []).append(float(us))
names = ["glibc", "jemalloc", "tcm", "tcm-shared"]
print("| fork | held by the forker | held by another | " + " | ".join(names) + " | tcm / jemalloc |")
print("|---|---|---|" + "---|" * (len(names) + 1))
for (mode, s, o), by in sorted(rows.items()):
    med = {n: statistics.median(by[n]) for n in names if n in by}
    print(f"| {mode} | {s} MiB | {o} MiB | " + " | ".join(f"{med[n]:.0f} us" for n in names) +
          f" | {med['tcm'] / med['jemalloc']:.2f} |")
PY
