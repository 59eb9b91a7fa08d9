#!/usr/bin/env bash
# run_first.sh — the first benchmark figures: tcm against glibc, jemalloc,
# tcmalloc and mimalloc (Debian packages) on the seed workload, and the
# cross-process handoff. Builds a Release tree, runs everything in one go
# (ratios only mean something within one run on one machine), prints a
# markdown report and writes it to bench/results/first.md; the raw CSV and
# the harness's stderr go to bench/results/raw/. About 2.5 minutes on a
# 2-core box, plus up to 2 minutes waiting for other work to stop.
#
# usage: bench/run_first.sh [--quick]   (--quick: a tenth of the pairs, a smoke
#                                        test; its report goes to raw/ only)
# env:   TCM_BENCH_BUILD=DIR            build tree (default build-bench/)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${TCM_BENCH_BUILD:-$root/build-bench}
results=$root/bench/results
raw=$results/raw
div=1 out=$results/first.md
[[ ${1:-} == --quick ]] && div=10 out=$raw/first-quick.md

# Only the daemon and the benchmarks: a half-edited test elsewhere in the
# tree must not stop the figures.
. "$root/bench/lib.sh"
bench_configure "$root" "$build"
targets=(tcmd tcm-bench-seed tcm-bench-handoff)
for v in "${variants[@]}"; do targets+=("tcm-bench-seed-$v" "tcm-bench-handoff-$v"); done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null
bin=$build/bench

mkdir -p "$raw"
seed_csv=$raw/first-seed.csv
handoff_csv=$raw/first-handoff.csv
log=$raw/first-stderr.log
: >"$seed_csv"
: >"$handoff_csv"
: >"$log"
bench_wait_quiet run_first
bench_load_begin

# Run one harness; on failure show why and stop.
run() {
    local out=$1
    shift
    if ! "$@" --csv >>"$out" 2>>"$log"; then
        echo "FAILED: $*" >&2
        tail -n 20 "$log" >&2
        exit 1
    fi
}

# size threads batch pairs-per-thread. The pairs are as large as the
# slowest allocator of the case allows in the time budget (glibc and
# jemalloc are 100x slower than the rest at 4 KiB and 16 KiB).
seed_cases=(
    "64 1 64 10000000"
    "64 2 64 10000000"
    "4096 1 64 2000000"
    "4096 2 64 2000000"
    "16384 1 64 2000000"
    "16384 2 64 2000000"  # the seed's first reversal: 16 KiB x batch 64
    "64 1 2048 10000000"
    "64 2 2048 10000000"  # the seed's second reversal: 64 B x batch 2048
)
for c in "${seed_cases[@]}"; do
    read -r size threads batch pairs <<<"$c"
    args=(--size "$size" --threads "$threads" --batch "$batch" --pairs $((pairs / div)) --runs 5)
    echo "seed: size $size threads $threads batch $batch" >&2
    # tcm and glibc alternate inside one process, as in the seed
    run "$seed_csv" "$bin/tcm-bench-seed" "${args[@]}" --alloc tcm,glibc
    for v in "${variants[@]}"; do
        run "$seed_csv" "$bin/tcm-bench-seed-$v" "${args[@]}" --alloc "$v"
    done
done

# size pairs
handoff_cases=("64 2000000" "4096 1000000")
for c in "${handoff_cases[@]}"; do
    read -r size pairs <<<"$c"
    args=(--size "$size" --pairs $((pairs / div)) --runs 5)
    echo "handoff: size $size" >&2
    run "$handoff_csv" "$bin/tcm-bench-handoff" "${args[@]}" --cases tcm:procs,tcm:threads,glibc:threads
    for v in "${variants[@]}"; do
        run "$handoff_csv" "$bin/tcm-bench-handoff-$v" "${args[@]}" --cases "$v:threads"
    done
done

bench_load_end

