#!/usr/bin/env bash
# Build tcm (Release, into ./build), start tcmd on the default socket (or reuse
# the one already answering there) and run examples/demo.c: three forked
# workers and a separate consumer process sharing one heap. The daemon is left
# running; the script prints how to stop it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*"; }

step "checking build dependencies (scripts/setup.sh --demo: the toolchain, libuv, protobuf-c)"
./scripts/setup.sh --demo

step "building tcmd, tcmctl, libtcm and tcm-demo (Release) in ./build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTCM_BUILD_TESTS=OFF -DTCM_BUILD_BENCH=OFF --log-level=WARNING
cmake --build build -j"$(nproc)" --target tcmd tcmctl tcm tcm-demo

TCMD=build/tcmd
TCMCTL=build/tcmctl
DEMO=build/examples/tcm-demo

daemon_pid() { "$TCMCTL" --json ping 2>/dev/null | sed -n 's/.*"daemon_pid":\([0-9]*\).*/\1/p'; }

reused=0
if "$TCMCTL" ping >/dev/null 2>&1; then
  reused=1
  step "tcmd is already running on ${TCM_SOCKET:-the default socket}: reusing it"
  "$TCMCTL" ping
else
  step "starting tcmd (default options; it detaches and logs next to its socket)"
  "$TCMD"
fi
pid=$(daemon_pid)
if [[ -z "$pid" ]]; then
  echo "demo.sh: tcmd does not answer 'tcmctl ping'" >&2
  exit 1
fi

step "running $DEMO"
rc=0
"$DEMO" || rc=$?

step "tcmd is still running (pid $pid)"
echo "    look at it:   $TCMCTL stats    $TCMCTL clients    $TCMCTL --json ping"
echo "    stop it:      kill $pid"
if ((rc != 0)); then
  echo "demo.sh: tcm-demo failed (exit status $rc)" >&2
  if ((reused)); then
    echo "demo.sh: it ran against a tcmd that was already running; if that one is from an" \
         "older build, stop it (kill $pid) and run ./scripts/demo.sh again" >&2
  fi
  exit "$rc"
fi
