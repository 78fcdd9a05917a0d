#!/usr/bin/env bash
# Measures `shardcheck check` on a valid map of 10^N pieces: the map's size, the wall
# time and peak resident memory of the check (/usr/bin/time -v), and peak memory as a
# multiple of the text (issue 29 asks for at most 3). With SHARDCHECK_PYTHON set to an
# interpreter that imports shardcheck, also times shardcheck.check on the same file in
# that interpreter (from text in memory, and from the path).
#
#   scripts/large-map.sh [N] [OUT_DIR]
#     N        pieces as a power of ten (default 6; 7 is about 1 GB of JSON)
#     OUT_DIR  where the map and the measurements go (default: large-map-out); the map is
#              kept and reused by the next run with the same N
#   SHARDCHECK_BIN     the executable (default: a Release build in build-rel, made here)
#   SHARDCHECK_PYTHON  an interpreter with the shardcheck package (optional)
#
# The map is scripts/large_map.py's: rows of 64 elements dealt out to 8 ranks in turn, one
# piece per row, in DeepSpeed's JSON spelling. Run it on an otherwise idle machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
power=${1:-6}
out=${2:-large-map-out}
[[ $power =~ ^[0-9]$ ]] || { echo "N must be a digit (pieces = 10^N), got '$power'" >&2; exit 2; }
pieces=$((10 ** power))
mkdir -p "$out"

bin=${SHARDCHECK_BIN:-}
if [[ -z $bin ]]; then
  cmake -G Ninja -S "$root" -B "$root/build-rel" -DCMAKE_BUILD_TYPE=Release -DSHARDCHECK_TESTS=OFF \
    -DSHARDCHECK_BENCH=OFF >/dev/null
  cmake --build "$root/build-rel" --target shardcheck >/dev/null
  bin=$root/build-rel/shardcheck
fi

map=$out/map-1e$power.json
if [[ ! -s $map ]]; then
  /usr/bin/python3 "$root/scripts/large_map.py" "$pieces" "$map.tmp"
  mv "$map.tmp" "$map"
fi
bytes=$(stat -c %s "$map")

set +e
/usr/bin/time -v -o "$out/time.txt" "$bin" check "$map" >"$out/check.txt" 2>"$out/check.err"
rc=$?
set -e
verdict=$(cat "$out/check.txt")
wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$out/time.txt")
rss_kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$out/time.txt")
awk -v pieces="$pieces" -v bytes="$bytes" -v rc="$rc" -v verdict="$verdict" -v wall="$wall" -v rss="$rss_kb" \
  'BEGIN { printf "pieces %d, map %d bytes (%.0f MB): check exit %d, %s\n", pieces, bytes, bytes / 1e6, rc, verdict
           printf "wall %s, peak RSS %.0f MB, %.2fx the text\n", wall, rss * 1024 / 1e6, rss * 1024 / bytes }' 
[[ $rc -eq 0 && $verdict == valid ]] || { cat "$out/check.err" >&2; exit 1; }

if [[ -n ${SHARDCHECK_PYTHON:-} ]]; then
  "$SHARDCHECK_PYTHON" - "$map" <<'EOF'
import pathlib, sys, time
import shardcheck

path = pathlib.Path(sys.argv[1])
start = time.perf_counter()
shardcheck.check(path)
from_path = time.perf_counter() - start
text = path.read_text()
start = time.perf_counter()
shardcheck.check(text)
from_text = time.perf_counter() - start
print(f"python shardcheck.check: {from_path:.2f} s from the path, {from_text:.2f} s from text in memory")
EOF
fi
