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

# tcm-kv: the installed one has none of the tests' hooks (they are in
# tcm-kv-test, never installed): nothing in it holds DEBUG HOLD's log line
# or --threads, and it answers DEBUG as a command it does not know. And the
# example builds from the installed tree alone, as a user who copies
# examples/kv builds it (tcm.h and libtcm; no private header of tcm's).
kv=$prefix/bin/tcm-kv
for hook in "DEBUG HOLD" "--threads" "kv_crash_at"; do
  if grep -q -- "$hook" "$kv"; then echo "the installed tcm-kv holds the test hook '$hook'"; exit 1; fi
done
kv_src=$(cd "$(dirname "$0")/../examples/kv" && pwd)
cc "${san[@]}" -std=gnu11 -o "$prefix/tcm-kv-copy" -DKV_VERSION="\"$version\"" \
   "$kv_src"/{main,server,conn,resp,commands,table,size}.c \
   $(pkg-config --cflags tcm libuv) $(pkg-config --libs tcm libuv) -lpthread -Wl,-rpath,"$prefix/lib" \
  || { echo "examples/kv does not build from the installed tree alone"; exit 1; }
# kv_ask BIN CMD: start BIN (one worker) on tcmd, send CMD inline, print the reply
kv_ask() {
  local bin=$1 port pid out=
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$bin" --socket "$sock" --port "$port" --workers 1 2> "$prefix/kv.log" &
  pid=$!
  for _ in $(seq 200); do
    out=$( (exec 3<> "/dev/tcp/127.0.0.1/$port" && printf '%s\r\nQUIT\r\n' "$2" >&3 && timeout 5 cat <&3) 2> /dev/null) \
      && [[ -n $out ]] && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.05
  done
  kill "$pid" 2> /dev/null || true
  wait "$pid" || { echo "$bin did not stop cleanly"; cat "$prefix/kv.log"; return 1; }
  printf '%s\n' "$out"
}
reply=$(kv_ask "$kv" "DEBUG CRASH put")
[[ $reply == "-ERR unknown command 'DEBUG'"* ]] || { echo "the installed tcm-kv answered DEBUG: $reply"; exit 1; }
for bin in "$kv" "$prefix/tcm-kv-copy"; do
  reply=$(kv_ask "$bin" "INFO server")
  [[ $reply == *"tcm_kv_version:$version"* ]] || { echo "$bin's INFO does not say version $version: $reply"; exit 1; }
done
stop_tcmd
echo "install: a program built with pkg-config ran against the installed tree"
