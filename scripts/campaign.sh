#!/usr/bin/env bash
# The main job (README quick start): installs what is missing, builds an optimised
# shardcheck, installs it as `shardcheck` on PATH (cmake --install into
# $SHARDCHECK_PREFIX/bin, default /usr/local/bin), and runs a campaign (default: a strict
# campaign of about a minute). Extra arguments go to `shardcheck campaign`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SHARDCHECK_BUILD:-$root/build}
prefix=${SHARDCHECK_PREFIX:-/usr/local}
bash "$root/scripts/install-deps.sh"
cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSHARDCHECK_TESTS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target shardcheck
sudo_cmd=""
mkdir -p "$prefix/bin" 2>/dev/null || true
[ -w "$prefix/bin" ] || sudo_cmd="sudo"
$sudo_cmd cmake --install "$build" --prefix "$prefix" >/dev/null
echo "shardcheck installed: $prefix/bin/shardcheck ($("$prefix/bin/shardcheck" --version))"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "note: $prefix/bin is not on PATH; add it, or run $prefix/bin/shardcheck" ;;
esac
exec "$prefix/bin/shardcheck" campaign "$@"
