#!/usr/bin/env bash
# A full /dev/shm is ENOMEM, never SIGBUS: in a private mount namespace with
# a 24 MiB /dev/shm, a client fills a (sparse, 1 GiB) heap until allocation
# fails, frees everything and allocates again; the daemon survives it all.
# Needs root and unshare(1); skipped (exit 77) where they are not available.
set -euo pipefail
tcmd=$1 helper=$2 tcmctl=$3
if [[ ${IN_NS:-} != 1 ]]; then
  if ! unshare --mount true 2>/dev/null; then echo "skipped: no mount namespaces"; exit 77; fi
  exec env IN_NS=1 unshare --mount "$0" "$@"
fi
mount --make-rprivate / 2>/dev/null || true
mount -t tmpfs -o size=24m tmpfs /dev/shm
sock=/tmp/tcm-shmfull-$$.sock
"$tcmd" --foreground --socket "$sock" --name shmfull --log /tmp/tcm-shmfull-$$.log &
daemon=$!
trap 'kill $daemon 2>/dev/null || true; rm -f /tmp/tcm-shmfull-$$.log' EXIT
for _ in $(seq 100); do "$tcmctl" --socket "$sock" ping > /dev/null 2>&1 && break; sleep 0.05; done
TCM_SOCKET=$sock "$helper" fill
"$tcmctl" --socket "$sock" ping > /dev/null   # the daemon is still serving
grep -q "fallocate" /tmp/tcm-shmfull-$$.log   # and said why allocations failed
kill $daemon
wait $daemon
echo "shmfull: ENOMEM, not SIGBUS, on a full /dev/shm"
