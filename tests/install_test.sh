#!/usr/bin/env bash
# The installed tree works on its own: cmake --install to a scratch prefix,
# build a program against pkg-config 'tcm' (shared and static), run it on
# the installed tcmd, and ask the installed tcmctl about it.
set -euo pipefail
build=$1
sanitize=${2:-}   # the build's TCM_SANITIZE: the program must use the same runtime
case $sanitize in
  address) san=(-fsanitize=address,undefined) ;;
  thread) san=(-fsanitize=thread) ;;
  *) san=() ;;
esac
source "$(dirname "$0")/common/lib.sh"
scratch install
prefix=$work
sock=$prefix/tcmd.sock

cmake --install "$build" --prefix "$prefix" > /dev/null
for f in bin/tcmd bin/tcmctl bin/tcm-kv include/tcm.h lib/libtcm.a lib/libtcm.so lib/libtcm-malloc.so lib/pkgconfig/tcm.pc \
         lib/systemd/system/tcmd.service etc/default/tcmd etc/tcm/tcmd.conf; do
  [[ -e $prefix/$f ]] || { echo "not installed: $f"; exit 1; }
done
unit=$prefix/lib/systemd/system/tcmd.service
grep -q '^Restart=on-failure' "$unit"
grep -q '^ExecStart=.*/tcmd --foreground --config .*tcmd.conf \$TCMD_OPTIONS' "$unit"
grep -q '^RuntimeDirectoryPreserve=yes' "$unit"
# the installed settings file is one tcmd accepts
"$prefix/bin/tcmd" --config "$prefix/etc/tcm/tcmd.conf" --help > /dev/null
"$prefix/bin/tcm-kv" --help | grep -q -- --maxmemory  # finds the installed libtcm
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cat > "$prefix/prog.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <tcm.h>
int main(void)
{
    char *p = tcm_malloc(100);
    if (!p) return 1;
    strcpy(p, "hello");
    if (tcm_root_set("install.test", p) != 0 || tcm_root_get("install.test") != p) return 2;
    tcm_root_set("install.test", NULL);
    tcm_free(p);
    tcm_shutdown();
    puts("ok");
    return 0;
}
C
cc "${san[@]}" -o "$prefix/prog-shared" "$prefix/prog.c" $(pkg-config --cflags --libs tcm) -Wl,-rpath,"$prefix/lib"
cc "${san[@]}" -o "$prefix/prog-static" "$prefix/prog.c" $(pkg-config --cflags tcm) "$prefix/lib/libtcm.a" \
   $(pkg-config --static --libs-only-l tcm | sed 's/-ltcm\b//')

start_tcmd "$prefix/bin" "$sock" --name "inst$$" --log "$prefix/tcmd.log"
[[ $(TCM_SOCKET=$sock "$prefix/prog-shared") == ok ]]
[[ $(TCM_SOCKET=$sock "$prefix/prog-static") == ok ]]
"$prefix/bin/tcmctl" --socket "$sock" --json stats | grep -q '"clients_total":2'
# one version, project()'s: tcm.pc, tcmctl, tcmd and the man pages say the same
version=$(pkg-config --modversion tcm)
[[ $("$prefix/bin/tcmctl" --version) == "tcmctl $version" ]] || { echo "tcmctl --version is not $version"; exit 1; }
"$prefix/bin/tcmctl" --socket "$sock" --json ping | grep -q "\"version\":\"$version\"" \
  || { echo "tcmd does not say version $version"; exit 1; }
# (the pages are gzipped, as Debian installs them; man reads them so)
for page in man1/tcmctl.1 man1/tcm-kv.1 man3/tcm.3 man7/tcm.7 man7/tcm-malloc.7 man8/tcmd.8; do
  zgrep -q "^\.TH .*\"tcm $version\"" "$prefix/share/man/$page.gz" || { echo "$page.gz does not say tcm $version"; exit 1; }
done
if command -v man > /dev/null; then
  man -M "$prefix/share/man" -w tcm-malloc > /dev/null || { echo "man finds no tcm-malloc in $prefix/share/man"; exit 1; }
fi
stop_tcmd
echo "install: a program built with pkg-config ran against the installed tree"
