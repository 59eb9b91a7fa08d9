#!/usr/bin/env bash
# The packages install.deb and install.upgrade test, built once: a Release
# tree with the /usr prefix in OUT and cpack -G DEB there.
#   debs_build.sh SRC OUT
set -euo pipefail
src=$1 out=$2
rm -f "$out"/*.deb # this version's only (a build tree of its own, reused)
cmake -S "$src" -B "$out" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr -DTCM_BUILD_TESTS=OFF \
      -DTCM_BUILD_BENCH=OFF > /dev/null
cmake --build "$out" -j"${JOBS:-2}" > /dev/null
(cd "$out" && cpack -G DEB > "$out/cpack.log" 2>&1) || { cat "$out/cpack.log"; echo "cpack failed"; exit 1; }
ls "$out"/*.deb
