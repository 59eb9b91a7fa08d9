#!/usr/bin/env bash
# examples/demo.c as a user runs it: a private tcmd, then tcm-demo against it.
set -euo pipefail
build=$1
source "$(dirname "$0")/common/lib.sh"
scratch demo
export TCM_SOCKET=$work/tcmd.sock
start_tcmd "$build" "$TCM_SOCKET" --name "demo$$" --log "$work/tcmd.log"
out=$("$build/examples/tcm-demo")
grep -q "read and freed 4000 messages from 4 workers, 0 wrong" <<< "$out" || { echo "$out"; exit 1; }
grep -q "every message crossed processes intact" <<< "$out" || { echo "$out"; exit 1; }
"$build/tcmctl" check > /dev/null
stop_tcmd
echo "demo: its output checked"
