#!/usr/bin/env bash
# What the requests cost tcmd's heap thread, in instructions (callgrind:
# repeatable whatever else the machine does). Starts BUILD/tcmd under
# callgrind (one output file per thread, --spin-us 0 so that idle polling
# does not count), runs a client that makes it serve known requests, and
# divides the heap thread's instructions by what it served.
#   bench/run_daemon_cost.sh [BUILD_DIR [CLIENT]]
# BUILD_DIR defaults to build-bench; CLIENT to BUILD_DIR/bench/tcm-bench-daemon-ops
# (give one built against the same libtcm as BUILD_DIR's tcmd).
#
# Per request (default): env PAGES (page-run pairs), BATCHES (rounds), SIZE
# and COUNT (objects of SIZE bytes per round): one figure, the heap thread's
# whole count over the requests it served.
#
# Per object, per class and per op (SIZES="16 64 1024 4096 32768"): for each
# size, ROUNDS rounds (default 4) of COUNT objects (default: 16 batches of
# the class plus what a thread cache keeps) allocated, then freed. The heap
# thread's counts are dumped after each phase (callgrind_control -d), so the
# REFILL phase (the mallocs) and the RETURN phase (the frees) are counted
# apart, everything the heap thread did in them included (poll loop,
# wakeups, answers, commits, span cuts and frees); the first round is
# warm-up and not counted. Objects moved = the change of bytes_clients over
# the class size. PROFILE=N also prints the N functions with the most
# inclusive instructions per op (summed over the counted rounds), per object.
# KEEP=1 keeps the callgrind files (their directory is printed at the end).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-bench}
client=${2:-$build/bench/tcm-bench-daemon-ops}
work=$(mktemp -d /tmp/tcm-daemon-cost.XXXXXX)
daemon=
trap '[[ -n $daemon ]] && kill "$daemon" 2>/dev/null; [[ -n ${KEEP:-} ]] && echo "kept $work" >&2 || rm -rf "$work"' EXIT

start_daemon() { # $1: tag
    sock=$work/$1.sock
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/$1.cg" \
        "$build/tcmd" --foreground --socket "$sock" --name "cost$$$1" --spin-us 0 --log "$work/$1.log" \
        2> "$work/$1.valgrind.log" &
    daemon=$!
    for _ in $(seq 600); do "$build/tcmctl" --socket "$sock" ping >/dev/null 2>&1 && return; sleep 0.1; done
    echo "tcmd did not answer under valgrind: $work/$1.valgrind.log" >&2
    exit 1
}

stop_daemon() {
    kill -TERM "$daemon"
    wait "$daemon" || true
    daemon=
}

stat_of() { # $1: json stats, $2: field
    grep -o "\"$2\":[0-9]*" <<< "$1" | cut -d: -f2
}

total_ir() { # callgrind file -> instructions
    callgrind_annotate "$1" 2>/dev/null < /dev/null | awk '/PROGRAM TOTALS/ && !seen { gsub(",", "", $1); print $1; seen = 1 }'
}

if [[ -z ${SIZES:-} ]]; then
    pages=${PAGES:-20000} batches=${BATCHES:-40} size=${SIZE:-16384} count=${COUNT:-4096}
    start_daemon req
    TCM_SOCKET=$sock "$client" --pages "$pages" --batches "$batches" --size "$size" --count "$count"
    requests=$(stat_of "$("$build/tcmctl" --socket "$sock" --json stats)" requests)
    stop_daemon
    # the heap thread is the thread whose file holds the serving code
    best=0
    for f in "$work"/req.cg*; do
        ir=$(total_ir "$f" || true)
        [[ -n $ir ]] && ((ir > best)) && best=$ir
    done
    awk -v ir="$best" -v r="$requests" 'BEGIN { printf "heap thread: %d instructions for %d requests: %.0f per request\n", ir, r, ir / r }'
    exit 0
fi

# ---- per object, per class, per op ----
rounds=${ROUNDS:-4} profile=${PROFILE:-0}
(( rounds >= 2 )) || { echo "ROUNDS must be at least 2 (the first is warm-up)" >&2; exit 2; }
# what the client library does with a class (common/layout.c): batches of
# 2 MiB (4..512 objects), thread bins of up to 16 MiB (2 batches..4096)
batch_of() { local b=$(( (2 << 20) / $1 )); (( b < 4 )) && b=4; (( b > 512 )) && b=512; echo $b; }
cap_of() { local b; b=$(batch_of "$1"); local c=$(( (16 << 20) / $1 )); (( c < 2 * b )) && c=$((2 * b)); (( c > 4096 )) && c=4096; echo $c; }

