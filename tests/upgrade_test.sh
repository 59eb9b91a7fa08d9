#!/usr/bin/env bash
# An upgrade keeps the heap (docs/DESIGN.md, "Upgrades"). The previous
# release's package (built from its commit, named in
# packaging/previous-release) is installed with dpkg into a scratch root;
# its tcmd serves two processes built against its libtcm, one linked
# dynamically and one statically, that hold objects and roots and rewrite
# them without pause, and a python3 under its drop-in on the shared heap.
# The current packages are installed over it (dpkg -i,
# an upgrade: the old files replaced, the admin's conffile edit kept), the
# old tcmd is stopped and the new one adopts and migrates the heap. The old
# processes carry on, served by the new tcmd: no allocation fails, no
# object differs from what its writer left, and a process of the new
# release finds, checks and frees everything they published.
#   upgrade_test.sh SRC [DEBS]   DEBS: the current packages, built if absent
set -euo pipefail
src=$1 debs=${2:-}
source "$(dirname "$0")/common/lib.sh"
if ! git -C "$src" rev-parse --git-dir > /dev/null 2>&1; then
  echo "$src is not a git checkout: the previous release cannot be built from it"; exit 77
fi
read -r prev prev_commit < "$src/packaging/previous-release"
git -C "$src" cat-file -e "$prev_commit^{commit}" 2> /dev/null || {
  echo "release $prev's commit $prev_commit is not in $src's history (a shallow clone: git fetch --unshallow)"; exit 77; }
scratch upgrade
git -C "$src" archive --prefix=old/ "$prev_commit" | tar -x -C "$work"
build_debs() { bash "$src/tests/debs_build.sh" "$@" > /dev/null; }
build_debs "$work/old" "$work/old-build"
if [[ -z $debs ]]; then
  debs=$work/new-build
  build_debs "$src" "$debs"
fi

# dpkg into $root: its own database, the maintainer scripts run outside a
# chroot with DPKG_ROOT set, and a systemd-sysusers of our own in PATH, so
# the host gets no package, no user and no unit
root=$work/root shim=$work/shim
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$shim"
touch "$root/var/lib/dpkg/status" "$root/var/lib/dpkg/available"
for tool in systemd-sysusers systemctl; do
  printf '#!/bin/sh\necho "%s $*" >> %s/calls\n' "$tool" "$work" > "$shim/$tool"
  chmod +x "$shim/$tool"
