#!/usr/bin/env bash
# The Debian packages: build a /usr tree, cpack -G DEB (libtcm0, libtcm-dev,
# tcmd), check each one's control files and contents (dpkg-deb), libtcm0's
# symbols file against what the libraries export, lintian (when installed:
# no error, no warning), then install them with dpkg into a scratch root
# (the host is untouched) over the old single package tcm, reinstall them
# with a conffile edited, build README's link lines and a C++ program
# against that root and run them, the drop-in and tcmctl on its tcmd.
#   deb_test.sh SRC [BUILD]   BUILD: where tests/debs_build.sh made them,
#                             else they are built here
set -euo pipefail
src=$1
source "$(dirname "$0")/common/lib.sh"
scratch deb
start=$SECONDS
fail() { echo "deb: $*"; exit 1; }
build=${2:-$work/build}
[[ -n ${2:-} ]] || bash "$(dirname "$0")/debs_build.sh" "$src" "$build" > /dev/null
version=$(sed -n 's/^Version: //p' "$build/tcm.pc")
debver=$version-1
multiarch=$(gcc -print-multiarch)
lib=usr/lib/$multiarch
packages=(libtcm0 libtcm-dev tcmd)
debs=()
for p in "${packages[@]}"; do
  deb=$build/${p}_${debver}_$(dpkg --print-architecture).deb
  [[ -f $deb ]] || fail "cpack made no $(basename "$deb"): $(cd "$build" && ls ./*.deb)"
  debs+=("$deb")
