#!/usr/bin/env bash
# The main job (README quick start): installs what is missing, builds an optimised
# shardcheck, and runs a campaign (default: a strict campaign of about a minute).
# Extra arguments go to `shardcheck campaign`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SHARDCHECK_BUILD:-$root/build}
bash "$root/scripts/install-deps.sh"
cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSHARDCHECK_TESTS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target shardcheck
exec "$build/shardcheck" campaign "$@"
