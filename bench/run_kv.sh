#!/usr/bin/env bash
# run_kv.sh — tcm-kv under redis-benchmark against the same server on
# Boost.Interprocess, on glibc and jemalloc (threads of one process) and
# against redis-server, in one run (bench/kv_bench.py says what is measured).
# Builds a Release tree; writes bench/results/kv.md (--quick: one value
# size, one run, a fifth of the requests: bench/results/raw/kv-quick.md).
# About 15 minutes on a 2-core box (--quick: about 2).
#
# usage: bench/run_kv.sh [--quick]
# env:   TCM_BENCH_BUILD=DIR  build tree (default build-bench/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TCM_BENCH_BUILD:-$root/build-bench}
out=$root/bench/results/kv.md
[[ ${1:-} == --quick ]] && out=$root/bench/results/raw/kv-quick.md
. "$root/bench/lib.sh"
bench_configure "$root" "$build"
cmake --build "$build" -j"$(nproc)" --target tcm-kv tcm-kv-peers tcmd tcmctl >/dev/null
bench_wait_quiet run_kv
exec python3 "$root/bench/kv_bench.py" "$build" "$out" "$@"