done
[[ $(ls "$build"/*.deb | wc -l) == 3 ]] || fail "cpack made other packages too: $(ls "$build"/*.deb)"

# control: names, dependencies, the takeover of tcm, scripts, conffiles
field() { dpkg-deb -f "$build/${1}_${debver}_"*.deb "$2"; }
for p in "${packages[@]}"; do
  [[ $(field "$p" Version) == "$debver" ]] || fail "$p: Version $(field "$p" Version)"
  # dpkg -i of these over an installed tcm removes it and takes its files
  [[ $(field "$p" Replaces) == "tcm (<< $debver)" && $(field "$p" Conflicts) == "tcm (<< $debver)" ]] \
    || fail "$p: Replaces '$(field "$p" Replaces)', Conflicts '$(field "$p" Conflicts)'"
  ctl=$work/control/$p && mkdir -p "$work/control"
  dpkg-deb -e "$build/${p}_${debver}_"*.deb "$ctl"
done
grep -q "libprotobuf-c1" <<< "$(field libtcm0 Depends)" || fail "libtcm0 Depends: $(field libtcm0 Depends)"
[[ $(field libtcm-dev Depends) == "libtcm0 (= $debver), libprotobuf-c-dev" ]] || fail "libtcm-dev Depends: $(field libtcm-dev Depends)"
grep -q "^libtcm0 (>= $debver), .*libuv1" <<< "$(field tcmd Depends)" || fail "tcmd Depends: $(field tcmd Depends)"
grep -q '^ *systemd-sysusers ${DPKG_ROOT:+--root="$DPKG_ROOT"} "$DPKG_ROOT/usr/lib/sysusers.d/tcm.conf"$' \
  "$work/control/tcmd/postinst" || fail "tcmd: no postinst that makes the user tcm: $(cat "$work/control/tcmd/postinst")"
[[ $(cat "$work/control/tcmd/conffiles") == $'/etc/tcm/tcmd.conf\n/etc/default/tcmd' ]] \
  || fail "tcmd conffiles: $(cat "$work/control/tcmd/conffiles")"
grep -qx "activate-noawait ldconfig" "$work/control/libtcm0/triggers" || fail "libtcm0: no ldconfig trigger"
grep -qx "libtcm 0 libtcm0 (>= $debver)" "$work/control/libtcm0/shlibs" || fail "shlibs: $(cat "$work/control/libtcm0/shlibs")"
cmp -s "$work/control/libtcm0/symbols" "$src/packaging/libtcm0.symbols" || fail "libtcm0's symbols is not packaging/libtcm0.symbols"

# contents: each file in its package, and every file `cmake --install` puts
# under /usr and /etc in one of them (but /usr/share/doc/tcm: the packages
# have their own doc directories)
declare -A owner
for p in "${packages[@]}"; do
  while read -r f; do owner[$f]=$p; done < <(dpkg-deb -c "$build/${p}_${debver}_"*.deb | awk '$1 !~ /^d/ {print substr($6, 3)}')
done
expect() {
  local p=$1 f
  shift
  for f in "$@"; do [[ ${owner[$f]:-} == "$p" ]] || fail "$f: in ${owner[$f]:-no package}, not in $p"; done
}
docs() { echo "usr/share/doc/$1/copyright usr/share/doc/$1/changelog.Debian.gz"; }
expect libtcm0 $lib/libtcm.so.0 $lib/libtcm.so.$version $lib/libtcm-malloc.so usr/share/man/man7/tcm-malloc.7.gz \
  $(docs libtcm0) usr/share/lintian/overrides/libtcm0
expect libtcm-dev usr/include/tcm.h usr/include/tcm.hpp $lib/libtcm.so $lib/libtcm.a $lib/pkgconfig/tcm.pc \
  usr/share/man/man3/tcm.3.gz $(docs libtcm-dev)
expect tcmd usr/bin/tcmd usr/bin/tcmctl usr/bin/tcm-kv usr/lib/systemd/system/tcmd.service usr/lib/sysusers.d/tcm.conf \
  etc/tcm/tcmd.conf etc/default/tcmd usr/share/man/man8/tcmd.8.gz usr/share/man/man1/tcmctl.1.gz \
  usr/share/man/man1/tcm-kv.1.gz usr/share/man/man7/tcm.7.gz usr/share/doc/tcmd/README.md \
  usr/share/doc/tcmd/DESIGN.md usr/share/doc/tcmd/BENCHMARKS.md $(docs tcmd)
DESTDIR=$work/all cmake --install "$build" > /dev/null
while read -r f; do
  [[ -n ${owner[$f]:-} ]] || fail "cmake --install installs $f, which no package has"
done < <(cd "$work/all" && find . ! -type d ! -path './usr/share/doc/tcm/*' | cut -c3-)
mkdir -p "$work/x"
for p in "${packages[@]}"; do dpkg-deb -x "$build/${p}_${debver}_"*.deb "$work/x/$p"; done
top=$(zcat "$work/x/tcmd/usr/share/doc/tcmd/changelog.Debian.gz" | head -1)
[[ $top == "tcm ($debver) unstable; urgency=medium" ]] || fail "changelog.Debian.gz begins '$top'"
grep -q '^License: Expat$' "$work/x/tcmd/usr/share/doc/tcmd/copyright" || fail "copyright: no License: Expat"

# libtcm0's symbols file lists what each library exports, no more, no less
# (a function added or removed without a line there fails here)
symbols_of() { # SONAME: the names the symbols file gives it
  awk -v so="$1" '/^[^ *]/ {in_lib = ($1 == so)} in_lib && /^ / {sub(/@.*/, "", $1); print $1}' \
    "$src/packaging/libtcm0.symbols" | sort
}
for so in libtcm.so.0 libtcm-malloc.so; do
  exported=$(nm -D --defined-only "$work/x/libtcm0/$lib/$so" | awk '{print $3}' | sort)
  listed=$(symbols_of "$so")
  [[ $exported == "$listed" ]] || fail "packaging/libtcm0.symbols is not what $so exports:
$(diff <(echo "$listed") <(echo "$exported") | grep '^[<>]' | sed 's/^</  only in the symbols file:/; s/^>/  only exported:/')"
done

if command -v lintian > /dev/null; then
  lintian --fail-on error,warning "${debs[@]}" > "$work/lintian.log" 2>&1 \
    || { grep -v 'running with root privileges' "$work/lintian.log"; fail "lintian"; }
  linted="lintian clean"
else
  linted="no lintian"
fi

