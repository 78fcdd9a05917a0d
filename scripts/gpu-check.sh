#!/usr/bin/env bash
# The GPU half of the promise, checked where a GPU is (nothing in CI has one): builds with
# the CUDA toolkit (sm_90 + PTX), fails unless the CUDA backend finds a device, then runs
#   1. the backend differential: test_backends (device code on OpenMP and on CUDA against
#      the CPU backend, generated cases, the regression corpus, every launch shape);
#   2. a campaign with the CUDA backend beside the CPU backend on every case;
#   3. the CUDA benchmark rows (4096x4096 TP 8 rebuild and extract_all) against memcpy.
# Output: OUT/ (default gpu-out/): ctest.log, campaign/, bench.json, summary.txt.
#
#   scripts/gpu-check.sh [OUT] [CAMPAIGN_SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-gpu-out}
seconds=${2:-60}
build=${SHARDCHECK_GPU_BUILD:-$root/build-gpu}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSHARDCHECK_CUDA=ON -DSHARDCHECK_BENCH=ON \
  -DSHARDCHECK_SANITIZE=OFF >/dev/null
cmake --build "$build" --target shardcheck test_backends shardcheck_bench
status=0
# A skipped CUDA test here means the device was not found: that is a failure of this script.
"$build/test_backends" --gtest_brief=0 2>&1 | tee "$out/ctest.log" || status=1
if grep -q "SKIPPED.*Cuda" "$out/ctest.log"; then
  echo "gpu-check: the CUDA backend found no device" | tee -a "$out/summary.txt"
  exit 1
fi
"$build/shardcheck" campaign --time "$seconds" --backend cuda --out "$out/campaign" --quiet || status=1
"$build/shardcheck_bench" --benchmark_filter='^(cuda|device-omp)/' --benchmark_out="$out/bench.json" \
  --benchmark_out_format=json | tee "$out/bench.log" || status=1
python3 - "$out" <<'PY' | tee -a "$out/summary.txt"
import json, sys
out = sys.argv[1]
for run in json.load(open(f"{out}/bench.json"))["benchmarks"]:
    if run.get("error_occurred"):
        print(f"{run['name']}: skipped: {run.get('error_message', '')}")
        continue
    print(f"{run['name']}: best {run.get('best_ms', 0):.3f} ms, {run.get('vs_memcpy', 0):.2f}x one-thread memcpy")
report = json.load(open(f"{out}/campaign/report.json"))
print(f"campaign --backend cuda: {report['cases']} cases, {len(report.get('findings', []))} findings")
PY
exit $status
