#!/usr/bin/env bash
# The test command (README, CI): installs what is missing, builds everything with
# AddressSanitizer and UndefinedBehaviorSanitizer, and runs the whole suite with ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SHARDCHECK_TEST_BUILD:-$root/build-test}
jobs=${SHARDCHECK_JOBS:-$(nproc)}
bash "$root/scripts/install-deps.sh"
# -O1 and line tables only, as OSS-Fuzz builds its sanitizer targets: AddressSanitizer
# catches the same faults and the reports keep file:line, at less than half the compile
# time of -O2 -g (80 -> 34 s for one test file on a 2-core machine), most of CI's time.
opt=${SHARDCHECK_TEST_OPT:--O1 -g1}
# The project's own sources build without a warning (GCC 12): any new one fails the build.
# SHARDCHECK_WERROR=OFF keeps them warnings (another compiler, say).
werror=${SHARDCHECK_WERROR:-ON}
# The CUDA backend compiles wherever nvcc is, GPU or not (CMake's AUTO builds it only
# where a GPU is): CI has no GPU but must see that the device code still compiles.
cuda=OFF
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then cuda=ON; fi
cuda=${SHARDCHECK_CUDA:-$cuda}
cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$opt -DNDEBUG" \
  -DSHARDCHECK_SANITIZE=ON -DSHARDCHECK_BENCH=OFF "-DSHARDCHECK_WERROR=$werror" "-DSHARDCHECK_CUDA=$cuda" >/dev/null
build_start=$SECONDS
cmake --build "$build" -j "$jobs"
echo "test.sh: build took $((SECONDS - build_start)) s"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$build" --output-on-failure -j "$jobs" "$@"
