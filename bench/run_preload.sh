#!/usr/bin/env bash
# Programs that know nothing of tcm, each built once and run under the
# preload of tcm, jemalloc, tcmalloc and mimalloc and under plain glibc, in
# one run: median wall time and median peak RSS (GNU time's %M: the heap's
# shared pages a process touched count in it too; for tcm, plus the heap
# pages the run made tcmd commit, after a release before it: none with the
# drop-in's private heap, whose pages are in the RSS) of RUNS runs each,
# alternating allocators within a run, each round in a rotated order (the preload is the workload's, not
# GNU time's: a preloaded time would add its fork to the figure). Workloads:
# bench/preload/*.c, then real programs (redis-server driven by
# redis-benchmark as mimalloc-bench drives it, memcached by memcaslap,
# rocksdb's db_bench fillrandom,readrandom, and as mimalloc-bench's z3, gs
# and rbstress: z3, ghostscript and ruby on the inputs in bench/programs/).
# Cells: the median and, in brackets, the range of the runs.
#   bench/run_preload.sh [BUILD_DIR]      (default build-bench; RUNS=5;
#   WORKLOADS="mstress churn" runs only those, PROGRAMS="redis" only those
#   programs, PROGRAMS= none)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-bench}
runs=${RUNS:-5}
source "$root/tests/common/lib.sh"
scratch preload-bench
source "$root/bench/lib.sh"
preload_allocs "$build"
build_preload_workloads "$root" "$work"

# Real programs (Debian's packages; scripts/setup.sh installs them). A
# server runs under the preload and its client does not: the time is the
# client's run, the memory the server's peak (VmHWM). Each prints
# "SECONDS PEAK_KB".
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null && return 0; sleep 0.05; done; return 1; }
# serve LIB CLIENT_CMD -- SERVER_CMD: the server on $port under LIB, the client timed
serve() {
  local lib=$1 client=$2 t0 t1 hwm
  shift 3
  env LD_PRELOAD="$lib" "$@" > "$work/server.log" 2>&1 &
  local pid=$!
  wait_port "$port" || { echo "$1 did not listen on $port" >&2; cat "$work/server.log" >&2; kill "$pid"; return 1; }
  t0=$EPOCHREALTIME
  eval "$client" > "$work/client.log" 2>&1 || { echo "client failed: $client" >&2; cat "$work/client.log" >&2; }
  t1=$EPOCHREALTIME
  hwm=$(awk '/^VmHWM/{print $2}' "/proc/$pid/status")
  kill "$pid"; wait "$pid" 2> /dev/null || true
  echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b - a}') $hwm"
}
# the redis run of mimalloc-bench
prog_redis() {
  port=$(free_port)
  serve "$1" "redis-benchmark -p $port -r 1000000 -n 300000 -q -P 16 lpush a 1 2 3 4 5 lrange a 1 5" -- \
    redis-server --port "$port" --save '' --appendonly no
}
prog_memcached() {
  port=$(free_port)
  serve "$1" "memcaslap -s 127.0.0.1:$port -T 2 -c 64 -x 400000" -- \
    memcached -p "$port" -U 0 -t 2 -m 1024 -u root
}
# timed LIB CMD...: CMD under LIB, its wall time and peak RSS
timed() {
  local lib=$1
  shift
  /usr/bin/time -f "%e %M" -o "$work/time.out" env LD_PRELOAD="$lib" "$@" > "$work/client.log" 2>&1 \
    || { echo "$1 failed" >&2; cat "$work/client.log" >&2; }
  cat "$work/time.out"
}
prog_rocksdb() {
  rm -rf "$work/rocksdb"
  timed "$1" db_bench --benchmarks=fillrandom,readrandom --num=300000 --value_size=400 --compression_type=none \
    --db="$work/rocksdb"
}
prog_z3() { timed "$1" z3 -smt2 "$root/bench/programs/divide.smt2"; }
prog_gs() {
  timed "$1" gs -q -dBATCH -dNOPAUSE -dSAFER -sDEVICE=ppmraw -r150 -sOutputFile=/dev/null "$root/bench/programs/draw.ps"
}
prog_ruby() { timed "$1" ruby "$root/bench/programs/stress.rb"; }
programs=()
for p in ${PROGRAMS-redis memcached rocksdb z3 gs ruby}; do
  command -v "$(case $p in redis) echo redis-server ;; memcached) echo memcaslap ;; rocksdb) echo db_bench ;; *) echo "$p" ;; esac)" \
    > /dev/null || { echo "run_preload: $p is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
  programs+=("$p")
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
  for w in "${programs[@]}"; do
    for ((i = 0; i < ${#allocs[@]}; i++)); do
      a=${allocs[(i + r) % ${#allocs[@]}]}
      name=${a%%:*} lib=${a#*:}
      echo "$w $name $(prog_"$w" "$lib")" >> "$work/raw"
      [[ $name == tcm ]] && echo "$w tcm-heap 0 0" >> "$work/raw" # the drop-in's private heap: in the RSS
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
    spread = {a: f" ({min(t[w, a]):.2f}-{max(t[w, a]):.2f})" if len(t[w, a]) > 1 else "" for a in names}
    print(f"| {w} (s) | " + " | ".join(f"{med[a]:.2f}{spread[a]}" for a in names) + f" | {med['tcm'] / best:.2f} |")
    mem = {a: statistics.median(m[w, a]) / 1024 for a in names + ["tcm-heap"]}
    cells = [f"{mem[a]:.0f}" if a != "tcm" else f"{mem['tcm']:.0f} + {mem['tcm-heap']:.0f}" for a in names]
    best = min(mem[a] for a in names if a != "tcm")
    print(f"| {w} (peak RSS, MB; tcm: + heap committed) | " + " | ".join(cells) +
          f" | {(mem['tcm'] + mem['tcm-heap']) / max(best, 1):.1f} |")
g = statistics.geometric_mean(ratios)
print(f"\ngeometric mean of tcm's time / the best other's: {g:.2f}")
PY
