#!/usr/bin/env bash
# The GPU half of the promise, checked where a GPU is (nothing in CI has one). One prepared
# script, under 8 minutes with the build on a 16-core machine:
#   1. configure and build with the CUDA toolkit (sm_90 + PTX); fail unless the CUDA
#      backend finds a device;
#   2. the device tests: test_backends (CUDA against the CPU backend on generated cases,
#      generated reshard cases and every case of corpus/regressions/) and
#      test_device_memory (conversion and resharding on device memory: results stay there,
#      the same errors, contract 1.2's refusals on the device);
#   3. a backend-differential campaign, CUDA beside the CPU backend on every case; then one
#      of reshard cases (--op reshard: every plan executed in CUDA device memory), at most
#      SHARDCHECK_GPU_RESHARD_CASES cases (default 100000) within CAMPAIGN_SECONDS;
#   4. DeepSpeed's module on CUDA (SHARDCHECK_DEEPSPEED_DEVICE=cuda) for a while, where its
#      sdist is at hand ($SHARDCHECK_DEEPSPEED_PATH, out/deepspeed/current, or fetched);
#      torch without CUDA says so and runs it on CPU;
#   5. benchmarks: rebuild, extract_all and rebuild with digest verification of 4096x4096
#      and 16384x16384 float32 at TP 8, column and row split, against a device-to-device
#      copy of the same bytes (issue 27: 4096x4096 rebuild at most 0.05 ms on an H200; a
#      1 GiB tensor at 70% of the copy's bandwidth or better, vs_device_copy <= 1.43), and
#      a reshard of 4096x4096 float32 from TP 8 columns to TP 4 rows in device memory.
# Output: OUT/ (default gpu-out/): gpu.txt, build.log, tests.log, campaign/,
# campaign-reshard/, deepspeed/, bench.json, summary.txt. Exit status 0 only when every
# step that ran passed.
#
#   scripts/gpu-check.sh [OUT] [CAMPAIGN_SECONDS] [DEEPSPEED_SECONDS]
#
# SHARDCHECK_GPU_PREBUILT=1 skips step 1 and runs the four programs already in
# $SHARDCHECK_GPU_BUILD (built with -DSHARDCHECK_CUDA=ON on a machine that has the CUDA
# toolkit and the Debian packages but no GPU: a lent GPU machine's image has neither
# GoogleTest nor fmt, and its minutes are better spent running than compiling). Each step
# has its own time limit, so that one hang cannot eat the machine's time.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-gpu-out}
seconds=${2:-60}
ds_seconds=${3:-60}
build=${SHARDCHECK_GPU_BUILD:-$root/build-gpu}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
say() { echo "gpu-check: $*" | tee -a "$summary"; }
status=0
step() {  # step NAME LOG COMMAND...: runs it into LOG, notes pass or fail
  local name=$1 log=$2
  shift 2
  local start=$SECONDS
  if "$@" >"$log" 2>&1; then
    say "$name: ok ($((SECONDS - start)) s)"
  else
    say "$name: FAILED ($((SECONDS - start)) s, see $log)"
    status=1
  fi
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt" ||
  { say "no GPU: nvidia-smi failed"; exit 1; }
jobs=$(nproc)
build_all() {
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSHARDCHECK_CUDA=ON -DSHARDCHECK_BENCH=ON \
    -DSHARDCHECK_TESTS=ON -DSHARDCHECK_SANITIZE=OFF -DSHARDCHECK_PYTHON=OFF -DSHARDCHECK_FUZZ=OFF &&
    cmake --build "$build" -j "$jobs" --target shardcheck test_backends test_device_memory shardcheck_bench
}
if [[ ${SHARDCHECK_GPU_PREBUILT:-0} == 1 ]]; then
  for program in shardcheck test_backends test_device_memory shardcheck_bench; do
    [[ -x $build/$program ]] || { say "prebuilt: $build/$program is missing"; exit 1; }
  done
  say "build: prebuilt ($build)"
else
  step build "$out/build.log" build_all
  [[ $status == 0 ]] || { tail -30 "$out/build.log"; exit 1; }
fi

run_tests() {
  timeout 300 "$build/test_backends" && timeout 120 "$build/test_device_memory"
}
step "device tests" "$out/tests.log" run_tests
# A skipped CUDA test means the backend found no device: that is a failure here.
if grep -q "SKIPPED.*[Cc]uda" "$out/tests.log"; then
  say "the CUDA backend found no device (tests skipped):"
  grep "SKIPPED.*[Cc]uda" "$out/tests.log" | head -3 | tee -a "$summary"
  exit 1
fi
grep -E "^\[  (PASSED|FAILED)" "$out/tests.log" | tee -a "$summary"

step "campaign --backend cuda (${seconds} s)" "$out/campaign.log" \
  timeout $((seconds + 90)) "$build/shardcheck" campaign --time "$seconds" --backend cuda --out "$out/campaign" --quiet --overwrite
reshard_cases=${SHARDCHECK_GPU_RESHARD_CASES:-100000}
step "campaign --op reshard --backend cuda (at most ${reshard_cases} cases, ${seconds} s)" "$out/campaign-reshard.log" \
  timeout $((seconds + 90)) "$build/shardcheck" campaign --op reshard --backend cuda --cases "$reshard_cases" \
  --time "$seconds" --out "$out/campaign-reshard" --quiet --overwrite

ds_path=${SHARDCHECK_DEEPSPEED_PATH:-}
[[ -z $ds_path && -d $root/out/deepspeed/current ]] && ds_path=$root/out/deepspeed/current
if [[ -z $ds_path ]] && timeout 120 bash "$root/scripts/deepspeed-target.sh" >"$out/deepspeed-fetch.log" 2>&1; then
  ds_path=$root/out/deepspeed/current
fi
# The adapter's interpreter must import torch: Debian's /usr/bin/python3 where it does
# (the target's default), else the python3 on PATH (a GPU image's own torch).
python=/usr/bin/python3
"$python" -c 'import torch' 2>/dev/null || python=$(command -v python3 || echo /usr/bin/python3)
[[ $python == /usr/bin/python3 ]] || export SHARDCHECK_DEEPSPEED_COMMAND="exec $python $root/adapters/deepspeed/serve.py"
if [[ -n $ds_path ]]; then
  SHARDCHECK_DEEPSPEED_PATH=$ds_path SHARDCHECK_DEEPSPEED_DEVICE=cuda \
    timeout $((ds_seconds + 120)) "$build/shardcheck" campaign --target deepspeed --time "$ds_seconds" --out "$out/deepspeed" --quiet --overwrite \
    >"$out/deepspeed.log" 2>&1
  # DeepSpeed's silently wrong conversions are findings (exit 1): the run is judged by
  # finishing with a report, not by its verdict.
  if [[ -f $out/deepspeed/report.json ]]; then
    where=cuda
    "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
      where="CPU (this torch sees no CUDA device)"
    say "deepspeed on $where: $(tail -1 "$out/deepspeed.log")"
  else
    say "deepspeed campaign: FAILED (no report; see $out/deepspeed.log)"
    status=1
  fi
else
  say "deepspeed: skipped (no sdist at hand and none could be fetched; see $out/deepspeed-fetch.log)"
fi

step benchmarks "$out/bench.log" timeout 300 "$build/shardcheck_bench" --benchmark_filter='^cuda' \
  --benchmark_out="$out/bench.json" --benchmark_out_format=json
python3 - "$out" <<'PY' | tee -a "$summary"
import json, sys
out = sys.argv[1]
try:
    runs = json.load(open(f"{out}/bench.json"))["benchmarks"]
except (OSError, ValueError) as error:
    print(f"benchmarks: no results ({error})")
    runs = []
for run in runs:
    if run.get("error_occurred"):
        print(f"{run['name']}: skipped: {run.get('error_message', '')}")
        continue
    if "vs_device_copy" in run:
        print(f"{run['name']}: best {run['best_ms']:.3f} ms, {run['vs_device_copy']:.2f}x a device-to-device copy "
              f"({run['device_copy_ms']:.3f} ms)")
for folder, what in (("campaign", "campaign --backend cuda"), ("campaign-reshard", "campaign --op reshard --backend cuda")):
    try:
        report = json.load(open(f"{out}/{folder}/report.json"))
        print(f"{what}: {report['cases']} cases, {len(report.get('findings', []))} findings")
    except (OSError, ValueError, KeyError) as error:
        print(f"{what}: no report ({error})")
PY
say "exit $status"
exit $status