done
pkg() {
  PATH=$shim:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    dpkg --root="$root" --force-script-chrootless --force-depends --force-confdef --force-confold --log="$work/dpkg.log" "$@" \
    < /dev/null > "$work/dpkg.out" 2>&1 || { echo "dpkg $*:"; cat "$work/dpkg.out"; exit 1; }
}
pkg -i "$work"/old-build/*.deb
ma=$(gcc -print-multiarch)
lib=$root/usr/lib/$ma
echo "# an edit of the admin's" >> "$root/etc/tcm/tcmd.conf"

# the old release's processes: the same source against its own package
cc_client() { # OUT STATIC?
  local inc="-I$root/usr/include"
  if [[ $2 == static ]]; then
    cc -O2 $inc -o "$1" "$src/tests/upgrade/client.c" "$lib/libtcm.a" -lprotobuf-c -lpthread
  else
    cc -O2 $inc -o "$1" "$src/tests/upgrade/client.c" -L"$lib" -ltcm
  fi
}
cc_client "$work/old-dyn" dynamic
cc_client "$work/old-static" static
sock=$work/tcmd.sock name=upgrade$$
start_tcmd "$root/usr/bin" "$sock" --name "$name" --log "$work/old.log"
old_daemon=$daemon
LD_LIBRARY_PATH=$lib "$work/old-dyn" "$sock" dyn "$work" > "$work/dyn.out" 2>&1 & dyn=$!
"$work/old-static" "$sock" static "$work" > "$work/static.out" 2>&1 & static=$!
TCM_SOCKET=$sock TCM_MALLOC_FORK=shared TCM_MALLOC_FALLBACK=0 LD_PRELOAD=$lib/libtcm-malloc.so \
  /usr/bin/python3 "$src/tests/upgrade/dropin.py" "$work" > "$work/py.out" 2>&1 & py=$!
rounds() { cat "$work/$1.rounds" 2> /dev/null || echo 0; }
wait_rounds() { # NAME AT_LEAST
  for _ in $(seq 600); do
    (( $(rounds "$1") >= $2 )) && return 0
    kill -0 "$dyn" "$static" "$py" 2> /dev/null || break
    sleep 0.1
  done
  echo "$1 did not reach $2 rounds ($(rounds "$1")):"; cat "$work/$1.out"; tail -n 20 "$work"/*.log; exit 1
}
wait_rounds dyn 40
wait_rounds static 40
wait_rounds py 40

# the upgrade, under the load: packages, then tcmd
pkg -i "$debs"/*.deb
version=$("$root/usr/bin/tcmctl" --version | awk '{print $NF}')
[[ $version != "$prev" ]] || { echo "the upgrade left tcmctl at $prev"; exit 1; }
installed=$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${db:Status-Abbrev}${Package} ${Version}\n' | grep '^ii')
for want in libtcm0 libtcm-dev tcmd; do
  grep -q "^ii *$want $version-" <<< "$installed" || { echo "after the upgrade, no $want $version:"; echo "$installed"; exit 1; }
done
if grep -q " $prev\$" <<< "$installed"; then echo "a package of $prev is still installed:"; echo "$installed"; exit 1; fi
grep -q "^# an edit of the admin's" "$root/etc/tcm/tcmd.conf" || { echo "the upgrade lost /etc/tcm/tcmd.conf's edit"; exit 1; }
before_dyn=$(rounds dyn) before_static=$(rounds static) before_py=$(rounds py)
kill -TERM "$old_daemon"
wait "$old_daemon" || { echo "the old tcmd's stop failed"; cat "$work/old.log"; exit 1; }
start_tcmd "$root/usr/bin" "$sock" --name "$name" --log "$work/new.log"
grep -q "had layout 14 (left by tcmd $prev or older): migrated" "$work/new.log" || {
  echo "the new tcmd did not say it migrated the heap:"; cat "$work/new.log"; exit 1; }
wait_rounds dyn $((before_dyn + 100))
wait_rounds static $((before_static + 100))
wait_rounds py $((before_py + 100))
clients=$("$root/usr/bin/tcmctl" --socket "$sock" --json clients)
for p in "$dyn" "$static" "$py"; do
  grep -q "\"pid\":$p," <<< "$clients" || { echo "old process $p is not a client of the new tcmd: $clients"; exit 1; }
done

touch "$work/stop"
wait "$dyn" || { echo "the old dynamic client failed:"; cat "$work/dyn.out"; exit 1; }
wait "$static" || { echo "the old static client failed:"; cat "$work/static.out"; exit 1; }
wait "$py" || { echo "python3 under the old drop-in failed:"; cat "$work/py.out"; exit 1; }
cc_client "$work/new-dyn" dynamic
LD_LIBRARY_PATH=$lib "$work/new-dyn" "$sock" --check dyn static > "$work/check.out" 2>&1 || {
  echo "the new release's process could not take what the old ones left:"; cat "$work/check.out"; exit 1; }
ctl() { "$root/usr/bin/tcmctl" --socket "$sock" "$@"; }
ctl check > /dev/null
stats=$(ctl --json stats)
# one migration per state layout from 0.2.0's (14) to this tree's
layouts=$(($(sed -n 's/^#define TCM_STATE_VERSION \([0-9]*\)u.*/\1/p' "$src/common/tcm_layout.h") - 14))
grep -q "\"heap_migrations\":$layouts[,}]" <<< "$stats" || { echo "stats: no heap_migrations $layouts"; exit 1; }
# what is still held is what python3 left at its exit (the drop-in's shared
# mode leaves it in the heap), and nothing of the processes the check freed
ctl --json clients --dead | python3 -c '
import json, sys
dead, stats, py = json.load(sys.stdin), json.loads(sys.argv[1]), int(sys.argv[2])
held = stats["bytes_clients"]
whose = {d["pid"]: d["bytes_held"] for d in dead["departed"]}
if set(whose) != {py} or whose[py] != held:
    sys.exit("held %d bytes, departed holders %s: only python3 (pid %d) should hold any" % (held, whose, py))
' "$stats" "$py"
stop_tcmd
echo "upgrade $prev -> $version: old processes (dynamic, static, drop-in: $(rounds dyn), $(rounds static)," \
     "$(rounds py) rounds; $before_dyn, $before_static, $before_py before the upgrade) served by the new tcmd," \
     "$(grep -c freed "$work/check.out") tables checked"