cat > "$work/phase.sh" <<'EOF'
#!/usr/bin/env bash
# called by the client after each phase: wait until tcmd has served
# everything posted (its requests stop moving), note the stats, dump counts
set -euo pipefail
prev=-1
for _ in $(seq 200); do
    js=$("$TCMCTL" --socket "$SOCK" --json stats)
    now=$(grep -o '"requests":[0-9]*' <<< "$js" | cut -d: -f2)
    [[ $now == "$prev" ]] && break
    prev=$now
    sleep 0.3
done
get() { grep -o "\"$1\":[0-9]*" <<< "$js" | cut -d: -f2; }
echo "$1 $2 $(get requests_refill) $(get requests_return) $(get bytes_clients) $(get requests)" >> "$PHASES"
callgrind_control -d "$DAEMON" > /dev/null
EOF
chmod +x "$work/phase.sh"

printf '%8s %6s %-7s %9s %9s %8s %14s %12s %12s\n' size batch op requests objects obj/req instructions per-object per-request
for size in $SIZES; do
    batch=$(batch_of "$size")
    count=${COUNT:-$(( 16 * batch + $(cap_of "$size") ))}
    tag=s$size
    start_daemon "$tag"
    phases=$work/$tag.phases
    js=$("$build/tcmctl" --socket "$sock" --json stats)
    echo "start 0 0 0 $(stat_of "$js" bytes_clients) $(stat_of "$js" requests)" > "$phases"
    TCMCTL=$build/tcmctl SOCK=$sock PHASES=$phases DAEMON=$daemon TCM_SOCKET=$sock \
        "$client" --pages 0 --batches "$rounds" --size "$size" --count "$count" --phase-cmd "$work/phase.sh"
    stop_daemon
    # dump k (cg.k-TT) holds what happened between phase line k and k+1 of
    # $phases (line 1 is the start); the heap thread's TT is the one whose
    # files hold heap_thread_main
    ht=$(grep -l 'heap_thread_main' "$work/$tag.cg".1-* | head -1 | sed 's/.*-//')
    k=0
    : > "$work/$tag.sums"
    while read -r op round refills returns bytes requests; do
        if ((k > 0)); then
            f=$work/$tag.cg.$k-$ht
            ir=$(total_ir "$f")
            echo "$op $round $((refills - prev_refills)) $((returns - prev_returns)) $((bytes - prev_bytes)) $ir $f" >> "$work/$tag.sums"
        fi
        prev_refills=$refills prev_returns=$returns prev_bytes=$bytes
        k=$((k + 1))
    done < "$phases"
    for op in refill return; do
        awk -v op="$op" -v size="$size" -v batch="$batch" '
            $1 == op && $2 > 0 {
                req += (op == "refill" ? $3 : $4); obj += ($5 < 0 ? -$5 : $5) / size; ir += $6
            }
            END { printf "%8d %6d %-7s %9d %9d %8.1f %14d %12.1f %12.0f\n", size, batch, toupper(op), req, obj,
                  req ? obj / req : 0, ir, obj ? ir / obj : 0, req ? ir / req : 0 }' "$work/$tag.sums"
        if ((profile > 0)); then
            objs=$(awk -v op="$op" -v size="$size" '$1 == op && $2 > 0 { o += ($5 < 0 ? -$5 : $5) / size } END { print o }' "$work/$tag.sums")
            awk -v op="$op" '$1 == op && $2 > 0 { print $7 }' "$work/$tag.sums" | while read -r f; do
                callgrind_annotate --inclusive=yes --auto=no --threshold=100 "$f" 2>/dev/null < /dev/null |
                    awk '/^ *[0-9,]+ +\([0-9. ]+%\) +[^ ]+:[^ ]+/ && !/PROGRAM TOTALS/ {
                        n = $1; gsub(",", "", n); sub(/^ *[0-9,]+ +\([0-9. ]+%\) +/, ""); sub(/ .*$/, "")
                        sub(/^.*\//, ""); if (n > ir[$0]) ir[$0] = n }
                        END { for (f in ir) print ir[f] "\t" f }'
            done | awk -F'\t' -v objs="$objs" -v top="$profile" '
                { ir[$2] += $1 }
                END { for (f in ir) printf "%10.1f  %s\n", ir[f] / objs, f }' | sort -rn | head -n "$profile" |
                sed 's/^/        /'
        fi
    done
done
