#!/usr/bin/env bash
# Install what tcm needs to build, test and benchmark on Debian 12.
# Idempotent: installs only the missing packages and says nothing when
# everything is already there. Runs as root, or through sudo when available.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config          # toolchain
  libuv1-dev libprotobuf-c-dev protobuf-c-compiler   # tcmd's control socket
  curl python3                              # scripts
  libjemalloc-dev libgoogle-perftools-dev libmimalloc-dev libboost-dev  # benchmark baselines
  valgrind
  clang libclang-rt-14-dev                  # the libFuzzer target of the test suite
  util-linux                                # unshare, for the full-/dev/shm test
  python3-matplotlib                        # benchmark plots (bench/run_suite.sh)
  redis-tools redis-server                  # tcm-kv: its tests drive it with redis-cli and redis-benchmark; the reference server
  sqlite3 perl gzip                         # programs the LD_PRELOAD drop-in is tested on
  gcc-mingw-w64-x86-64 wine64               # the Windows backend: cross-built, its tests run under Wine
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == installed ]] || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

if ((EUID == 0)); then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  echo "setup.sh: missing packages: ${missing[*]}" >&2
  echo "setup.sh: run this script as root (or install sudo) to install them" >&2
  exit 1
fi

echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
