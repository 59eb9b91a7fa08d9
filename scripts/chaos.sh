#!/usr/bin/env bash
# The chaos soak, long: tests/stress/test_chaos.c for SECONDS (default 600)
# with SEED (default: the time), against the build in BUILD (default
# build-ci, made by scripts/test.sh). The suite runs a 15-second one.
#   scripts/chaos.sh [SECONDS [SEED]]
# With --churn, the client churn soak instead: tests/integration/test_churn.c
# for LIFETIMES client lifetimes (default 1 000 000; the suite runs 70 000),
# tcmd killed and adopted halfway; it prints what the departed left, the
# departed-holders table, the state segment and tcmd's log at the end.
#   scripts/chaos.sh --churn [LIFETIMES [--mixed]]
# (--mixed: some lifetimes also fork an attaching child or exec a drop-in
# program; see tests/integration/test_churn.c)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build-ci}
if [[ ${1:-} == --churn ]]; then
  lifetimes=${2:-1000000}
  cmake --build "$BUILD" --target test_churn >/dev/null
  echo "chaos.sh: churn, $lifetimes lifetimes ($BUILD)"
  exec "$BUILD/tests/test_churn" "$lifetimes" ${3:-}
fi
seconds=${1:-600}
seed=${2:-$(date +%s)}
cmake --build "$BUILD" --target test_chaos tcm-hostile >/dev/null
echo "chaos.sh: $seconds s, seed $seed ($BUILD)"
exec "$BUILD/tests/test_chaos" "$seconds" "$seed"
