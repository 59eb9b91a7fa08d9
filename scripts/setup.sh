#!/usr/bin/env bash
# Install what tcm needs to build, test and benchmark on Debian 12.
#   --demo   only what scripts/demo.sh needs: the toolchain, libuv and protobuf-c
# Idempotent: installs only the missing packages and says nothing when
# everything is already there. Runs as root, or through sudo when available.
set -euo pipefail

DEMO_PACKAGES=(
  build-essential cmake pkg-config          # toolchain
  libuv1-dev libprotobuf-c-dev protobuf-c-compiler   # tcmd's control socket
  zlib1g-dev libdw-dev                      # tcmctl heap-profile: gzip, and symbols with their files and lines
)
PACKAGES=(
  "${DEMO_PACKAGES[@]}"
  curl python3                              # scripts
  libjemalloc-dev libgoogle-perftools-dev libmimalloc-dev libboost-dev  # benchmark baselines
  valgrind
  clang libclang-rt-14-dev                  # the libFuzzer target of the test suite
  util-linux                                # unshare, for the full-/dev/shm test
  python3-matplotlib                        # benchmark plots (bench/run_suite.sh)
  redis-tools redis-server                  # tcm-kv: its tests drive it with redis-cli and redis-benchmark; the reference server
  sqlite3 perl gzip                         # programs the LD_PRELOAD drop-in is tested on
  rocksdb-tools memcached libmemcached-tools z3 ghostscript ruby  # real programs the drop-in is measured on (bench/run_preload.sh)
  prometheus                                # promtool: the /metrics page is checked with it
  gcc-mingw-w64-x86-64 wine64               # the Windows backend: cross-built, its tests run under Wine
  lintian                                   # install.deb: the Debian packages have no lintian error nor warning
)

# Debian's source of the two libraries tcmd's control plane needs, for the
# Windows build (cmake/windows.cmake): Debian packages them only for Linux.
# The versions are bookworm's; the checksums are those of their .dsc files.
SOURCES=(
  "libu/libuv1/libuv1_1.44.2.orig.tar.gz d79b4b06ef04be85fb890bf39d55942cc64c2e15fd14eaa32dae5dce94485484"
  "p/protobuf-c/protobuf-c_1.4.1.orig.tar.gz 4cc4facd508172f3e0a4d3a8736225d472418aee35b4ad053384b137b220339f"
)
DEPS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.deps"

install_packages() {
  local missing=() p status
  for p in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [[ "$status" == installed ]] || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0

  local sudo=()
  if ((EUID != 0)); then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
    else
      echo "setup.sh: missing packages: ${missing[*]}" >&2
      echo "setup.sh: run this script as root (or install sudo) to install them" >&2
      exit 1
    fi
  fi
  echo "setup.sh: installing ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# .deps/NAME-VERSION/, unpacked from the Debian archive once, checksum verified.
fetch_sources() {
  local entry path sum file
  for entry in "${SOURCES[@]}"; do
    read -r path sum <<<"$entry"
    file="$DEPS_DIR/${path##*/}"
    [[ -f "$file.ok" ]] && continue
    mkdir -p "$DEPS_DIR"
    echo "setup.sh: fetching Debian's ${path##*/}"
    curl -fsSL --retry 3 -o "$file" "http://deb.debian.org/debian/pool/main/$path"
    if ! echo "$sum  $file" | sha256sum -c --quiet -; then
      echo "setup.sh: checksum mismatch for $file" >&2
      rm -f "$file"
      exit 1
    fi
    tar -xzf "$file" -C "$DEPS_DIR"
    touch "$file.ok"
  done
}

if [[ "${1:-}" == --demo ]]; then
  PACKAGES=("${DEMO_PACKAGES[@]}")
  install_packages
  exit 0
fi
install_packages
fetch_sources
