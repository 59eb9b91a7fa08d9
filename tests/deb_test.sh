#!/usr/bin/env bash
# The Debian package: build a /usr tree, cpack -G DEB, list it (dpkg-deb -c,
# -I), unpack it into a scratch directory (dpkg -x) and run the unpacked
# tcmd and tcmctl against each other.
set -euo pipefail
src=$1
source "$(dirname "$0")/common/lib.sh"
scratch deb
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr -DTCM_BUILD_TESTS=OFF \
      -DTCM_BUILD_BENCH=OFF > /dev/null
cmake --build "$work/build" -j"${JOBS:-2}" > /dev/null
(cd "$work/build" && cpack -G DEB > /dev/null)
deb=$(ls "$work"/build/tcm_*.deb)
info=$(dpkg-deb -I "$deb")
grep -q '^ Package: tcm$' <<< "$info" || { echo "dpkg-deb -I: no 'Package: tcm'"; echo "$info"; exit 1; }
grep -q '^ Depends: .*libuv1' <<< "$info" || { echo "dpkg-deb -I: no dependency on libuv1"; echo "$info"; exit 1; }
list=$(dpkg-deb -c "$deb")
for f in usr/bin/tcmd usr/bin/tcmctl usr/bin/tcm-kv usr/include/tcm.h usr/lib/x86_64-linux-gnu/libtcm.so \
         usr/lib/x86_64-linux-gnu/libtcm.a usr/lib/x86_64-linux-gnu/libtcm-malloc.so usr/lib/x86_64-linux-gnu/pkgconfig/tcm.pc \
         usr/lib/systemd/system/tcmd.service etc/tcm/tcmd.conf etc/default/tcmd \
         usr/share/man/man8/tcmd.8 usr/share/man/man1/tcmctl.1 usr/share/man/man3/tcm.3; do
  grep -Eq " \./$f( -> .*)?\$" <<< "$list" || { echo "not in the package: $f"; echo "$list"; exit 1; }
done
dpkg -x "$deb" "$work/root"
grep -q "(heap_size)" "$work/root/usr/share/man/man8/tcmd.8"  # the settings, from tcmd itself
sock=$work/tcmd.sock
start_tcmd "$work/root/usr/bin" "$sock" --name "deb$$" --log "$work/tcmd.log"
"$work/root/usr/bin/tcmctl" --socket "$sock" --json ping | grep -q "\"daemon_pid\":$daemon"
"$work/root/usr/bin/tcmctl" --socket "$sock" check > /dev/null
stop_tcmd
echo "deb: $(basename "$deb"), $(wc -l <<< "$list") entries, unpacked daemon and CLI answered"
