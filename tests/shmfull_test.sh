#!/usr/bin/env bash
# A full /dev/shm is ENOMEM, never SIGBUS: in a private mount namespace with
# a 24 MiB /dev/shm, a client fills a (sparse, 1 GiB) heap until allocation
# fails, frees everything and allocates again; the daemon survives it all.
# Needs root and unshare(1); skipped (exit 77) where they are not available.
set -euo pipefail
bin=$1 helper=$2   # bin: where tcmd and tcmctl are
if [[ ${IN_NS:-} != 1 ]]; then
  if ! unshare --mount true 2>/dev/null; then echo "skipped: no mount namespaces"; exit 77; fi
  exec env IN_NS=1 unshare --mount "$0" "$@"
fi
mount --make-rprivate / 2>/dev/null || true
mount -t tmpfs -o size=24m tmpfs /dev/shm
source "$(dirname "$0")/common/lib.sh"
scratch shmfull
sock=$work/tcmd.sock
start_tcmd "$bin" "$sock" --name shmfull --log "$work/tcmd.log"
TCM_SOCKET=$sock "$helper" fill
"$bin/tcmctl" --socket "$sock" ping > /dev/null   # the daemon is still serving
grep -q "fallocate" "$work/tcmd.log"              # and said why allocations failed
stop_tcmd
echo "shmfull: ENOMEM, not SIGBUS, on a full /dev/shm"
