#!/usr/bin/env bash
# libtcm-malloc.so as the malloc of real programs: each runs with and without
# LD_PRELOAD and must print the same, served by tcm: by default from a heap
# private to the process (its note under TCM_VERBOSE=1), with
# TCM_MALLOC_FORK=shared from a real tcmd's shared heap (tcmd must have seen
# it as a client). Then what is private stays private (outside the shared
# heap, copied on write by fork, nothing left in tcmd's heap by a thousand
# programs), redis-server under redis-benchmark with BGSAVE forks (the RDB
# is the data set at the fork), the start-up cases of the shared mode (no
# tcmd: one line and the system malloc; TCM_MALLOC_FALLBACK=0: fail), and
# tcmd killed while a program runs.
set -euo pipefail
build=$1
source "$(dirname "$0")/common/lib.sh"
scratch preload
lib=$build/libtcm-malloc.so
export TCM_SOCKET=$work/tcmd.sock
start_tcmd "$build" "$TCM_SOCKET" --name "preload$$" --log "$work/tcmd.log"
failed=0 passed=0
stat() { "$build/tcmctl" --json stats | grep -o "\"$1\":[0-9]*" | cut -d: -f2; }
ok() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }

# same output with and without the preload, no fallback line, served by tcm:
# a private heap made (the note TCM_VERBOSE=1 prints), nothing asked of tcmd
same() {
  local name=$1 cmd=$2
  local plain with clients=$(stat clients_total)
  plain=$(bash -c "$cmd" 2>&1) || { fail "$name: fails without the preload: $plain"; return; }
  if ! with=$(TCM_VERBOSE=1 LD_PRELOAD=$lib bash -c "$cmd" 2> "$work/err"); then
    fail "$name: exit status under the preload: $(cat "$work/err")"; return
  fi
  if [[ $with != "$plain" ]]; then fail "$name: output differs: [$with] vs [$plain]"; return; fi
  if grep "tcm" "$work/err" | grep -qv "private heap at"; then fail "$name: $(cat "$work/err")"; return; fi
  grep -q "private heap at" "$work/err" || { fail "$name: no private heap made"; return; }
  (( $(stat clients_total) == clients )) || { fail "$name: it attached to tcmd"; return; }
  ok "$name"
}

# the same with TCM_MALLOC_FORK=shared: tcmd's heap, a client more (programs
# that do not fork: a child that uses what it inherited would change its
# parent's memory, which this mode is for sharing)
same_shared() {
  local name=$1 cmd=$2
  local plain with clients=$(stat clients_total)
  plain=$(bash -c "$cmd" 2>&1) || { fail "$name: fails without the preload: $plain"; return; }
  if ! with=$(TCM_MALLOC_FORK=shared LD_PRELOAD=$lib bash -c "$cmd" 2> "$work/err"); then
    fail "$name (shared): exit status under the preload: $(cat "$work/err")"; return
  fi
  if [[ $with != "$plain" ]]; then fail "$name (shared): output differs: [$with] vs [$plain]"; return; fi
  if [[ -s $work/err ]] && grep -q "tcm" "$work/err"; then fail "$name (shared): $(cat "$work/err")"; return; fi
  (( $(stat clients_total) > clients )) || { fail "$name (shared): tcmd saw no client"; return; }
  ok "$name (TCM_MALLOC_FORK=shared)"
}

py=$(python3 -c 'import sys; print(sys.executable)')  # the interpreter itself, not a wrapper script
seq 1 300000 | awk '{ print ($1 * 7919) % 300007 }' > "$work/numbers"
same "python3 dict and sort" \
  "$py -c 'd = {str(i): i * i for i in range(300000)}; ks = sorted(d, key=lambda k: d[k] % 1000); print(len(ks), ks[:3], sum(d.values()))'"
same "python3 subprocess" "$py -c 'import subprocess; print(subprocess.run([\"echo\", \"hi\"], capture_output=True).stdout)'"
same "perl text" "perl -ne 'chomp; \$h{\$_ % 997} .= \$_ . q(,); END { print scalar(keys %h), q( ), length(join q(), map { \$h{\$_} } sort { \$a <=> \$b } keys %h), qq(\n); print \`echo forked\` }' $work/numbers"
same "sort" "sort -n $work/numbers | md5sum"
same "sort, 2 threads" "sort --parallel=2 -S 20M $work/numbers | md5sum"
same "gzip pipeline" "gzip -c $work/numbers | gzip -dc | md5sum"
cat > "$work/q.sql" <<'SQL'
create table t(a integer primary key, b text, c real);
with recursive n(x) as (select 1 union all select x + 1 from n where x < 50000)
  insert into t select x, printf('row%08d', x * 7919 % 50000), x / 3.0 from n;
