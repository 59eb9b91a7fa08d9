#!/usr/bin/env bash
# The chaos soak, long: tests/stress/test_chaos.c for SECONDS (default 600)
# with SEED (default: the time), against the build in BUILD (default
# build-ci, made by scripts/test.sh). The suite runs a 15-second one.
#   scripts/chaos.sh [SECONDS [SEED]]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build-ci}
seconds=${1:-600}
seed=${2:-$(date +%s)}
cmake --build "$BUILD" --target test_chaos tcm-hostile >/dev/null
echo "chaos.sh: $seconds s, seed $seed ($BUILD)"
exec "$BUILD/tests/test_chaos" "$seconds" "$seed"
