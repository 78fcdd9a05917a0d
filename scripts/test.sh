#!/usr/bin/env bash
# The test command (README, CI): installs what is missing, builds everything with
# AddressSanitizer and UndefinedBehaviorSanitizer, and runs the whole suite with ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SHARDCHECK_TEST_BUILD:-$root/build-test}
jobs=${SHARDCHECK_JOBS:-$(nproc)}
bash "$root/scripts/install-deps.sh"
cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSHARDCHECK_SANITIZE=ON -DSHARDCHECK_BENCH=OFF >/dev/null
cmake --build "$build" -j "$jobs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$build" --output-on-failure -j "$jobs" "$@"
