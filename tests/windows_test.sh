#!/usr/bin/env bash
# The Windows backend, from the Linux suite: cross-build the platform layer,
# tcmd's heap, libtcm's caches and their tests with mingw-w64
# (cmake/mingw-w64.cmake, warnings as errors) and run the tests under Wine
# (ctest's emulator), in a Wine prefix of the build's own.
#   windows_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
for tool in x86_64-w64-mingw32-gcc /usr/lib/wine/wine64; do
  command -v "$tool" >/dev/null || { echo "windows_test.sh: $tool is missing (scripts/setup.sh installs it)" >&2; exit 1; }
done
export WINEPREFIX=$build/wineprefix WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
stop_wine() { /usr/lib/wine/wineserver -k 2>/dev/null || true; }
trap stop_wine EXIT
cmake -S "$src" -B "$build" --log-level=WARNING -DCMAKE_TOOLCHAIN_FILE="$src/cmake/mingw-w64.cmake" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTCM_WERROR=ON
cmake --build "$build" -j"${JOBS:-2}"
# A test that fails is run once more: Wine, not tcm, sometimes fails to
# start a child process (win.shm's spawn, -EIO, once in a clean clone's
# run; then 3 of 3 passed). A real failure fails both runs.
ctest --test-dir "$build" --output-on-failure --timeout 300 --no-tests=error --repeat until-pass:2
