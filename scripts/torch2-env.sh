#!/usr/bin/env bash
# Makes the torch 2 environment the `dcp` and `megatron` targets run on (and the Python
# suite under torch 2, scripts/torch2-test.sh): a virtual environment from Debian's Python
# with torch 2.x, numpy and Megatron-Core from PyPI. Debian's own torch is 1.13, which has
# neither torch.distributed.checkpoint's current API nor what megatron-core needs (>= 2.6).
#
#   bash scripts/torch2-env.sh [VENV]     (default $SHARDCHECK_TORCH2_VENV or out/torch2/venv in the repository)
#   eval "$(bash scripts/torch2-env.sh)"  (its stdout is only the export lines)
#
# What it costs (docs/guide/targets.md, "The torch 2 environment"): PyPI's Linux torch
# wheel depends on NVIDIA's CUDA runtime wheels and does not import without them, so the
# environment is several GB even on a machine without a GPU. A pip configured for another
# index (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL) is used as configured.
#
# Megatron-Core 0.19.2 declares Requires-Python >= 3.12 although PyPI has a cp311 wheel
# of it, and Debian 12's Python is 3.11: it is installed with --ignore-requires-python
# and --no-deps, its declared dependencies (torch, numpy, packaging) beside it. The
# adapter imports only megatron.core.dist_checkpointing and megatron.core.resharding.
#
# Progress goes to stderr; stdout is the export lines alone. Run again, it only checks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-${SHARDCHECK_TORCH2_VENV:-$root/out/torch2/venv}}
torch_spec=${SHARDCHECK_TORCH2_TORCH:-torch>=2.6,<3}
megatron_spec=${SHARDCHECK_TORCH2_MEGATRON:-megatron-core==0.19.2}
base=/usr/bin/python3
say() { echo "torch2-env: $*" >&2; }

if ! "$base" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  say "installing python3-venv (Debian)"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >&2
fi

start=$SECONDS
py=$venv/bin/python
if [ ! -x "$py" ]; then
  say "creating $venv from $base"
  mkdir -p "$(dirname "$venv")"
  "$base" -m venv "$venv"
fi
pip=("$py" -m pip install --disable-pip-version-check --quiet --progress-bar off)

if ! "$py" -c 'import torch, numpy, sys; sys.exit(int(torch.__version__.split(".")[0]) < 2)' >/dev/null 2>&1; then
  say "installing $torch_spec, numpy (PyPI; several GB with its CUDA runtime wheels)"
  "${pip[@]}" "$torch_spec" numpy >&2
fi
if ! "$py" -c 'import megatron.core.dist_checkpointing' >/dev/null 2>&1; then
  say "installing $megatron_spec (--no-deps --ignore-requires-python) and packaging"
  "${pip[@]}" 'packaging>=24.2' >&2
  "${pip[@]}" --no-deps --ignore-requires-python "$megatron_spec" >&2
fi
# What python/tests needs beside the package (pyproject's [test] extra, the report tests'
# JUnit validator, inspect's regex).
if ! "$py" -c 'import pytest, hypothesis, junitparser, regex' >/dev/null 2>&1; then
  say "installing pytest, hypothesis, junitparser, regex"
  "${pip[@]}" pytest hypothesis junitparser regex >&2
fi

# Each adapter must load and answer the handshake, as the harness will ask it.
for target in dcp megatron; do
  answer=$(echo '{"id": 1, "op": "hello", "protocol": 1}' | "$py" "$root/adapters/$target/serve.py")
  say "$target: $answer"
done
say "$("$py" -c 'import torch; print("torch", torch.__version__)'), $(du -sh "$venv" | cut -f1) in $venv," \
  "$((SECONDS - start)) s"
echo "export SHARDCHECK_DCP_PYTHON=$py"
echo "export SHARDCHECK_MEGATRON_PYTHON=$py"
