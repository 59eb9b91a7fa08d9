#!/usr/bin/env bash
# run_multiproc.sh — the multi-process part of the suite: tcm against
# Boost.Interprocess managed_shared_memory and against the in-process
# mallocs (glibc, jemalloc, tcmalloc, mimalloc):
#   1. cross-process handoff (tcm, Boost) vs two threads of one process;
#   2. K processes x T threads running the seed workload on the one heap;
#   3. realistic mixes (larson-like server mix, xmalloc-like producer/consumer);
#   4. memory: segment blocks vs bytes live, and after free-all + release;
#   5. daemon request throughput vs client processes, and 1 GiB vs 64 GiB
#      reservation.
# Builds a Release tree, prints a markdown report, writes it to
# bench/results/multiproc.md and the CSV to bench/results/multiproc/.
# About 6-8 minutes on a 2-core box (--quick: about 1 minute, a tenth of the
# work and 3 runs; report and CSV go to bench/results/raw/multiproc-quick/).
#
# usage: bench/run_multiproc.sh [--quick]
# env:   TCM_BENCH_BUILD=DIR   build tree (default build-bench/)
#        TCM_BENCH_OUT=DIR     results directory (default bench/results/)
#        TCM_BENCH_LOCK=FILE   every timed command runs under `flock FILE` so
#                              timed runs on a shared box never overlap
#                              (default /tmp/tcm-bench.lock; "none": no lock,
#                              for a caller that already holds it)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${TCM_BENCH_BUILD:-$root/build-bench}
lock=${TCM_BENCH_LOCK:-/tmp/tcm-bench.lock}
quick=0
[[ ${1:-} == --quick ]] && quick=1
results=${TCM_BENCH_OUT:-$root/bench/results}
if ((quick)); then
    div=10 runs=3 csvdir=$results/raw/multiproc-quick out=$csvdir/multiproc-quick.md
else
    div=1 runs=5 csvdir=$results/multiproc out=$results/multiproc.md
fi

. "$root/bench/lib.sh"
bench_configure "$root" "$build"
targets=(tcmd tcmctl tcm-bench-seed tcm-bench-handoff tcm-bench-multiproc tcm-bench-mixes)
for v in "${variants[@]}"; do targets+=("tcm-bench-seed-$v" "tcm-bench-handoff-$v" "tcm-bench-mixes-$v"); done
have_boost=0 # bench/CMakeLists.txt skips the target without Boost headers
grep -q 'tcm-bench-boost' "$build/bench/Makefile" 2>/dev/null && have_boost=1 && targets+=(tcm-bench-boost)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null
bin=$build/bench

# Results collect in a private directory and move into place at the end, so
# that two invocations at once (e.g. from bench/run_suite.sh) never mix CSV.
mkdir -p "$csvdir"
work=$(mktemp -d "${TMPDIR:-/tmp}/tcm-multiproc.XXXXXX")
trap 'rm -rf "$work"' EXIT
handoff_csv=$work/handoff.csv seed_csv=$work/seed-inprocess.csv mp_csv=$work/seed-multiproc.csv
boost_csv=$work/seed-boost.csv mix_csv=$work/mixes.csv mem_csv=$work/memory.csv
scale_csv=$work/scaling.csv resv_csv=$work/reservation.csv log=$work/stderr.log
for f in "$handoff_csv" "$seed_csv" "$mp_csv" "$boost_csv" "$mix_csv" "$mem_csv" "$scale_csv" "$resv_csv" "$log"; do
    : >"$f"
done

bench_load_begin

# run CSV-FILE [PREFIX] -- COMMAND...: one harness under the lock; on failure
# show why and stop. PREFIX (may be empty) is put in front of each CSV line.
run() {
    local csv=$1 prefix=$2
    shift 3
    local cmd=("$@" --csv --timeout 120)
    [[ $lock != none ]] && cmd=(flock "$lock" "${cmd[@]}")
    local res
    if ! res=$("${cmd[@]}" 2>>"$log"); then
        echo "FAILED: $*" >&2
        tail -n 20 "$log" >&2
        cp "$log" "$csvdir/stderr.log" || true
        exit 1
    fi
    [[ -n $prefix ]] && res=$(sed "s/^/$prefix/" <<<"$res")
    echo "$res" >>"$csv"
}
p() { echo $(($1 / div)); }

# ---- 1. handoff ---------------------------------------------------------------
# size, pairs for tcm and the in-process mallocs, pairs for Boost (about 0.5 M/s)
for c in "64 2000000 400000" "4096 1000000 400000"; do
    read -r size pairs bpairs <<<"$c"
    echo "handoff: size $size" >&2
    args=(--size "$size" --runs "$runs")
    run "$handoff_csv" "" -- "$bin/tcm-bench-handoff" "${args[@]}" --pairs "$(p "$pairs")" \
        --cases tcm:procs,tcm:threads,glibc:threads
    for v in "${variants[@]}"; do
        run "$handoff_csv" "" -- "$bin/tcm-bench-handoff-$v" "${args[@]}" --pairs "$(p "$pairs")" --cases "$v:threads"
    done
    ((have_boost)) && run "$handoff_csv" "" -- "$bin/tcm-bench-boost" handoff "${args[@]}" --pairs "$(p "$bpairs")"
