#!/usr/bin/env bash
# run_suite.sh — the whole benchmark suite in one command: the seed's 46-case
# sweep and the hit path (bench/suite.py), then the multi-process, mixes,
# memory and scaling cases (bench/run_multiproc.sh, when present), assembled
# into one report with CSV, markdown tables and PNG plots.
#
# usage: bench/run_suite.sh [--quick] [--report-only]
#   full:    about 15 minutes of timed runs on a 2-core box; writes
#            bench/results/suite/ (report.md, seed.csv, seed-raw.csv,
#            hitpath-raw.csv, callgrind.csv, *.png, stderr.log)
#   --quick: a tenth of the pairs, about 2 minutes plus the multi-process
#            part's quick mode; writes bench/results/suite/quick/
#   --report-only: no build, no runs: rebuild report.md and the plots from
#            the CSV of the last run (and the last multiproc report)
# env:   TCM_BENCH_BUILD=DIR   build tree (default build-bench/)
#        TCM_BENCH_TCMD_ARGS="--huge-collapse-ms 0"  more arguments for every
#                              tcmd a harness starts (bench/bench_util.c)
#        TCM_SUITE_PARTS=...   suite.py parts (default sweep,hitpath,callgrind)
#        TCM_SUITE_MULTIPROC=0 skip bench/run_multiproc.sh
#
# Every timed run holds /tmp/tcm-bench.lock (flock), so runs of different
# people on this box never overlap; the CPU others used meanwhile is
# recorded per case. Plots need python3-matplotlib (scripts/setup.sh).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${TCM_BENCH_BUILD:-$root/build-bench}
quick= report_only=0
out=$root/bench/results/suite
for arg in "$@"; do
    case $arg in
    --quick) quick=--quick out=$root/bench/results/suite/quick ;;
    --report-only) report_only=1 ;;
    *) echo "usage: bench/run_suite.sh [--quick] [--report-only]" >&2; exit 2 ;;
    esac
done

# matplotlib comes from Debian (python3-matplotlib): prefer the system python
py=python3
for p in /usr/bin/python3 python3; do
    if "$p" -c 'import matplotlib' 2>/dev/null; then py=$p; break; fi
done
plots=()
"$py" -c 'import matplotlib' 2>/dev/null || { plots=(--no-plots); echo "run_suite: no matplotlib, no plots" >&2; }
multiproc_md=$out/multiproc.md
header=$out/header.md

if ((report_only == 0)); then

# ---- build: Release, only the daemon, the CLI and the benchmarks -----------
. "$root/bench/lib.sh"
bench_configure "$root" "$build"
targets=(tcmd tcmctl tcm-bench-seed tcm-bench-hitpath)
for v in "${variants[@]}"; do targets+=("tcm-bench-seed-$v" "tcm-bench-hitpath-$v"); done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null

bench_wait_quiet run_suite
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
date_start=$(date -u '+%Y-%m-%d %H:%M UTC')
t0=$SECONDS

mkdir -p "$out"
rm -f "$out"/*.csv "$out"/*.png "$out"/stderr.log
"$py" "$root/bench/suite.py" run --bindir "$build/bench" --out "$out" $quick \
    --parts "${TCM_SUITE_PARTS:-sweep,hitpath,callgrind}"
suite_s=$((SECONDS - t0))

# ---- the multi-process part (another script; optional) --------------------
rm -f "$multiproc_md"
if [[ ${TCM_SUITE_MULTIPROC:-1} != 0 && -x $root/bench/run_multiproc.sh ]]; then
    echo "run_suite: bench/run_multiproc.sh $quick" >&2
    rc=0
    "$root/bench/run_multiproc.sh" $quick >"$multiproc_md.run" 2>"$out/multiproc-stderr.log" || rc=$?
    mv "$multiproc_md.run" "$multiproc_md"
    if ((rc != 0)); then
        echo "run_suite: bench/run_multiproc.sh failed; see $out/multiproc-stderr.log" >&2
        { echo; echo "**bench/run_multiproc.sh failed** (exit status $rc); its stderr:"; echo; echo '```';
          tail -n 20 "$out/multiproc-stderr.log"; echo '```'; } >>"$multiproc_md"
    fi
fi
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- what the report says about this run ---------------------------------
{
    echo "# tcm benchmark suite"
    echo
    echo "- date: $date_start; tree: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "- machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), kernel $(uname -r)"
    echo "- allocators: $(bench_versions "$build" | paste -sd ';' | sed 's/;/; /g')"
    echo "- glibc-pinned: \`GLIBC_TUNABLES=$("$py" -c 'import sys; sys.path.insert(0, "'"$root"'/bench"); import suite; print(suite.GLIBC_PINNED)')\`"
    echo "- command: \`bench/run_suite.sh${quick:+ $quick}\` (Release build); sweep + hit path took ${suite_s} s"
    echo "- other work on the box: ${busy}% CPU just before; load average before / after: $load_start / $load_end; per case in the tables"
} >"$header"
fi # report_only

# ---- the report -------------------------------------------------------------
{
    cat "$header"
    echo
    "$py" "$root/bench/suite.py" report --out "$out" "${plots[@]}"
    echo
    echo "## Multi-process, mixes, memory, scaling (bench/run_multiproc.sh)"
    echo
    if [[ -s $multiproc_md ]]; then
        cat "$multiproc_md"
    elif [[ -s $root/bench/results/multiproc.md ]]; then
        echo "_Not run by this invocation (TCM_SUITE_MULTIPROC=0, or bench/run_multiproc.sh missing): the last"
        echo "report of bench/run_multiproc.sh, bench/results/multiproc.md, follows._"
        echo
        cat "$root/bench/results/multiproc.md"
    else
        echo "_bench/run_multiproc.sh is not there (or TCM_SUITE_MULTIPROC=0): multi-process part skipped._"
    fi
} >"$out/report.md.tmp"
mv "$out/report.md.tmp" "$out/report.md"
cat "$out/report.md"
echo "run_suite: report in ${out#"$root"/}/report.md" >&2
