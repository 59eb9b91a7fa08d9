#!/usr/bin/env bash
# Programs that know nothing of tcm, each built once and run under the
# preload of tcm, jemalloc, tcmalloc and mimalloc and under plain glibc, in
# one run: median wall time and median peak RSS (GNU time's %M: the heap's
# shared pages a process touched count in it too; for tcm, plus the heap
# pages the run made tcmd commit, after a release before it: none with the
# drop-in's private heap, whose pages are in the RSS) of RUNS runs each,
# alternating allocators within a run, each round in a rotated order (the preload is the workload's, not
# GNU time's: a preloaded time would add its fork to the figure). Workloads:
# bench/preload/*.c.
#   bench/run_preload.sh [BUILD_DIR]      (default build-bench; RUNS=5;
#   WORKLOADS="mstress churn" runs only those)
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
  [[ -n ${WORKLOADS:-} && " $WORKLOADS " != *" $w "* ]] && continue
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
      [[ $name == tcm ]] && "$build/tcmctl" release > /dev/null
      /usr/bin/time -f "$w $name %e %M" -a -o "$work/raw" env LD_PRELOAD="$lib" "$work/$w" > /dev/null
      if [[ $name == tcm ]]; then # what the run made tcmd commit (decay_ms is longer than a run)
        "$build/tcmctl" stats | awk -v w="$w" '/^bytes_committed /{print w, "tcm-heap", 0, int($2 / 1024)}' >> "$work/raw"
      fi
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
    mem = {a: statistics.median(m[w, a]) / 1024 for a in names + ["tcm-heap"]}
    cells = [f"{mem[a]:.0f}" if a != "tcm" else f"{mem['tcm']:.0f} + {mem['tcm-heap']:.0f}" for a in names]
    best = min(mem[a] for a in names if a != "tcm")
    print(f"| {w} (peak RSS, MB; tcm: + heap committed) | " + " | ".join(cells) +
          f" | {(mem['tcm'] + mem['tcm-heap']) / max(best, 1):.1f} |")
g = statistics.geometric_mean(ratios)
print(f"\ngeometric mean of tcm's time / the best other's: {g:.2f}")
PY