create index tb on t(b);
select count(*), sum(a), max(b), round(avg(c), 3) from t where b like 'row0001%';
select b from t order by b desc limit 3;
SQL
same "sqlite3" "sqlite3 :memory: < $work/q.sql"
same "C++ containers" "$build/tests/tcm_preload_cxx"
same "C++ new out of memory: bad_alloc, new_handler, nothrow (no C++ runtime linked)" \
  "TCM_MALLOC_FALLBACK=0 $build/tests/tcm_preload_newfail"
if ldd "$lib" | grep -qE 'libstdc\+\+|libgcc_s|libm\.'; then
  fail "the drop-in links the C++ runtime: $(ldd "$lib" | tr -s ' \n' ' ')"
else
  ok "the drop-in links no C++ runtime (every program it is preloaded into would load it)"
fi
same "300 threads, destructors that free, a handler that frees, exit from a thread" "$build/tests/tcm_preload_threads"
same_shared "python3 dict and sort" \
  "$py -c 'd = {str(i): i * i for i in range(300000)}; ks = sorted(d, key=lambda k: d[k] % 1000); print(len(ks), ks[:3], sum(d.values()))'"
same_shared "perl text" "perl -ne 'chomp; \$h{\$_ % 997} .= \$_ . q(,); END { print scalar(keys %h), q( ), length(join q(), map { \$h{\$_} } sort { \$a <=> \$b } keys %h), qq(\n); print \`echo forked\` }' $work/numbers"
same_shared "300 threads" "$build/tests/tcm_preload_threads"
same_shared "C++ containers" "$build/tests/tcm_preload_cxx"

# the library's own allocations go to the system malloc, on a thread tcm
# serves too: a counting system malloc after the drop-in sees tcm_stat's
# (protobuf-c decoding tcmd's answer) and none of the program's
if out=$(TCM_MALLOC_FORK=shared LD_PRELOAD="$lib $build/tests/libtcm-test-sysmalloc.so" \
         "$build/tests/tcm_preload_inlib" 2>&1) && [[ $out == ok ]]; then
  ok "the library's own allocations are the system malloc's, the program's tcm's"
else
  fail "the library's own allocations: $out"
fi

# the heap profile at a 1-byte interval: every allocation is sampled (a page
# run of its own, its stack unwound, tcmd told) under the drop-in, and
# nothing the unwinder does comes back into it
was=$("$build/tcmctl" --json config get profile_sample | grep -o '"value":"[^"]*"' | cut -d'"' -f4)
"$build/tcmctl" config set profile_sample 1 > /dev/null
same_shared "python3, every allocation sampled (profile_sample 1)" \
  "$py -c 'd = {str(i): i * i for i in range(20000)}; print(len(d), sum(d.values()))'"
same_shared "perl, every allocation sampled" "perl -ne 'chomp; \$h{\$_ % 97} .= \$_; END { print scalar(keys %h), qq(\\n) }' $work/numbers"
same_shared "C++ new, every allocation sampled" "TCM_MALLOC_FALLBACK=0 $build/tests/tcm_preload_newfail"
if "$build/tcmctl" heap-profile --top 3 > "$work/top" && grep -q "samples" "$work/top" && (( $(stat profile_samples) > 0 )); then
  ok "heap-profile of the sampled programs: $(head -1 "$work/top")"
else
  fail "heap-profile after the sampled programs: $(cat "$work/top")"
fi
"$build/tcmctl" config set profile_sample "$was" > /dev/null

# private: malloc's memory is not in tcmd's shared heap (which any client
# maps), fork copies it on write and the child goes on allocating from it,
# a few objects of many sizes keep only their pages resident, bins hold
# what their use needs, and a thousand programs leave nothing in tcmd's
# heap
base=$(( $("$build/tcmctl" --json config get base | grep -o '"base":{"value":"[0-9a-fx]*"' | grep -o '0x[0-9a-f]*') ))
size=$(stat bytes_reserved)
read -r small large < <(LD_PRELOAD=$lib "$build/tests/tcm_preload_private" where)
if (( small && large && (small < base || small >= base + size) && (large < base || large >= base + size) )); then
  ok "private: malloc's blocks lie outside the shared heap"
else
  fail "private: blocks at $small and $large, the shared heap at $base (+$size)"
fi
out=$(LD_PRELOAD=$lib "$build/tests/tcm_preload_private" fork 2>&1)
if [[ $out == ok ]]; then
  ok "private: a fork child sees the heap as it was at the fork, keeps its writes, allocates from it"