# install into a scratch root, over the old single package tcm (a stand-in
# with some of its files, a conffile among them): plain dpkg -i removes it
root=$work/root
mkdir -p "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/info"
touch "$root/var/lib/dpkg/status" "$root/var/lib/dpkg/available"
old=$work/old
mkdir -p "$old/DEBIAN" "$old/usr/bin" "$old/$lib" "$old/usr/include" "$old/etc/tcm" "$old/usr/share/doc/tcm"
printf 'Package: tcm\nVersion: 0.2.0\nArchitecture: %s\nMaintainer: tcm <tcm@example.org>\nDescription: the old single package\n' \
  "$(dpkg --print-architecture)" > "$old/DEBIAN/control"
echo /etc/tcm/tcmd.conf > "$old/DEBIAN/conffiles"
cp "$src/packaging/tcmd.conf" "$old/etc/tcm/tcmd.conf"
for f in usr/bin/tcmd $lib/libtcm.so.0 usr/include/tcm.h usr/share/doc/tcm/README.md; do echo old > "$old/$f"; done
dpkg-deb --root-owner-group -b "$old" "$work/tcm_0.2.0.deb" > /dev/null
host_users=$(cat /etc/passwd /etc/group /etc/shadow /etc/gshadow 2>/dev/null | md5sum)
dpkg_root() { dpkg --root="$root" --force-script-chrootless --force-depends "$@" < /dev/null >> "$work/dpkg.log" 2>&1 \
                || { cat "$work/dpkg.log"; fail "dpkg $*"; }; }
