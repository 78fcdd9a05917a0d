#!/usr/bin/env bash
# ThreadSanitizer over the code that runs on threads: the device code on OpenMP threads
# (writer records settled by atomic minimum, first-difference reductions, the fused
# digest), the wide copy's row threads, the parallel check passes and the campaign's
# in-process workers.
#
#   scripts/tsan.sh [GTEST_FILTER]
#
# clang 14 with libomp and its Archer tool (which tells TSan about OpenMP's barriers, so
# that only real races are reported; GCC's libgomp would report its own barriers). Builds
# build-tsan/ (RelWithDebInfo, -DSHARDCHECK_TSAN=ON) and runs the threaded tests with
# OMP_NUM_THREADS=4 (more threads than cores, to vary the schedules), then a short
# in-process campaign with the device backend on every case. Exits non-zero on any
# report. Nightly (.github/workflows/nightly.yml), not in CI: the build alone takes
# about as long as CI's sanitizer build.
#
# Environment: TSAN_BUILD_DIR (default <repo>/build-tsan), TSAN_SKIP_BUILD=1.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${TSAN_BUILD_DIR:-$repo/build-tsan}
filter=${1:-*}
archer=$(clang++ -print-file-name=libarcher.so 2>/dev/null || true)
[[ -f $archer ]] || archer=/usr/lib/llvm-14/lib/libarcher.so
[[ -f $archer ]] || { echo "tsan: libarcher.so not found (clang 14's OpenMP tools, package libomp-14-dev)" >&2; exit 2; }
# Not test_campaign_resilience: isolated workers run under a virtual memory limit, which
# TSan's shadow memory cannot live with (it re-execs and fails); the in-process campaign
# below runs the same engine on threads.
tests=(test_backends test_wide test_convert test_checks)

if [[ ${TSAN_SKIP_BUILD:-0} != 1 ]]; then
  CC=clang CXX=clang++ cmake -G Ninja -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSHARDCHECK_TSAN=ON -DSHARDCHECK_DEVICE_OMP=ON -DSHARDCHECK_CUDA=OFF -DSHARDCHECK_BENCH=OFF >/dev/null
  cmake --build "$build" -j "$(nproc)" --target "${tests[@]}" shardcheck
fi

export OMP_TOOL_LIBRARIES=$archer OMP_NUM_THREADS=4
# libomp itself is not built with TSan: without this its own thread-pool start-up shows
# as races (Archer asks for it).
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 ${TSAN_OPTIONS:-}"
export ARCHER_OPTIONS="verbose=0 ${ARCHER_OPTIONS:-}"
for t in "${tests[@]}"; do
  echo "tsan: $t"
  "$build/$t" --gtest_filter="$filter" --gtest_brief=1
done
echo "tsan: campaign --no-isolate --jobs 4 --backend device-omp"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$build/shardcheck" campaign --seed 1 --cases 3000 --jobs 4 --no-isolate --backend device-omp --out "$out" --quiet
echo "tsan: no race reported"
