#!/usr/bin/env bash
# examples/demo.c as a user runs it: a private tcmd, then tcm-demo against it.
set -euo pipefail
build=$1
work=$(mktemp -d /tmp/tcm-demo.XXXXXX)
daemon=
cleanup() { if [[ -n $daemon ]]; then kill "$daemon" 2>/dev/null; fi; rm -rf "$work"; }
trap cleanup EXIT
export TCM_SOCKET=$work/tcmd.sock
"$build/tcmd" --foreground --name "demo$$" --log "$work/tcmd.log" &
daemon=$!
for _ in $(seq 100); do "$build/tcmctl" ping > /dev/null 2>&1 && break; sleep 0.05; done
out=$("$build/examples/tcm-demo")
grep -q "read and freed 4000 messages from 4 workers, 0 wrong" <<< "$out" || { echo "$out"; exit 1; }
grep -q "every message crossed processes intact" <<< "$out" || { echo "$out"; exit 1; }
"$build/tcmctl" check > /dev/null
kill "$daemon"
wait "$daemon"
daemon=
echo "demo: its output checked"
