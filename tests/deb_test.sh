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
dpkg-deb -I "$deb" postinst | grep -q '^ *systemd-sysusers /usr/lib/sysusers.d/tcm.conf$' \
  || { echo "dpkg-deb -I: no postinst that makes the user tcm"; echo "$info"; exit 1; }
# the settings are conffiles (an edit survives an upgrade); ldconfig runs
ctl=$work/control
dpkg-deb -e "$deb" "$ctl"
grep -qx /etc/tcm/tcmd.conf "$ctl/conffiles" && grep -qx /etc/default/tcmd "$ctl/conffiles" \
  || { echo "conffiles: $(cat "$ctl/conffiles" 2>/dev/null)"; exit 1; }
grep -q "activate-noawait ldconfig" "$ctl/triggers" || { echo "no ldconfig trigger"; exit 1; }
grep -q "^libtcm 0 " "$ctl/shlibs" || { echo "shlibs: $(cat "$ctl/shlibs" 2>/dev/null)"; exit 1; }
list=$(dpkg-deb -c "$deb")
for f in usr/bin/tcmd usr/bin/tcmctl usr/bin/tcm-kv usr/include/tcm.h usr/lib/x86_64-linux-gnu/libtcm.so \
         usr/lib/x86_64-linux-gnu/libtcm.a usr/lib/x86_64-linux-gnu/libtcm-malloc.so usr/lib/x86_64-linux-gnu/pkgconfig/tcm.pc \
         usr/lib/systemd/system/tcmd.service usr/lib/sysusers.d/tcm.conf etc/tcm/tcmd.conf etc/default/tcmd \
         usr/share/man/man8/tcmd.8 usr/share/man/man1/tcmctl.1 usr/share/man/man3/tcm.3 usr/share/man/man7/tcm.7 \
         usr/share/man/man7/tcm-malloc.7 usr/include/tcm.hpp usr/share/doc/tcm/README.md usr/share/doc/tcm/DESIGN.md; do
  grep -Eq " \./$f( -> .*)?\$" <<< "$list" || { echo "not in the package: $f"; echo "$list"; exit 1; }
done
dpkg -x "$deb" "$work/root"
grep -q "(heap_size)" "$work/root/usr/share/man/man8/tcmd.8"  # the settings, from tcmd itself
# tcm.pc finds the multiarch libdir from where it is, and README's two link
# lines (dynamic and static) build against the unpacked package
pc=$work/root/usr/lib/x86_64-linux-gnu/pkgconfig
libdir=$(PKG_CONFIG_PATH=$pc pkg-config --variable=libdir tcm)
[[ $(realpath "$libdir") == "$work/root/usr/lib/x86_64-linux-gnu" ]] || { echo "tcm.pc: libdir $libdir"; exit 1; }
printf '#include <tcm.h>\nint main(void) { return tcm_usable_size(0) != 0; }\n' > "$work/app.c"
cc -o "$work/app" "$work/app.c" $(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs tcm)
cc -o "$work/app-static" "$work/app.c" $(PKG_CONFIG_PATH=$pc pkg-config --cflags tcm) "$libdir/libtcm.a" \
   -lprotobuf-c -lpthread
grep -q '^\\fBcheck\\fR$' "$work/root/usr/share/man/man1/tcmctl.1"  # the commands, from tcmctl itself
# A released tcmd has no test crash points: nothing in it reads
# TCM_TEST_CRASH_AT (a build with them holds the name for its getenv), and
# one started with it armed at a client's arrival serves that client.
if grep -q TCM_TEST_CRASH_AT "$work/root/usr/bin/tcmd"; then
  echo "the packaged tcmd is built with the test crash points (TCM_TEST_CRASH_AT)"; exit 1
fi
sock=$work/tcmd.sock
TCM_TEST_CRASH_AT=client_create:1 start_tcmd "$work/root/usr/bin" "$sock" --name "deb$$" --log "$work/tcmd.log"
"$work/root/usr/bin/tcmctl" --socket "$sock" --json ping | grep -q "\"daemon_pid\":$daemon"
out=$(TCM_SOCKET=$sock TCM_MALLOC_FORK=shared TCM_MALLOC_FALLBACK=0 TCM_RECONNECT_TIMEOUT=1 LD_PRELOAD=$work/root/usr/lib/x86_64-linux-gnu/libtcm-malloc.so \
      sort <<< $'b\na')
[[ $out == $'a\nb' ]] || { echo "sort under the packaged libtcm-malloc printed '$out'"; cat "$work/tcmd.log"; exit 1; }
kill -0 "$daemon" 2>/dev/null || { echo "tcmd died on TCM_TEST_CRASH_AT=client_create:1"; cat "$work/tcmd.log"; exit 1; }
"$work/root/usr/bin/tcmctl" --socket "$sock" --json stats | grep -q '"clients_total":1'
"$work/root/usr/bin/tcmctl" --socket "$sock" check > /dev/null
stop_tcmd
echo "deb: $(basename "$deb"), $(wc -l <<< "$list") entries, unpacked daemon and CLI answered"
