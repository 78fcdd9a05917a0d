#!/usr/bin/env bash
# The Python suite under torch 2 (the nightly's torch2 job): the torch 2 environment
# (scripts/torch2-env.sh), the release's wheel (scripts/release.sh) installed into it
# offline, pytest over python/tests there, then, when a test build is given, the torch 2
# targets' gtests (tests/test_torch2_targets.cc: exact conversion, `unsupported` never a
# false refusal, the planted bugs found) and the DeepSpeed targets' (affine.py, the
# restore, the conversion, the planner) with every adapter on torch 2
# (SHARDCHECK_TARGET_PYTHON; DeepSpeed 0.19.8's sdist from scripts/deepspeed-target.sh).
#
#   bash scripts/torch2-test.sh [WHEEL_DIR [BUILD_DIR]]
#     WHEEL_DIR  a folder release.sh made (default: make one)
#     BUILD_DIR  a build with SHARDCHECK_TESTS=ON: ctest -R Torch2|Dcp|Megatron runs there
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
wheels=${1:-}
build=${2:-}

# The chromium the report tests render with, as scripts/python-test.sh installs it.
bash "$root/scripts/install-deps.sh" chromium
eval "$(bash "$root/scripts/torch2-env.sh")"
py=$SHARDCHECK_DCP_PYTHON
venv=$(dirname "$(dirname "$py")")
# Every adapter a test or a campaign starts runs on torch 2, DeepSpeed's included.
bash "$root/scripts/deepspeed-target.sh" >&2
export SHARDCHECK_DEEPSPEED_PATH=$root/out/deepspeed/current
export SHARDCHECK_TARGET_PYTHON=$py

cleanup=()
trap 'rm -rf "${cleanup[@]}"' EXIT
if [ -z "$wheels" ]; then
  wheels=$(mktemp -d)
  cleanup+=("$wheels")
  bash "$root/scripts/release.sh" "$wheels"
fi
# The release's wheel, offline and without dependencies (numpy and regex are there).
"$py" -m pip install --disable-pip-version-check --quiet --no-index --no-deps --force-reinstall \
  "$wheels"/shardcheck-*.whl
echo "torch2-test: $("$py" -c 'import torch, shardcheck; print("torch", torch.__version__, "shardcheck", shardcheck.__file__)')"

# Outside the source tree, so that the installed package is the one imported.
cd "$venv"
set +e
PATH="$venv/bin:$PATH" "$py" -m pytest -q -p no:cacheprovider "$root/python/tests"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
[ "$rc" -eq 0 ] || exit "$rc"

if [ -n "$build" ]; then
  ctest --test-dir "$build" --output-on-failure -R 'DcpTarget|MegatronTarget|DeepSpeed|deepspeed'
fi