done

# ---- 2. seed workload: K processes x T threads --------------------------------
# 64 B, batch 64 (the seed's base case); pairs per thread
mp_pairs=5000000 boost_pairs=300000
for k in 1 2 4; do
    for t in 1 2; do
        echo "multiproc: tcm $k procs x $t threads" >&2
        run "$mp_csv" "" -- "$bin/tcm-bench-multiproc" --procs "$k" --threads "$t" --size 64 --batch 64 \
            --pairs "$(p $mp_pairs)" --runs "$runs"
    done
    if ((have_boost)); then
        echo "multiproc: boost $k procs" >&2
        run "$boost_csv" "" -- "$bin/tcm-bench-boost" seed --procs "$k" --size 64 --batch 64 \
            --pairs "$(p $boost_pairs)" --runs "$runs"
    fi
done
# the in-process reference: one process, K*T threads
for w in 1 2 4 8; do
    echo "seed in-process: $w threads" >&2
    args=(--size 64 --batch 64 --threads "$w" --pairs "$(p $mp_pairs)" --runs "$runs")
    run "$seed_csv" "" -- "$bin/tcm-bench-seed" "${args[@]}" --alloc tcm,glibc
    for v in "${variants[@]}"; do
        run "$seed_csv" "" -- "$bin/tcm-bench-seed-$v" "${args[@]}" --alloc "$v"
    done
done

# ---- 3. mixes -------------------------------------------------------------------
for w in 2 4; do
    echo "mixes: $w workers" >&2
    largs=(--mix larson --workers "$w" --ops "$(p $((400000 / w)))" --rounds 10 --runs "$runs")
    xargs_=(--mix xmalloc --workers "$w" --ops "$(p $((1000000 / w)))" --runs "$runs")
    for a in tcm glibc; do
        run "$mix_csv" "" -- "$bin/tcm-bench-mixes" "${largs[@]}" --mode threads --alloc "$a"
        run "$mix_csv" "" -- "$bin/tcm-bench-mixes" "${xargs_[@]}" --mode threads --alloc "$a"
    done
    for v in "${variants[@]}"; do
        run "$mix_csv" "" -- "$bin/tcm-bench-mixes-$v" "${largs[@]}" --mode threads --alloc "$v"
        run "$mix_csv" "" -- "$bin/tcm-bench-mixes-$v" "${xargs_[@]}" --mode threads --alloc "$v"
    done
    run "$mix_csv" "" -- "$bin/tcm-bench-mixes" "${largs[@]}" --mode procs
    run "$mix_csv" "" -- "$bin/tcm-bench-mixes" "${xargs_[@]}" --mode procs
done

# ---- 4. memory --------------------------------------------------------------------
echo "memory" >&2
for mode in procs threads; do
    run "$mem_csv" "" -- "$bin/tcm-bench-mixes" --mix larson --mode "$mode" --workers 2 --mem --runs 1 \
        --slots "$(p 200000)" --ops "$(p 200000)" --rounds 10
done

# ---- 5. scaling ---------------------------------------------------------------------
# every pair is a 512 KiB page run: two round trips to the daemon's heap thread.
# Fixed total work, spread over K processes.
scale_total=40000
for k in 1 2 4 8 16 32 64; do
    echo "scaling: $k clients" >&2
    run "$scale_csv" "" -- "$bin/tcm-bench-multiproc" --procs "$k" --threads 1 --size 512K --batch 1 \
        --pairs "$(( $(p $scale_total) / k > 0 ? $(p $scale_total) / k : 1 ))" --runs "$runs"
done
# the same operations with a 1 GiB and a 64 GiB reservation
for c in "64 64 5000000" "64 2048 5000000" "16384 2048 400000" "524288 1 20000"; do
    read -r size batch pairs <<<"$c"
    for h in 1G 64G; do
        echo "reservation $h: size $size batch $batch" >&2
        run "$resv_csv" "$h," -- "$bin/tcm-bench-multiproc" --procs 1 --threads 1 --size "$size" --batch "$batch" \
            --pairs "$(p "$pairs")" --runs "$runs" --tcmd-arg=--heap-size "--tcmd-arg=$h"
    done
done

bench_load_end
elapsed=$((SECONDS - t0))