dpkg_root -i "$work/tcm_0.2.0.deb"
echo "# edited under tcm 0.2.0" >> "$root/etc/tcm/tcmd.conf"
dpkg_root -i "${debs[@]}"
status() { dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${db:Status-Status}' "$1"; }
for p in "${packages[@]}"; do [[ $(status "$p") == installed ]] || fail "$p: $(status "$p") in the scratch root"; done
[[ $(status tcm) == config-files ]] || fail "tcm is $(status tcm) after the new packages, not removed"
[[ $(dpkg-query --admindir="$root/var/lib/dpkg" -S /etc/tcm/tcmd.conf) == "tcmd: /etc/tcm/tcmd.conf" ]] \
  || fail "/etc/tcm/tcmd.conf: $(dpkg-query --admindir="$root/var/lib/dpkg" -S /etc/tcm/tcmd.conf)"
# postinst made the user in the root (DPKG_ROOT), not on this system
if command -v systemd-sysusers > /dev/null; then
  grep -q '^tcm:' "$root/etc/passwd" || fail "postinst made no user tcm in the scratch root"
fi
[[ $(cat /etc/passwd /etc/group /etc/shadow /etc/gshadow 2>/dev/null | md5sum) == "$host_users" ]] \
  || fail "installing into the scratch root changed this system's users or groups"
# an edited conffile survives the takeover from tcm and a reinstall
echo "log_level = debug # deb test" >> "$root/etc/tcm/tcmd.conf"
dpkg_root -i "${debs[@]}"
grep -q '^# edited under tcm 0.2.0$' "$root/etc/tcm/tcmd.conf" || fail "the edit made under tcm 0.2.0 is gone"
grep -q '^log_level = debug # deb test$' "$root/etc/tcm/tcmd.conf" || fail "the edit of /etc/tcm/tcmd.conf did not survive a reinstall"
"$root/usr/bin/tcmd" --config "$root/etc/tcm/tcmd.conf" --help > /dev/null  # (and tcmd reads it)
zgrep -q "(heap_size)" "$root/usr/share/man/man8/tcmd.8.gz"  # the settings, from tcmd itself
zgrep -q '^\\fBcheck\\fR$' "$root/usr/share/man/man1/tcmctl.1.gz"  # the commands, from tcmctl itself
if command -v man > /dev/null; then
  for page in tcmd tcmctl tcm-kv tcm-malloc 3\ tcm 7\ tcm; do
    # shellcheck disable=SC2086
    man -M "$root/usr/share/man" -w $page > /dev/null || fail "man finds no $page in the root"
  done
fi

# README's link lines, as a user copies them, with the root's tcm.pc (it
# finds its prefix from where it is), and a C++ program with tcm.hpp
export PKG_CONFIG_PATH=$root/$lib/pkgconfig
libdir=$(pkg-config --variable=libdir tcm)
[[ $(realpath "$libdir") == "$root/$lib" ]] || fail "tcm.pc: libdir $libdir"
cat > "$work/app.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <tcm.h>
int main(void)
{
    char *p = tcm_malloc(100);
    if (!p) return 1;
    strcpy(p, "hello");
    if (tcm_root_set("deb.test", p) != 0 || tcm_root_get("deb.test") != p) return 2;
    tcm_root_set("deb.test", NULL);
    tcm_free(p);
    tcm_shutdown();
    puts("ok");
    return 0;
}
C
cat > "$work/app.cpp" <<'CXX'
#include <cstdio>
#include <numeric>
#include <vector>
#include <tcm.hpp>
int main()
{
    {
        std::vector<long, tcm::allocator<long>> v;
        for (long i = 1; i <= 10000; i++) v.push_back(i);
        if (std::accumulate(v.begin(), v.end(), 0L) != 50005000L) return 1;
        if (tcm_usable_size(v.data()) < v.size() * sizeof(long)) return 2; // in the tcm heap
    } // (freed before tcm_shutdown: a free after it attaches again)
    tcm_shutdown();
    std::puts("ok");
    return 0;
}
CXX
shared_line=$(grep -m1 '^cc app\.c .*# shared libtcm$' "$src/README.md") || fail "README has no shared link line"
static_line=$(grep -m1 '^cc app\.c .*# static$' "$src/README.md") || fail "README has no static link line"
(cd "$work" && eval "${shared_line/cc app.c/cc -o app-shared app.c}" && eval "${static_line/cc app.c/cc -o app-static app.c}")
c++ -o "$work/app-cxx" "$work/app.cpp" $(pkg-config --cflags --libs tcm)
sock=$work/tcmd.sock
# A released tcmd has no test crash points: nothing in it reads
# TCM_TEST_CRASH_AT (a build with them holds the name for its getenv), and
# one started with it armed at a client's arrival serves that client.
if grep -q TCM_TEST_CRASH_AT "$root/usr/bin/tcmd"; then
  fail "the packaged tcmd is built with the test crash points (TCM_TEST_CRASH_AT)"
fi
TCM_TEST_CRASH_AT=client_create:1 start_tcmd "$root/usr/bin" "$sock" --name "deb$$" --log "$work/tcmd.log"
"$root/usr/bin/tcmctl" --socket "$sock" --json ping | grep -q "\"version\":\"$version\""
for app in app-shared app-static app-cxx; do
  out=$(TCM_SOCKET=$sock LD_LIBRARY_PATH=$root/$lib "$work/$app") || fail "$app exited $?: $out"
  [[ $out == ok ]] || fail "$app printed '$out'"
done
out=$(TCM_SOCKET=$sock TCM_MALLOC_FORK=shared TCM_MALLOC_FALLBACK=0 TCM_RECONNECT_TIMEOUT=1 LD_PRELOAD=$root/$lib/libtcm-malloc.so \
      sort <<< $'b\na')
[[ $out == $'a\nb' ]] || { cat "$work/tcmd.log"; fail "sort under the packaged libtcm-malloc printed '$out'"; }
kill -0 "$daemon" 2>/dev/null || { cat "$work/tcmd.log"; fail "tcmd died on TCM_TEST_CRASH_AT=client_create:1"; }
"$root/usr/bin/tcm-kv" --help | grep -q -- --maxmemory  # (finds the root's libtcm through its RUNPATH)
"$root/usr/bin/tcmctl" --socket "$sock" --json stats | grep -q '"clients_total":4' \
  || fail "tcmd did not count 4 clients: $("$root/usr/bin/tcmctl" --socket "$sock" --json stats)"
"$root/usr/bin/tcmctl" --socket "$sock" check > /dev/null
stop_tcmd
echo "deb: ${packages[*]} $debver, ${#owner[@]} files, $linted, installed over tcm 0.2.0 into a scratch root," \
     "conffile edits kept, C (shared, static), C++ and the drop-in ran on its tcmd ($((SECONDS - start)) s)"
