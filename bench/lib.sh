# bench/lib.sh — what the bench drivers share (sourced, not run): the
# Release build with the other mallocs' variants, waiting for a quiet box,
# and CPU accounting to tell how much someone else ran during a case.

# preload_allocs BUILD: sets `allocs` to the drop-in drivers' list, NAME:LIB
# (glibc's LIB empty: no preload), tcm's drop-in from BUILD and Debian's
# jemalloc, tcmalloc and mimalloc.
preload_allocs() {
    local d=/usr/lib/x86_64-linux-gnu
    allocs=(glibc: "tcm:$1/libtcm-malloc.so" "jemalloc:$d/libjemalloc.so.2" "tcmalloc:$d/libtcmalloc_minimal.so.4"
            "mimalloc:$d/libmimalloc.so.2")
}

# bench_configure ROOT BUILD: configure a Release tree; sets `variants` to
# the other mallocs (jemalloc tcmalloc mimalloc) this box has.
bench_configure() {
    cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DTCM_BUILD_TESTS=OFF >/dev/null
    variants=()
    local v lib
    for v in jemalloc tcmalloc mimalloc; do
        lib=$(sed -n "s/^TCM_BENCH_LIB_$v:FILEPATH=//p" "$2/CMakeCache.txt")
        [[ -n $lib && $lib != *NOTFOUND ]] && variants+=("$v")
    done
}

# build_preload_workloads ROOT DIR: bench/preload/*.c built into DIR (only
# those WORKLOADS names, when set); sets `workloads` to their names.
build_preload_workloads() {
    local src w
    workloads=()
    for src in "$1"/bench/preload/*.c; do
        w=$(basename "$src" .c)
        [[ -n ${WORKLOADS:-} && " $WORKLOADS " != *" $w "* ]] && continue
        cc -O2 -pthread -o "$2/$w" "$src"
        workloads+=("$w")
    done
}

# Percent of all CPUs busy over the next $1 seconds (anyone's work).
busy_pct() {
    local a b t=0 k
    read -ra a < <(head -n1 /proc/stat)
    sleep "$1"
    read -ra b < <(head -n1 /proc/stat)
    for k in 1 2 3 4 5 6 7 8; do t=$((t + b[k] - a[k])); done
    echo $((t > 0 ? 100 * (t - (b[4] - a[4])) / t : 0))
}

# bench_wait_quiet WHO: other work skews every figure; wait up to 2 minutes
# for the box to be quiet (under 10% busy), then go anyway (the report
# says how busy it was: busy, the last figure, is left set for it).
bench_wait_quiet() {
    for _ in $(seq 40); do
        busy=$(busy_pct 3)
        ((busy < 10)) && return 0
        echo "$1: waiting for a quiet machine: ${busy}% busy" >&2
    done
}

# CPU time of the whole box and of this shell's reaped children (tcmd
# included): the difference is how much someone else ran meanwhile.
box_jiffies() {
    local a
    read -ra a < <(head -n1 /proc/stat)
    echo $((a[1] + a[2] + a[3] + a[6] + a[7] + a[8]))
}
own_jiffies() {
    local s
    read -ra s </proc/$$/stat
    echo $((s[15] + s[16]))
}

# bench_load_begin, then bench_load_end after the run: the load average
# before and after (load_start, load_end), and others_pct, about how much
# of all CPU time someone else used meanwhile.
bench_load_begin() {
    load_start=$(cut -d' ' -f1-3 /proc/loadavg)
    box0=$(box_jiffies) own0=$(own_jiffies) t0=$SECONDS
}
bench_load_end() {
    local others hz
    load_end=$(cut -d' ' -f1-3 /proc/loadavg)
    others=$(( ($(box_jiffies) - box0) - ($(own_jiffies) - own0) ))
    hz=$(getconf CLK_TCK)
    others_pct=$((100 * others / (hz * (SECONDS - t0 + 1) * $(nproc))))
    others_pct=$((others_pct < 0 ? 0 : others_pct))
}

# bench_versions BUILD: glibc's package and version, then each variant's
# (its library's path where no package owns it), one a line.
bench_versions() {
    local v lib pkg
    dpkg-query -W -f '${Package} ${Version}\n' libc6 2>/dev/null || true
    for v in "${variants[@]}"; do
        lib=$(sed -n "s/^TCM_BENCH_LIB_$v:FILEPATH=//p" "$1/CMakeCache.txt")
        pkg=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | cut -d: -f1 | head -n1) || true
        [[ -n $pkg ]] && dpkg-query -W -f '${Package} ${Version}\n' "$pkg" 2>/dev/null || echo "$v: $lib"
    done
}

# An awk function the report tables share (put it before an awk program):
# table_head(lead, align, c, from, to, fmt, tail) prints a Markdown table's
# header, lead's columns, then fmt for each of c[from..to], then tail's,
# and its alignment row: align for lead's columns, the others right-aligned.
bench_awk_table_head='
function table_head(lead, align, c, from, to, fmt, tail,   i, n) {
    printf "%s", lead
    for (i = from; i <= to; i++) printf fmt, c[i]
    printf "%s\n%s", tail, align
    for (i = from; i <= to; i++) printf "---:|"
    for (n = gsub(/\|/, "|", tail); n > 0; n--) printf "---:|"
    printf "\n"
}
'
