#!/usr/bin/env bash
# The heap on 2 MiB pages (issue 33): processes chasing pointers through one
# structure in the heap (tcm-bench-walk, bench/walk.c says how), with tcmd's
# huge_collapse_ms off (0, set before the structure is built) and on (tcmd's
# default), RUNS runs alternating which goes first, on a private tcmd.
# Prints a markdown report:
#   1. ns per step off vs on for each walker count, each walker's VmPTE, the
#      share of its heap Rss mapped with 2 MiB pages (ShmemPmdMapped), and
#      how long tcmd took to collapse the structure (bytes_huge at 90% of it);
#   2. VmPTE per walker at SIZE and, walkers touching every page, at BIG;
#   3. what a collapse costs walkers that use the memory meanwhile: built
#      with the tier off, turned on once they walk; the p99 of 64-step chunks
#      in 100 ms windows before, during and after the collapse.
# Walkers touch every page before their timed walk, so ns per step is the
# walk's (TLB, page walks, cache misses), not its first-touch faults, which
# the touch column shows. ns per step is thread CPU time: 4 walkers on 2
# CPUs would otherwise count the time they wait for one.
# A tcmd without the setting (before issue 33) gets a note and the off runs.
#   bench/run_huge.sh [BUILD_DIR]   (default build-bench; RUNS=3, SIZE=1G,
#   STEPS=20M, WALKERS="2 4", BIG=4G (empty: no BIG case), BIG_COLLAPSE_MS=1000
#   (huge_collapse_ms for the BIG case's on run, so that its 4 GiB are collapsed
#   within the wait), HEAP=8G (tcmd's --heap-size), LARSON_S=60 (0: no part 4),
#   PARTS="walk big larson" (the parts to run: walk is 1 and 3), RAW=FILE keeps
#   the raw lines)
#   4. larson between two processes with the tier on: each worker's share of
#      its heap Rss on 2 MiB pages after LARSON_S seconds and after a decay
#      cycle, and tcmd's bytes_huge against /proc/meminfo's ShmemHugePages.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-bench}
runs=${RUNS:-3} size=${SIZE:-1G} steps=${STEPS:-20M} big=${BIG-4G} heap=${HEAP:-8G}
read -ra walkers <<<"${WALKERS:-2 4}"
parts=" ${PARTS:-walk big larson} "
big_ms=${BIG_COLLAPSE_MS:-1000}
source "$root/bench/lib.sh"
source "$root/tests/common/lib.sh"
bench_configure "$root" "$build"
cmake --build "$build" -j"$(nproc)" --target tcmd tcmctl tcm-bench-walk >/dev/null
walk=$build/bench/tcm-bench-walk
scratch huge-bench
export TCM_SOCKET=$work/tcmd.sock
start_tcmd "$build" "$TCM_SOCKET" --name "hbench$$" --heap-size "$heap" --log "$work/tcmd.log"
ctl() { "$build/tcmctl" --socket "$TCM_SOCKET" "$@"; }
bytes() { local v=${1^^}; numfmt --from=iec "${v%IB}"; }
target() { echo $(($(bytes "$1") * 9 / 10)); } # edges and headers need not be on 2 MiB pages

modes=(off on)
if default=$(ctl --json config get huge_collapse_ms 2>/dev/null); then
    default=$(sed -n 's/.*"value":"\([0-9]*\)".*/\1/p' <<<"$default")
else
    default='' modes=(off)
    echo "run_huge: tcmd has no huge_collapse_ms setting (no 2 MiB tier in this build): off runs only" >&2
fi
set_mode() { # before the builder allocates; release: no 2 MiB page of an earlier run is reused
    [[ -z $default ]] || ctl config set huge_collapse_ms "$([[ $1 == on ]] && echo "$default" || echo 0)" >/dev/null
    ctl release >/dev/null
    local h
    h=$(ctl stats | awk '$1 == "bytes_huge" { print $2 }')
    [[ ${h:-0} == 0 ]] || echo "run_huge: $h bytes still on 2 MiB pages before an $1 run" >&2
}
# one CASE in MODE: the walker's lines, each after "MODE,CASE,"
one() {
    local mode=$1 case=$2
    shift 2
    echo "run_huge: $mode $case $*" >&2
    "$walk" "$@" >"$work/out" || { echo "run_huge: tcm-bench-walk $* failed" >&2; cat "$work/out" >&2; exit 1; }
    grep -E '^(build|walker|stall),' "$work/out" | sed "s/^/$mode,$case,/" >>"$work/raw"
}