# ---- report ---------------------------------------------------------------
report() {
    local cols="tcm glibc ${variants[*]}"
    echo "# tcm first benchmark figures"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); tree: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "- machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), kernel $(uname -r)"
    echo "- allocators: $(bench_versions "$build" | paste -sd ';' | sed 's/;/; /g')"
    echo "- command: \`bench/run_first.sh${1:+ $1}\` (Release build, 5 runs per case, median)"
    echo "- other work on the box: ${busy}% CPU just before, about ${others_pct}% of all CPU time during the run; load average before / after: $load_start / $load_end"
    echo
    echo "## Seed workload: throughput, Mpairs/s (median of 5; all threads together)"
    echo
    awk -F, -v cols="$cols" "$bench_awk_table_head"'
        { key = $2 SUBSEP $3 SUBSEP $4 SUBSEP $5
          if (!(key in seen)) { seen[key] = 1; order[n++] = key }
          med[key, $1] = $6; mps[key, $1] = $9 }
        END {
            nc = split(cols, c, " ")
            table_head("| size | threads | batch | pairs/thread |", "|---:|---:|---:|---:|", c, 1, nc, " %s |", "")
            for (k = 0; k < n; k++) {
                split(order[k], f, SUBSEP)
                printf "| %s | %s | %s | %s |", f[1], f[2], f[3], f[4]
                for (i = 1; i <= nc; i++)
                    printf " %s |", ((order[k], c[i]) in mps) ? sprintf("%.1f", mps[order[k], c[i]]) : "-"
                printf "\n"
            }
            printf "\n## Seed workload: speedup of tcm, T(other) / T(tcm) (> 1: tcm faster)\n\n"
            table_head("| size | threads | batch |", "|---:|---:|---:|", c, 2, nc, " vs %s |", " vs best other |")
            for (k = 0; k < n; k++) {
                split(order[k], f, SUBSEP)
                t = med[order[k], "tcm"]; best = 0
                printf "| %s | %s | %s |", f[1], f[2], f[3]
                for (i = 2; i <= nc; i++) {
                    x = med[order[k], c[i]]
                    printf " %.2f |", x / t
                    if (best == 0 || x < best) best = x
                }
                printf " %.2f |\n", best / t
            }
        }' "$seed_csv"
    echo
    echo "## Cross-process handoff: Mpairs/s (median of 5)"
    echo
    echo "One side allocates, writes the first byte and passes the pointer through an"
    echo "SPSC ring in shared memory; the other reads the byte and frees. \`procs\`: two"
    echo "processes on one tcmd; \`threads\`: two threads of one process."
    echo
    awk -F, -v cols="tcm:procs tcm:threads glibc:threads $(printf '%s:threads ' "${variants[@]}")" "$bench_awk_table_head"'
        { key = $3 SUBSEP $4
          if (!(key in seen)) { seen[key] = 1; order[n++] = key }
          med[key, $1 ":" $2] = $5; mps[key, $1 ":" $2] = $8 }
        END {
            nc = split(cols, c, " ")
            table_head("| size | pairs |", "|---:|---:|", c, 1, nc, " %s |", " tcm:procs / glibc:threads |")
            for (k = 0; k < n; k++) {
                split(order[k], f, SUBSEP)
                printf "| %s | %s |", f[1], f[2]
                for (i = 1; i <= nc; i++)
                    printf " %s |", ((order[k], c[i]) in mps) ? sprintf("%.2f", mps[order[k], c[i]]) : "-"
                printf " %.2f |\n", med[order[k], "glibc:threads"] / med[order[k], "tcm:procs"]
            }
        }' "$handoff_csv"
    echo
    echo "## Raw (seconds per run: median, min, max)"
    echo
    echo '```'
    echo "allocator,size,threads,batch,pairs,median_s,min_s,max_s,mpairs_per_s"
    cat "$seed_csv"
    echo
    echo "allocator,mode,size,pairs,median_s,min_s,max_s,mpairs_per_s"
    cat "$handoff_csv"
    echo '```'
}

report "${1:-}" | tee "$out"