else
  fail "private fork: $out"
fi
# private_case CASE WHY: tcm_preload_private CASE passes; its line and WHY reported
private_case() {
  local out
  if out=$(LD_PRELOAD=$lib "$build/tests/tcm_preload_private" "$1" 2>&1); then
    ok "private: $out ($2)"
  else
    fail "private $1: $out"
  fi
}
private_case sparse "the pages of what it handed out, not whole spans"
private_case threads "a thread's bins of a few objects share pages"
private_case grow "a bin keeps little of a class realloc moved out of"
private_case flow "a bin's room stops at its cap where frees flow one way"
private_case sweep "a class that sweeps its bin has its room grown past the cap"
private_case calloc "fresh pages are the kernel's zeroes: not written"
private_case start "a small heap's program pays for no thread; a block's pages map as written"
held=$(stat bytes_clients) committed=$(stat bytes_committed) clients=$(stat clients_total)
for _ in $(seq 1000); do LD_PRELOAD=$lib ls /usr/bin > /dev/null; done
"$build/tcmctl" release > /dev/null
if [[ $(stat bytes_clients) == "$held" && $(stat clients_total) == "$clients" ]] &&
   (( $(stat bytes_committed) <= committed )); then
  ok "private: 1000 programs leave nothing in tcmd's heap"
else
  fail "private: after 1000 programs, bytes_clients $held -> $(stat bytes_clients), committed $committed -> $(stat bytes_committed), clients $clients -> $(stat clients_total)"
fi

# redis-server: writes under redis-benchmark while it forks for BGSAVE; the
# snapshot loads into a plain redis-server with every key
# start_redis LOG [PRELOAD]: a redis-server on a free port; sets port and
# redis. A port found free may be taken by an outgoing connection (a
# client's ephemeral port) before redis binds it: redis then exits saying
# so, and another port is tried.
start_redis() {
  local log=$1 preload=${2:-} rdb=${3:-dump.rdb}
  for _ in 1 2 3; do
    port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    LD_PRELOAD=$preload redis-server --port "$port" --save "" --dir "$work" --dbfilename "$rdb" \
      --enable-debug-command local > "$log" 2>&1 &
    redis=$!
    for _ in $(seq 100); do redis-cli -p "$port" ping > /dev/null 2>&1 && break; sleep 0.05; done
    kill -0 "$redis" 2> /dev/null || ! grep -q "Address already in use" "$log" || continue
    return
  done
}
start_redis "$work/redis.log" "$lib"
if ! redis-benchmark -p "$port" -q -n 50000 -P 16 -t set,lpush -r 20000 > /dev/null; then
  if kill -0 "$redis" 2> /dev/null; then
    echo "redis-server (pid $redis) is running but did not serve:"
    gdb -p "$redis" -batch -ex "thread apply all bt" 2> /dev/null | grep -E '^#|^Thread' | head -40 || true
  else
    wait "$redis" || echo "redis-server exited with status $?"
  fi
  echo "FAIL redis-server under redis-benchmark: $(tail -30 "$work/redis.log")"
  exit 1
fi
redis-benchmark -p "$port" -q -n 100000 -P 16 -t set -r 20000 > /dev/null &
bench=$!
# a save counts once it is over (rdb_saves grew) and went well; the status
# alone reads "ok" before any save
rdb_saves() { redis-cli -p "$port" info persistence | sed -n 's/^rdb_saves:\([0-9]*\).*/\1/p'; }
saves=0 digest_at_fork=
for i in 1 2 3; do
  before=$(rdb_saves)
  if ((i == 1)); then # the data set's digest at the fork: writes paused for it, going on while the child saves
    digest_at_fork=$(printf 'CLIENT PAUSE 5000 WRITE\nDEBUG DIGEST\nBGSAVE\nCLIENT UNPAUSE\n' |
                     redis-cli -p "$port" | sed -n 2p)
  else
    redis-cli -p "$port" bgsave > /dev/null
  fi
  for _ in $(seq 100); do [[ $(redis-cli -p "$port" info persistence | grep -c 'rdb_bgsave_in_progress:1') == 0 ]] && break; sleep 0.05; done
  (( $(rdb_saves) > before )) && redis-cli -p "$port" info persistence | grep -q 'rdb_last_bgsave_status:ok' &&
    saves=$((saves + 1))
  ((i == 1)) && cp "$work/dump.rdb" "$work/at-fork.rdb"
