#!/usr/bin/env bash
# The systemd unit: `systemd-analyze verify` accepts it, `systemd-analyze
# security --offline` rates its exposure at most 2.5 (the unit without
# sandboxing, as root: 9.6), it runs tcmd as the system user tcm and keeps
# what a restart adopts (RemoveIPC=no, no DynamicUser=, which forces
# RemoveIPC=yes), the sysusers.d file parses, and every system call a tcmd
# makes under a workload (a client, every tcmctl command, /metrics, SIGHUP,
# a client killed, tcmd killed and adopted) is in the unit's
# SystemCallFilter=@system-service. Skips (77) without systemd-analyze.
set -euo pipefail
build=$1
sanitize=${2:-}
command -v systemd-analyze > /dev/null || { echo "no systemd-analyze: skipped"; exit 77; }
source "$(dirname "$0")/common/lib.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
scratch systemd
# under strace $daemon is strace: its tcmd goes too
trap '[[ -n $daemon ]] && pkill -KILL -P "$daemon" -x tcmd; tcm_cleanup' EXIT

# the unit as configured, run from the build tree (verify wants ExecStart's binary)
unit=$work/tcmd.service
sed "s#^ExecStart=[^ ]*/tcmd #ExecStart=$build/tcmd #" "$build/tcmd.service" > "$unit"
out=$(systemd-analyze verify "$unit" 2>&1) || { echo "systemd-analyze verify failed:"; echo "$out"; exit 1; }
[[ -z $out ]] || { echo "systemd-analyze verify warns:"; echo "$out"; exit 1; }
sec=$(systemd-analyze security --offline=yes "$unit" 2>&1)
level=$(sed -n 's/.*Overall exposure level for tcmd.service: \([0-9.]*\).*/\1/p' <<< "$sec")
[[ -n $level ]] || { echo "no exposure level:"; echo "$sec"; exit 1; }
echo "exposure level $level"
awk -v l="$level" 'BEGIN { exit !(l <= 2.5) }' || { echo "exposure $level above 2.5:"; grep '✗' <<< "$sec"; exit 1; }
for line in User=tcm Group=tcm RemoveIPC=no RuntimeDirectory=tcm RuntimeDirectoryPreserve=yes PrivateDevices=yes \
            CapabilityBoundingSet=CAP_SYS_NICE AmbientCapabilities=CAP_SYS_NICE SystemCallFilter=@system-service; do
  grep -qx "$line" "$unit" || { echo "the unit has no $line"; exit 1; }
done
if grep -q '^DynamicUser=yes' "$unit"; then echo "DynamicUser=yes forces RemoveIPC=yes: the heap would go at every stop"; exit 1; fi
if command -v systemd-sysusers > /dev/null; then
  out=$(systemd-sysusers --dry-run "$src/packaging/tcm.sysusers" 2>&1) || { echo "systemd-sysusers: $out"; exit 1; }
  grep -q "Creating user 'tcm'" <<< "$out" || id tcm > /dev/null 2>&1 \
    || { echo "systemd-sysusers: packaging/tcm.sysusers makes no user tcm: $out"; exit 1; }
fi

# every system call tcmd makes is one the filter lets through
if [[ -n $sanitize ]] || ! command -v strace > /dev/null; then
  echo "unit OK (system calls not traced: ${sanitize:+a $sanitize build}${sanitize:-no strace})"
  exit 0
fi
sock=$work/tcmd.sock trace=$work/trace
heap_name=sd$$
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
traced_start() {
  strace -f -qq -o "$trace.$1" "$build/tcmd" --foreground --socket "$sock" --name "$heap_name" --metrics-port "$port" \
    --log "$work/tcmd.log" &
  daemon=$!
  for _ in $(seq 400); do "$build/tcmctl" --socket "$sock" ping > /dev/null 2>&1 && return 0; sleep 0.05; done
  echo "tcmd did not answer"; exit 1
}
helper=$build/tests/tcm_test_helper
traced_start 1
coproc C { TCM_SOCKET=$sock "$helper" serve; }
read -r _ cpid <&"${C[0]}"
for c in "alloc 1000 1000" "root sd.test" "free" "churn 10000 64" "alloc 10 1000000" "poke"; do
  echo "$c" >&"${C[1]}"; read -r r <&"${C[0]}"; [[ $r == ok ]] || { echo "client: $c: $r"; exit 1; }
done
for c in ping health stats clients classes roots "config get" "config set heap_nice -5" "config set tcache_budget 1M" \
         "resize 512M" release check; do
  "$build/tcmctl" --socket "$sock" $c > /dev/null || { echo "tcmctl $c failed"; exit 1; }
done
curl -sf "http://127.0.0.1:$port/metrics" > /dev/null
kill -HUP "$(pgrep -P "$daemon" -x tcmd)"
id=$("$build/tcmctl" --socket "$sock" --json clients | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["client_id"])')
"$build/tcmctl" --socket "$sock" detach "$id" > /dev/null
kill -9 "$cpid"
wait "${C_PID:-}" 2>/dev/null || true # bash unsets C_PID once it has reaped the coprocess
coproc D { TCM_SOCKET=$sock "$helper" serve; }
read -r _ _ <&"${D[0]}"
echo "alloc 100 5000" >&"${D[1]}"; read -r r <&"${D[0]}"; [[ $r == ok ]]
kill -9 "$(pgrep -P "$daemon" -x tcmd)"   # tcmd itself, with a client attached
wait "$daemon" || true
traced_start 2                              # adopts the heap
echo "alloc 100 5000" >&"${D[1]}"; read -r r <&"${D[0]}"; [[ $r == ok ]] || { echo "client after the restart: $r"; exit 1; }
echo "exit" >&"${D[1]}"; wait "${D_PID:-}" 2>/dev/null || true
"$build/tcmctl" --socket "$sock" check > /dev/null
kill -TERM "$(pgrep -P "$daemon" -x tcmd)"
wait "$daemon" || true
daemon=
python3 - "$trace".* <<'PY'
import re, subprocess, sys
def expand(group, seen):
    out = subprocess.run(["systemd-analyze", "syscall-filter", group], capture_output=True, text=True, check=True).stdout
    calls = set()
    for line in out.splitlines()[1:]:
        s = line.strip()
        if s.startswith("@") and s not in seen:
            seen.add(s)
            calls |= expand(s, seen)
        elif s and not s.startswith(("#", "@")):
            calls.add(s)
    return calls
allowed = expand("@system-service", set())
used = set()
for path in sys.argv[1:]:
    for line in open(path):
        m = re.match(r"^\d+\s+([a-z_0-9]+)\(", line)
        if m:
            used.add(m.group(1))
if len(used) < 20:
    sys.exit("too few system calls traced (%d): is strace working?" % len(used))
bad = sorted(used - allowed - {"execve"})  # execve: strace starting tcmd, before the filter would apply
print("tcmd made %d kinds of system call, %s outside @system-service" % (len(used), bad or "none"))
sys.exit(1 if bad else 0)
PY
echo "unit OK"