: >"$work/raw"
bench_load_begin
for ((r = 0; r < runs; r++)); do
    [[ $parts == *" walk "* ]] || break
    for w in "${walkers[@]}"; do
        for ((i = 0; i < ${#modes[@]}; i++)); do # each round starts with the other mode
            m=${modes[(i + r) % ${#modes[@]}]}
            set_mode "$m"
            args=(--size "$size" --steps "$steps" --walkers "$w" --touch-all)
            [[ $m == on ]] && args+=(--wait-huge "$(target "$size")")
            one "$m" walk "${args[@]}"
        done
        if [[ -n $default ]]; then
            set_mode off
            one on stall --size "$size" --steps "$steps" --walkers "$w" --touch-all --during-collapse \
                --wait-huge "$(target "$size")" \
                --collapse-cmd "$(printf '%q ' "$build/tcmctl" --socket "$TCM_SOCKET") config set huge_collapse_ms $default >/dev/null"
        fi
    done
done
if [[ -n $big && $parts == *" big "* ]]; then
    for m in "${modes[@]}"; do
        set_mode "$m"
        args=(--size "$big" --steps 0 --walkers "${walkers[0]}" --touch-all)
        if [[ $m == on ]]; then
            ctl config set huge_collapse_ms "$big_ms" >/dev/null
            args+=(--wait-huge "$(target "$big")")
        fi
        one "$m" big "${args[@]}"
    done
    [[ -z $default ]] || ctl config set huge_collapse_ms "$default" >/dev/null
fi
bench_load_end
[[ -n ${RAW:-} ]] && cp "$work/raw" "$RAW"

echo "## The heap on 2 MiB pages: pointer chase through one structure, huge_collapse_ms off vs on"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); tree: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
echo "- machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), kernel $(uname -r), shmem THP: $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null || echo unknown)"
echo "- command: \`RUNS=$runs SIZE=$size STEPS=$steps WALKERS=\"${walkers[*]}\" BIG=$big PARTS=\"${parts:1:-1}\" bench/run_huge.sh\` (${SECONDS} s); tcmd --heap-size $heap, huge_collapse_ms on = ${default:-unknown} ($big_ms for the $big case)"
echo "- other work on the box: about ${others_pct}% of all CPU time during the run; load average before / after: $load_start / $load_end"
[[ -z $default ]] && echo "- **tcmd has no \`huge_collapse_ms\` setting: the 2 MiB tier is not in this build; off figures only**"
echo
python3 - "$work/raw" "$size" "$big" <<'PY'
import collections, statistics, sys
raw, size, big = sys.argv[1], sys.argv[2], sys.argv[3]
walk = collections.defaultdict(list)   # (mode, case, walkers) -> [(run, walker fields)]
build = collections.defaultdict(list)  # (mode, case) -> [build fields]
stall = collections.defaultdict(list)  # walkers -> [stall fields]
run = 0
for line in open(raw):
    f = line.strip().split(",")
    mode, case, kind = f[0], f[1], f[2]
    if kind == "build":
        run += 1
        build[mode, case].append(f[3:])
    elif kind == "walker":
        walk[mode, case, int(f[4])].append((run, [float(x) for x in f[3:]]))
    elif kind == "stall":
        stall[int(f[3])].append([float(x) for x in f[4:]])
# walker fields: 0 i, 1 walkers, 2 size, 3 steps, 4 ns_wall, 5 ns_cpu, 6 touch_ms, 7 vmpte, 8 rss, 9 pmd, 10 pct

def med(v):
    return statistics.median(v) if v else None

def cell(v, fmt="{:.1f}"):
    if not v:
        return "-"
    m = med(v)
    return fmt.format(m) + (f" ({fmt.format(min(v))}-{fmt.format(max(v))})" if len(v) > 1 else "")

def per_run(mode, case, w, k):  # each run's median over its walkers
    runs = collections.defaultdict(list)
    for r, x in walk[mode, case, w]:
        runs[r].append(x[k])
    return [med(v) for v in runs.values()]

def all_walkers(mode, case, w, k):
    return [x[k] for _, x in walk[mode, case, w]]

def collapse(case):  # seconds from publication to bytes_huge at 90%, and how many runs got there
    b = build["on", case]
    # build fields: 0 size, 1 block, 2 cells, 3 build_s, 4 bytes_huge at publication, 5 wait_s, 6 bytes_huge
    reached = [float(x[5]) for x in b if float(x[5]) >= 0 and int(x[6]) >= int(x[0]) * 9 // 10]
    if len(reached) == len(b):
        return cell(reached, "{:.1f}")
    most = max(100 * int(x[6]) / int(x[0]) for x in b)
    return (cell(reached, "{:.1f}") + f"; {len(b) - len(reached)} of {len(b)} runs gave up at 30 s"
            f" (bytes_huge at most {most:.0f}% of the structure)")

ws = sorted({w for (_, c, w) in walk if c == "walk"})
if not walk:
    sys.exit(0)  # PARTS without walk and big
print(f"### Pointer chase through {size}: ns per step (thread CPU), median (range) of the runs' medians\n")
print("| walkers | ns/step off | ns/step on | off / on | wall ns/step off | on | touch ms off | on | VmPTE kB off | on | PmdMapped % of Rss off | on | collapse s (on) |")
print("|---:|" + "---:|" * 12)
for w in ws:
    off, on = per_run("off", "walk", w, 5), per_run("on", "walk", w, 5)
    ratio = f"**{med(off) / med(on):.2f}**" if off and on else "-"
    print(f"| {w} | {cell(off)} | {cell(on)} | {ratio} | {cell(per_run('off', 'walk', w, 4))} | {cell(per_run('on', 'walk', w, 4))} "
          f"| {cell(all_walkers('off', 'walk', w, 6), '{:.0f}')} | {cell(all_walkers('on', 'walk', w, 6), '{:.0f}')} "
          f"| {cell(all_walkers('off', 'walk', w, 7), '{:.0f}')} | {cell(all_walkers('on', 'walk', w, 7), '{:.0f}')} "
          f"| {cell(all_walkers('off', 'walk', w, 10))} | {cell(all_walkers('on', 'walk', w, 10))} "
          f"| {collapse('walk') if build['on', 'walk'] else '-'} |")
print("\nns/step: each run's median over its walkers; touch: reading one byte of each 4 KiB page"
      " of the structure once, before the timed walk (the first-touch faults); VmPTE, PmdMapped:"
      " each walker at the end of its walk, median (range) over walkers and runs; collapse: from"
      " the publication of the structure until tcmd's bytes_huge reached 90% of it. Building it"
      f" (allocation and the random cycle) took {cell([float(x[3]) for m in ('off', 'on') for x in build[m, 'walk']])} s.\n")

print("### VmPTE per walker\n")
print("| structure | walkers | VmPTE kB off | on | PmdMapped % of Rss off | on | touch ms off | on | collapse s (on) |")
print("|---|---:|" + "---:|" * 7)
rows = [("walk", size, w) for w in ws[:1]] + [("big", big, w) for w in sorted({w for (_, c, w) in walk if c == "big"})]
for case, sz, w in rows:
    print(f"| {sz}{' (every page touched)' if case == 'big' else ''} | {w} "
          f"| {cell(all_walkers('off', case, w, 7), '{:.0f}')} | {cell(all_walkers('on', case, w, 7), '{:.0f}')} "
          f"| {cell(all_walkers('off', case, w, 10))} | {cell(all_walkers('on', case, w, 10))} "
          f"| {cell(all_walkers('off', case, w, 6), '{:.0f}')} | {cell(all_walkers('on', case, w, 6), '{:.0f}')} "
          f"| {collapse(case) if build['on', case] else '-'} |")
print()

if stall:
    print("### Walkers during a collapse\n")
    print("Built with the tier off; the walkers touch every page (4 KiB mappings), walk 1 s, then"
          " `config set huge_collapse_ms` turns the tier on and they walk on until bytes_huge reaches"
          " 90% of the structure, and 2 s more. Each walker times chunks of 64 steps; per 100 ms"
          " window its mean ns/step (wall time), the p99 chunk and the slowest chunk. Phases: before the"
          " setting, during the collapse (after the setting, before bytes_huge reached 90%), after"
          " it; a window across a boundary counts in none. Cells: median over the runs of the"
          " median over the windows (max: the slowest chunk of all; slow: chunks over 10 times"
          " their window's median, per second of walk and walker). Anything else on the box"
          " stalls every phase alike.\n")
    print("| walkers | collapse s | windows before / during / after | ns/step before | during | after | p99 chunk us before | during | after | max chunk us before | during | after | slow/s before | during | after |")
    print("|---:|" + "---:|" * 15)
    for w in sorted(stall):
        s = stall[w]
        col = lambda k: [x[k] for x in s if x[k] >= 0]
        wins = " / ".join("{:.0f}".format(sum(x[1 + 5 * p] for x in s)) for p in range(3))
        cells = [cell(col(2 + 5 * p)) for p in range(3)] + [cell(col(3 + 5 * p), "{:.1f}") for p in range(3)]
        cells += ["{:.0f}".format(max(col(4 + 5 * p))) if col(4 + 5 * p) and any(x[1 + 5 * p] for x in s) else "-" for p in range(3)]
        cells += [cell(col(5 + 5 * p)) for p in range(3)]
        print(f"| {w} | {cell(col(0))} | {wins} | " + " | ".join(cells) + " |")
PY

# 4. larson between two processes (tcm-bench-mixes, its own tcmd), the tier
# on and off: after LARSON_S seconds (default 60) and again after a decay
# cycle (decay_ms more), each larson worker's ShmemPmdMapped share of its
# heap Rss, tcmd's bytes_huge against /proc/meminfo's ShmemHugePages (the
# box's figure: nothing else here may use shmem large pages) and the heap's
# committed bytes.
larson_s=${LARSON_S:-60}
if [[ -n $default && $larson_s != 0 && $parts == *" larson "* ]]; then
    cmake --build "$build" -j"$(nproc)" --target tcm-bench-mixes >/dev/null
    sample() { # MODE WHEN: a line per worker, then tcmd's figures against the kernel's
        local pid rss pmd huge kernel committed
        for pid in $(pgrep -P "$lpid" -f tcm-bench-mixes); do
            read -r rss pmd < <(awk '/^7e8000000000-/{f=1; next} f && /^[0-9a-f]+-/{exit}
                f && /^Rss:/{r=$2} f && /^ShmemPmdMapped:/{p=$2} END{print r+0, p+0}' "/proc/$pid/smaps")
            echo "| $1 | $2 | worker $pid | $rss | $pmd | $((rss ? pmd * 100 / rss : 0))% | |"
        done
        read -r huge committed < <("$build/tcmctl" --socket "$lsock" stats |
            awk '$1 == "bytes_huge" {h = int($2 / 1024)} $1 == "bytes_committed" {c = int($2 / 1048576)} END {print h, c}')
        kernel=$(awk '/^ShmemHugePages:/{print $2}' /proc/meminfo)
        echo "| $1 | $2 | tcmd: bytes_huge / meminfo ShmemHugePages | $huge | $kernel | $((huge - kernel)) kB apart | $committed |"
    }
    echo
    echo "### larson, 2 processes: heap Rss on 2 MiB pages, and the heap's committed MiB"
    echo
    echo "| tier | when | process | heap Rss kB | ShmemPmdMapped kB | share | committed MiB |"
    echo "|---|---|---|---:|---:|---:|---:|"
    for m in on off; do
        if [[ $m == off ]]; then export TCM_BENCH_TCMD_ARGS="--huge-collapse-ms 0"; else unset TCM_BENCH_TCMD_ARGS; fi
        "$build/bench/tcm-bench-mixes" --mix larson --mode procs --workers 2 --runs 1 --slots 200000 --ops 200000 \
            --rounds 100000 >/dev/null 2>&1 &
        lpid=$!
        lsock=/tmp/tcm-bench-$lpid.sock
        sleep 1
        decay_s=$(($("$build/tcmctl" --socket "$lsock" --json config get decay_ms 2>/dev/null |
            sed -n 's/.*"value":"\([0-9]*\)".*/\1/p' || echo 10000) / 1000))
        sleep "$((larson_s - 1))"
        sample "$m" "${larson_s} s"
        sleep "$((decay_s + 2))"
        sample "$m" "$((larson_s + decay_s + 2)) s (a decay cycle later)"
        kill "$lpid" 2>/dev/null
        wait "$lpid" 2>/dev/null || true
        pkill -f -- "--socket $lsock" 2>/dev/null || true
        rm -f /dev/shm/tcm.bench"$lpid".* "$lsock"
    done
    unset TCM_BENCH_TCMD_ARGS
fi