done
wait "$bench"
redis-cli -p "$port" bgsave > /dev/null
for _ in $(seq 100); do [[ $(redis-cli -p "$port" info persistence | grep -c 'rdb_bgsave_in_progress:1') == 0 ]] && break; sleep 0.05; done
keys=$(redis-cli -p "$port" dbsize)
stuck= # a BGSAVE child still running: where it is, for the failure's message (never a
       # failure of its own: the child may finish meanwhile, gdb may be missing)
if redis-cli -p "$port" info persistence | grep -q 'rdb_bgsave_in_progress:1'; then
  for p in $(pgrep -P "$redis" || true); do
    stuck+="$(echo "BGSAVE child $p still running, in $(cat "/proc/$p/wchan" 2> /dev/null || echo '?'):"
              gdb -p "$p" -batch -ex "thread apply all bt" 2>&1 | grep -E '^#|^Thread' | head -40 || true)"
  done
fi
redis-cli -p "$port" shutdown nosave > /dev/null 2>&1 || true
wait "$redis" || true
start_redis "$work/redis2.log" # plain, loading the snapshot
loaded=$(redis-cli -p "$port" dbsize)
redis-cli -p "$port" shutdown nosave > /dev/null 2>&1 || true
wait "$redis" || true
start_redis "$work/redis3.log" "" at-fork.rdb # plain, loading what the first BGSAVE child wrote
digest_saved=$(redis-cli -p "$port" debug digest)
redis-cli -p "$port" shutdown nosave > /dev/null 2>&1 || true
wait "$redis" || true
if [[ $saves == 3 && $keys -gt 10000 && $loaded == "$keys" && -n $digest_at_fork &&
      $digest_saved == "$digest_at_fork" ]]; then
  ok "redis-server, BGSAVE under load ($keys keys saved and loaded back; a save's digest is the data set's at its fork)"
else
  fail "redis-server: $saves of 3 BGSAVEs ok, $keys keys, $loaded loaded, digest at the fork [$digest_at_fork], of the save [$digest_saved]; $(tail -5 "$work/redis.log"; tail -5 "$work/redis2.log")${stuck:+
$stuck}"
fi

# the shared mode without tcmd: one line, and the program goes on with the system malloc
export TCM_MALLOC_FORK=shared
out=$(TCM_SOCKET=$work/nobody.sock LD_PRELOAD=$lib "$py" -c 'print(sum(range(1000)))' 2> "$work/err")
if [[ $out == 499500 && $(wc -l < "$work/err") == 1 ]] && grep -q "cannot attach.*system malloc" "$work/err"; then
  ok "no tcmd: one line, then the system malloc"
else
  fail "no tcmd: [$out] $(cat "$work/err")"
fi
# a stale socket file (its tcmd gone): no 30 s wait for a program that was
# never attached, one line saying so
"$py" -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$work/stale.sock"
t0=$(date +%s%N)
out=$(TCM_SOCKET=$work/stale.sock LD_PRELOAD=$lib ls / 2> "$work/err")
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
if [[ $out == "$(ls /)" && $(wc -l < "$work/err") == 1 ]] && grep -q "stale.*system malloc" "$work/err" &&
   (( ms < 10000 )); then
  ok "stale socket: ls / at once (${ms} ms), one line, then the system malloc"
else
  fail "stale socket: ${ms} ms [$out] $(cat "$work/err")"
fi
if TCM_SOCKET=$work/nobody.sock TCM_MALLOC_FALLBACK=0 LD_PRELOAD=$lib sort "$work/numbers" > /dev/null 2> "$work/err"; then
  fail "TCM_MALLOC_FALLBACK=0 without tcmd: sort succeeded"
else
  ok "TCM_MALLOC_FALLBACK=0 without tcmd: allocations fail"
fi

# tcmd killed while the program runs: it goes on (the system malloc once
# tcmd does not come back within TCM_RECONNECT_TIMEOUT)
TCM_RECONNECT_TIMEOUT=1 LD_PRELOAD=$lib "$py" -c '
import time
keep = []
for i in range(40):
    keep.append([str(j) * 3 for j in range(20000)])
    time.sleep(0.05)
print(sum(len(x) for x in keep))' > "$work/out" 2> "$work/err" &
prog=$!
sleep 0.5
kill -9 "$daemon"
wait "$daemon" 2> /dev/null || true
daemon=
if wait "$prog" && [[ $(cat "$work/out") == 800000 ]]; then
  ok "tcmd killed while a program runs"
else
  fail "tcmd killed: [$(cat "$work/out")] $(cat "$work/err")"
fi

echo "preload: $passed passed, $failed failed"
[[ $failed == 0 ]]
