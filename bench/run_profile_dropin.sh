#!/usr/bin/env bash
# The heap profile's cost under the drop-in: bench/preload/*.c under
# libtcm-malloc.so with TCM_MALLOC_FORK=shared (the drop-in's private heap,
# its default, has no tcmd and never samples), against one tcmd whose
# profile_sample is 0 or its default, alternated in each round: median wall
# time of RUNS runs each, tcm's time on / off per workload and their
# geometric mean, and the samples the runs left live with the bytes their
# tables take (docs/BENCHMARKS.md, "The heap profile").
#   bench/run_profile_dropin.sh [BUILD_DIR]   (default build-bench; RUNS=5;
#   WORKLOADS="larson mstress" only those)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-bench}
runs=${RUNS:-5}
source "$root/tests/common/lib.sh"
scratch profile-dropin
source "$root/bench/lib.sh"
build_preload_workloads "$root" "$work"
export TCM_SOCKET=$work/tcmd.sock
start_tcmd "$build" "$TCM_SOCKET" --name "pcost$$" --log "$work/tcmd.log" --heap-size 8G
default=$("$build/tcmd" --list-settings | awk -F'\t' '$1 == "profile_sample" {print $3}')
: > "$work/raw"
for ((r = 0; r < runs; r++)); do
  for w in "${workloads[@]}"; do
    for k in 0 1; do
      mode=$(( (k + r) % 2 ))  # each round starts with the other one
      "$build/tcmctl" config set profile_sample "$([[ $mode == 1 ]] && echo "$default" || echo 0)" > /dev/null
      /usr/bin/time -f "$w $mode %e" -a -o "$work/raw" env TCM_MALLOC_FORK=shared LD_PRELOAD="$build/libtcm-malloc.so" \
        "$work/$w" > /dev/null
    done
  done
done
"$build/tcmctl" --json stats | python3 -c '
import json, sys
s = json.load(sys.stdin)
print("left live: %d samples, %d bytes asked; tables used: %d bytes" %
      (s["profile_samples"], s["profile_sampled_bytes"], s["profile_table_bytes"]))'
python3 - "$work/raw" "$default" <<'PY'
import collections, math, statistics, sys
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    w, mode, e = line.split()
    t[w, int(mode)].append(float(e))
ratios = []
print("| workload | off (s) | on, profile_sample %s (s) | on / off |" % sys.argv[2])
print("|---|---:|---:|---:|")
for w in sorted({w for w, _ in t}):
    off, on = statistics.median(t[w, 0]), statistics.median(t[w, 1])
    ratios.append(on / off)
    print("| %s | %.3f (%.3f-%.3f) | %.3f (%.3f-%.3f) | %.3f |" % (w, off, min(t[w, 0]), max(t[w, 0]), on, min(t[w, 1]),
                                                              max(t[w, 1]), on / off))
print("\ngeometric mean of on / off: %.3f" % math.exp(sum(map(math.log, ratios)) / len(ratios)))
PY
