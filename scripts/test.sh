#!/usr/bin/env bash
# Build and run the test suite: a warnings-as-errors RelWithDebInfo build
# (build-ci), then an ASan+UBSan build (build-asan), then a ThreadSanitizer
# build (build-tsan); the sanitizer builds also run the whole-heap validator
# every few thousand requests (assert level 3).
#   --quick    only the first pass
#   --no-tsan  skip the ThreadSanitizer pass
# JOBS (default 2) sets the build and ctest parallelism. Exits non-zero if
# any build or test fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=0
tsan=1
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --no-tsan) tsan=0 ;;
    --tsan) tsan=1 ;; # the default; kept for old command lines
    -h|--help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
JOBS=${JOBS:-2}

./scripts/setup.sh

# Leak detection stays on; a caller's own *SAN_OPTIONS win.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-second_deadlock_stack=1}

results=()
failed=0

# Daemons that tests of BUILD_DIR left running (a test killed on timeout, a
# helper that forgot to stop its tcmd): report them and stop them, so that
# they do not hold /dev/shm space through the next pass; then what they
# left behind. reap_daemons BUILD_DIR PASS_STATUS
reap_daemons() {
  local exe p pids=()
  exe="$(cd "$1" && pwd)/tcmd"
  for p in /proc/[0-9]*; do
    [[ "$(readlink "$p/exe" 2>/dev/null)" == "$exe" ]] && pids+=("${p#/proc/}")
  done
  if ((${#pids[@]})); then
    echo "test.sh: warning: the tests left ${#pids[@]} tcmd process(es) of $1 running" \
         "(pid ${pids[*]}); stopping them" >&2
    kill "${pids[@]}" 2>/dev/null || true
    sleep 1
  fi
  # a failed test can leave a heap behind for a next tcmd that never comes:
  # removed, if this pass made it (it was not there when the pass began)
  # and no process maps or holds it (another run's heap on this box, or a
  # heap some process is still using, stays)
  local f base in_use left=()
  local names=(-name 'tcm.test*' -o -name 'tcm.kvtest*' -o -name 'tcm.preload*' -o -name 'tcm.demo*'
               -o -name 'tcm.deb*' -o -name 'tcm.inst*' -o -name 'tcm.ctl*' -o -name 'tcm.shmfull*')
  # (processes come and go while this reads: a vanished one is no error)
  in_use=$( { (cat /proc/[0-9]*/maps; find /proc/[0-9]*/fd -lname '/dev/shm/*' -printf '%l\n') 2>/dev/null |
            grep -o '/dev/shm/[^ ]*' | sort -u; } || true)
  while IFS= read -r f; do
    base=${f##*/}
    grep -qxF "$base" <<<"$shm_before" && continue
    grep -qxF "$f" <<<"$in_use" && continue
    left+=("$f")
  done < <(find /dev/shm -maxdepth 1 \( "${names[@]}" \) 2>/dev/null)
  if ((${#left[@]})); then
    echo "test.sh: warning: removing ${#left[@]} shared-memory segments the tests left behind" >&2
    rm -f "${left[@]}"
  fi
  # and what the daemons a test killed last left in /tmp (tcmd removes its
  # socket and its restart hint, SOCKET.heap, only when it stops; the
  # test its log only when it stopped it; a failed pass keeps the logs):
  # the same rule, a daemon's files in use while something listens on its
  # socket or the test that named them (tcmtest-PID-N) still runs, as
  # another run's on this box may
  local listening files=() status=${2:-ok} pid
  listening=$(awk 'NR > 1 && $NF ~ /^\/tmp\/tcmtest-/ {print $NF}' /proc/net/unix 2>/dev/null | sort -u || true)
  while IFS= read -r f; do
    grep -qxF "$f" <<<"$tmp_before" && continue
    [[ $f == *.log && $status != ok ]] && continue
    pid=${f#/tmp/tcmtest-}
    pid=${pid%%-*}
    [[ -d /proc/$pid ]] && continue
    local sock=${f%.heap}
    sock=${sock%.log}
    [[ $sock == *.sock ]] || sock=$sock.sock
    grep -qxF "$sock" <<<"$listening" && continue
    files+=("$f")
  done < <(find /tmp -maxdepth 1 \( -name 'tcmtest-*.sock' -o -name 'tcmtest-*.sock.heap' -o -name 'tcmtest-*.log' \) \
             2>/dev/null)
  if ((${#files[@]})); then
    rm -f "${files[@]}"
  fi
}

# run_pass NAME BUILD_DIR CMAKE_ARGS...
run_pass() {
  local name=$1 dir=$2
  shift 2
  local start=$SECONDS status=ok
  shm_before=$(ls /dev/shm 2>/dev/null)
  tmp_before=$(find /tmp -maxdepth 1 -name 'tcmtest-*' 2>/dev/null)
  printf '\n==> %s: configure %s (%s)\n' "$name" "$dir" "$*"
  if ! cmake -S . -B "$dir" --log-level=WARNING "$@"; then
    status="FAILED (configure)"
  else
    printf '==> %s: build\n' "$name"
    if ! cmake --build "$dir" -j"$JOBS"; then
      status="FAILED (build)"
    else
      printf '==> %s: ctest\n' "$name"
      if ! ctest --test-dir "$dir" --output-on-failure -j"$JOBS" --timeout 300 --no-tests=error; then
        status="FAILED (tests)"
      fi
      reap_daemons "$dir" "$status"
    fi
  fi
  [[ $status == ok ]] || failed=1
  results+=("$(printf '%-6s %-20s %4ss' "$name" "$status" $((SECONDS - start)))")
}

# The crash points are off by default (no released tcmd may kill itself on
# TCM_TEST_CRASH_AT); every pass here builds them in for integration.crashpoints.
run_pass ci build-ci -DTCM_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTCM_SANITIZE= -DTCM_CRASH_POINTS=ON
if ((!quick)); then
  run_pass asan build-asan -DTCM_SANITIZE=address -DTCM_WERROR=ON -DTCM_BUILD_BENCH=OFF -DTCM_CRASH_POINTS=ON
fi
if ((tsan && !quick)); then
  run_pass tsan build-tsan -DTCM_SANITIZE=thread -DTCM_WERROR=ON -DTCM_BUILD_BENCH=OFF -DTCM_CRASH_POINTS=ON
fi

printf '\n==> summary\n'
printf '    %s\n' "${results[@]}"
if ((failed)); then
  echo "test.sh: FAILED" >&2
  exit 1
fi
echo "test.sh: all passes OK"
