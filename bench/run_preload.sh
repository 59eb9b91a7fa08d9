#!/usr/bin/env bash
# Programs that know nothing of tcm, each built once and run under the
# preload of tcm, jemalloc, tcmalloc and mimalloc and under plain glibc, in
# one run: median wall time and median peak RSS (GNU time's %M: the heap's
# shared pages a process touched count in it too) of RUNS runs each,
# alternating allocators within a run, each round in a rotated order (the preload is the workload's, not
# GNU time's: a preloaded time would add its fork to the figure). Workloads:
# bench/preload/*.c.
#   bench/run_preload.sh [BUILD_DIR]      (default build-bench; RUNS=5)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-bench}
runs=${RUNS:-5}
source "$root/tests/common/lib.sh"
scratch preload-bench
D=/usr/lib/x86_64-linux-gnu
allocs=(glibc: "tcm:$build/libtcm-malloc.so" "jemalloc:$D/libjemalloc.so.2" "tcmalloc:$D/libtcmalloc_minimal.so.4"
        "mimalloc:$D/libmimalloc.so.2")
workloads=()
for src in "$root"/bench/preload/*.c; do
  w=$(basename "$src" .c)
  cc -O2 -pthread -o "$work/$w" "$src"
  workloads+=("$w")
done
export TCM_SOCKET=$work/tcmd.sock
start_tcmd "$build" "$TCM_SOCKET" --name "pbench$$" --log "$work/tcmd.log"
: > "$work/raw"
for ((r = 0; r < runs; r++)); do
  for w in "${workloads[@]}"; do
    for ((i = 0; i < ${#allocs[@]}; i++)); do # each round starts with the next allocator
      a=${allocs[(i + r) % ${#allocs[@]}]}
      name=${a%%:*} lib=${a#*:}
      /usr/bin/time -f "$w $name %e %M" -a -o "$work/raw" env LD_PRELOAD="$lib" "$work/$w" > /dev/null
    done
  done
done
python3 - "$work/raw" <<'PY'
import statistics, sys, collections
t, m = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    w, a, e, k = line.split()
    t[w, a].append(float(e)); m[w, a].append(int(k))
names = ["glibc", "tcm", "jemalloc", "tcmalloc", "mimalloc"]
works = sorted({w for w, _ in t})
print("| workload | " + " | ".join(names) + " | tcm / best other |")
print("|---|" + "---:|" * (len(names) + 1))
ratios = []
for w in works:
    med = {a: statistics.median(t[w, a]) for a in names}
    best = min(med[a] for a in names if a != "tcm")
    ratios.append(med["tcm"] / best)
    print(f"| {w} (s) | " + " | ".join(f"{med[a]:.2f}" for a in names) + f" | {med['tcm'] / best:.2f} |")
    mem = {a: statistics.median(m[w, a]) / 1024 for a in names}
    print(f"| {w} (peak RSS, MB) | " + " | ".join(f"{mem[a]:.0f}" for a in names) + " | |")
g = statistics.geometric_mean(ratios)
print(f"\ngeometric mean of tcm's time / the best other's: {g:.2f}")
PY