# ---- report -----------------------------------------------------------------------
report() {
    local allocs="glibc ${variants[*]}"
    echo "## Multi-process: tcm vs Boost.Interprocess and the in-process mallocs"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); tree: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "- machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), kernel $(uname -r)"
    echo "- command: \`bench/run_multiproc.sh${1:+ $1}\` (Release build, $runs runs per case, median; ${elapsed} s)"
    echo "- Boost: $(dpkg-query -W -f '${Package} ${Version}' libboost1.74-dev 2>/dev/null || echo libboost-dev), \`managed_shared_memory\` with its default allocator (rbtree_best_fit, interprocess mutex)"
    echo "- other work on the box: about ${others_pct}% of all CPU time during the run; load average before / after: $load_start / $load_end"
    echo
    echo "### Cross-process handoff, Mpairs/s"
    echo
    echo "One side allocates and writes the first byte, passes the pointer (Boost: the"
    echo "segment offset) through an SPSC ring in shared memory; the other reads the byte"
    echo "and frees. procs: two processes; threads: two threads of one process."
    echo
    awk -F, -v vs="${variants[*]}" "$bench_awk_table_head"'
        { k = $1 ":" $2; sz = $3; if (!(sz in seen)) { seen[sz] = 1; order[n++] = sz }
          m[sz, k] = $8 }
        END {
            nv = split(vs, v, " ")
            table_head("| size | tcm procs | Boost procs | tcm threads | glibc threads |", "|---:|---:|---:|---:|---:|", v,
                       1, nv, " %s threads |", " tcm procs / Boost | tcm procs / glibc threads | tcm procs / mimalloc threads |")
            for (j = 0; j < n; j++) {
                s = order[j]
                printf "| %s | %.2f | %.2f | %.2f | %.2f |", s, m[s, "tcm:procs"], m[s, "boost:procs"],
                       m[s, "tcm:threads"], m[s, "glibc:threads"]
                for (i = 1; i <= nv; i++) printf " %.2f |", m[s, v[i] ":threads"]
                b = m[s, "boost:procs"]; g = m[s, "glibc:threads"]; mi = m[s, "mimalloc:threads"]
                printf " **%.1f** | **%.2f** | %.2f |\n", b ? m[s, "tcm:procs"] / b : 0,
                       g ? m[s, "tcm:procs"] / g : 0, mi ? m[s, "tcm:procs"] / mi : 0
            }
        }' "$handoff_csv"
    echo
    echo "### Seed workload on one heap: K processes x T threads (64 B, batch 64), Mpairs/s"
    echo
    echo "tcm: K forked processes, each with T threads, on one tcmd. Boost: K single-threaded"
    echo "processes on one segment. In-process: one process with K*T threads of each"
    echo "malloc (\`tcm-bench-seed\`). \"per worker\" = total / (K*T); on 2 CPUs more than"
    echo "2 workers share the CPUs, so compare totals at equal worker counts."
    echo
    awk -F, -v allocs="$allocs" "$bench_awk_table_head"'
        FILENAME ~ /seed-multiproc/ { key = $2 SUBSEP $3; tot[key] = $10; pp[key] = $11; slow[key] = $12; ks[n++] = key; next }
        FILENAME ~ /seed-boost/ { boost[$3] = $9; next }
        FILENAME ~ /seed-inprocess/ { inp[$3, $1] = $9 }
        END {
            na = split(allocs, a, " ")
            table_head("| K procs | T threads | tcm total | tcm per process (slowest) | tcm per worker | Boost, K procs | tcm, 1 process K*T threads |",
                       "|---:|---:|---:|---:|---:|---:|---:|", a, 1, na, " %s, K*T threads |",
                       " tcm / Boost | tcm / best in-process (which) |")
            for (j = 0; j < n; j++) {
                split(ks[j], f, SUBSEP); k = f[1]; t = f[2]; w = k * t
                best = 0; bn = "-"
                for (i = 1; i <= na; i++) if (((w, a[i]) in inp) && inp[w, a[i]] > best) { best = inp[w, a[i]]; bn = a[i] }
                printf "| %d | %d | %.1f | %.1f (%.1f) | %.1f | %s | %s |", k, t, tot[ks[j]], pp[ks[j]], slow[ks[j]], tot[ks[j]] / w,
                       (t == 1 && (k in boost)) ? sprintf("%.2f", boost[k]) : "-", ((w, "tcm") in inp) ? sprintf("%.1f", inp[w, "tcm"]) : "-"
                for (i = 1; i <= na; i++) printf " %s |", ((w, a[i]) in inp) ? sprintf("%.1f", inp[w, a[i]]) : "-"
                printf " %s | **%.2f** (%s) |\n", (t == 1 && (k in boost)) ? sprintf("**%.0f**", tot[ks[j]] / boost[k]) : "-",
                       best ? tot[ks[j]] / best : 0, bn
            }
        }' "$mp_csv" "$boost_csv" "$seed_csv"
    echo
    echo "### Realistic mixes, Mops/s (one op = one malloc + one free)"
    echo
    echo "larson: random slot replaced by a new object of heavy-tailed size (16/u B, cap"
    echo "256 KiB), arrays passed to the next worker every round, so most frees are"
    echo "remote. xmalloc: producer/consumer pairs through SPSC rings, consumers free a"
    echo "random object of a 256-slot window. threads: one process; procs: tcm only,"
    echo "objects passed between processes through shared memory."
    echo
    awk -F, -v allocs="tcm glibc ${variants[*]}" "$bench_awk_table_head"'
        { key = $1 SUBSEP $4; if (!(key in seen)) { seen[key] = 1; order[n++] = key }
          m[key, $2 ":" $3] = $9 }
        END {
            na = split(allocs, a, " ")
            table_head("| mix | workers | tcm procs |", "|---|---:|---:|", a, 1, na, " %s threads |",
                       " tcm threads / best other | tcm procs / best other threads |")
            for (j = 0; j < n; j++) {
                split(order[j], f, SUBSEP); k = order[j]; best = 0; bn = ""
                printf "| %s | %s | %.2f |", f[1], f[2], m[k, "tcm:procs"]
                for (i = 1; i <= na; i++) {
                    x = m[k, a[i] ":threads"]; printf " %.2f |", x
                    if (i > 1 && x > best) { best = x; bn = a[i] }
                }
                printf " **%.2f** (%s) | **%.2f** |\n", m[k, "tcm:threads"] / best, bn, m[k, "tcm:procs"] / best
            }
        }' "$mix_csv"
    echo
    echo "### Memory (tcm, larson mix, 2 workers): heap segment allocated blocks vs bytes live"
    echo
    echo "committed = stats \`bytes_committed\` (the segment's allocated blocks). Peak: all"
    echo "slots full; steady: half the slots freed, then the timed churn; freed: every"
    echo "object freed and the workers gone (threads exited / processes detached);"
    echo "released: \`tcmctl release\` → committed_after."
    echo
    echo "| workers are | live at peak | committed at peak | committed / live | live steady | committed steady | committed / live | after free-all | harness process still caches | after release | after release / peak |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    awk -F, 'function mb(x) { return sprintf("%.1f MiB", x / 1048576) }
        { printf "| %s | %s | %s | %.2f | %s | %s | %.2f | %s | %s | %s | **%.2f%%** |\n", $2, mb($4), mb($5), $5 / $4,
                 mb($6), mb($7), $7 / $6, mb($8), mb($11), mb($9), $10 }' "$mem_csv"
    echo
    echo "### Daemon request throughput vs client processes"
    echo
    echo "Each pair is a 512 KiB malloc + free: two page-run requests to the daemon's"
    echo "heap thread. Fixed total work split over K processes; requests/s from the"
    echo "daemon's \`requests\` counter over the timed part."
    echo
    echo "| client processes | pairs / process | Mpairs/s total | requests/s (daemon) | µs per request (1/throughput) | vs 1 client |"
    echo "|---:|---:|---:|---:|---:|---:|"
    awk -F, 'NR == 1 { base = $13 }
        { printf "| %d | %d | %.3f | %.0f | %.2f | %.2f |\n", $2, $6, $10, $13, ($13 > 0 ? 1e6 / $13 : 0), (base > 0 ? $13 / base : 0) }' "$scale_csv"
    echo
    echo "### Per-operation cost: 1 GiB vs 64 GiB heap reservation (1 process, 1 thread)"
    echo
    echo "| size | batch | ns/pair, 1 GiB | ns/pair, 64 GiB | 64 GiB / 1 GiB | requests/s 1 GiB | requests/s 64 GiB |"
    echo "|---:|---:|---:|---:|---:|---:|---:|"
    awk -F, '{ key = $5 SUBSEP $6; if (!(key in seen)) { seen[key] = 1; order[n++] = key }
              ns[key, $1] = $15; rq[key, $1] = $14 }
        END { for (j = 0; j < n; j++) { k = order[j]; split(k, f, SUBSEP)
              printf "| %s | %s | %.1f | %.1f | %.2f | %.0f | %.0f |\n", f[1], f[2], ns[k, "1G"], ns[k, "64G"],
                     ns[k, "64G"] / ns[k, "1G"], rq[k, "1G"], rq[k, "64G"] } }' "$resv_csv"
    echo
    echo "CSV: \`${csvdir#"$root"/}/\` (handoff, seed-multiproc, seed-boost, seed-inprocess, mixes, memory, scaling, reservation; stderr.log has tcmd's warnings)."
}

report "$([[ $quick == 1 ]] && echo --quick)" >"$work/report.md"
cp "$work"/*.csv "$work/stderr.log" "$csvdir/"
cp "$work/report.md" "$out"
cat "$out"
