#!/usr/bin/env bash
# Runs .clusterfuzzlite/build.sh outside Docker with the OSS-Fuzz variables set to
# local values, then checks the contract: every binary, seed corpus zip, dictionary and
# options file that fuzz/targets.txt names for a `ships` target landed in $OUT, no
# canary did, no binary needs a shared library the runner image lacks, and each binary
# runs its seeds plus 100 fuzzing iterations.
# CI runs this so the ClusterFuzzLite build cannot rot unnoticed.
#
#   scripts/clusterfuzzlite-build-local.sh [OUT_DIR]     (default: a temp dir, removed)
# KEEP_WORK=1 keeps $WORK (the build tree) for a faster rerun.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/fuzz/targets.sh"
mapfile -t targets < <(fuzz_targets ships)
mapfile -t canaries < <(fuzz_targets canary)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shardcheck-cfl.XXXXXX")
cleanup() { [[ ${KEEP_WORK:-0} == 1 ]] || rm -rf "$tmp"; }
trap cleanup EXIT

export CC=${CC:-clang} CXX=${CXX:-clang++}
export CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -fsanitize=fuzzer-no-link"
export CXXFLAGS="$CFLAGS"
export LIB_FUZZING_ENGINE=-fsanitize=fuzzer
export OUT=${1:-$tmp/out} WORK=$tmp/work
# build.sh expects the checkout at $SRC/shardcheck; a link lets any checkout name work.
export SRC=$tmp/src
mkdir -p "$OUT" "$WORK" "$SRC"
ln -s "$repo" "$SRC/shardcheck"

echo "clusterfuzzlite-build-local: OUT=$OUT"
bash "$repo/.clusterfuzzlite/build.sh" >"$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log"; exit 1; }

expected=()
for target in "${targets[@]}"; do
  expected+=("$target" "${target}_seed_corpus.zip")
  for column in dict options; do
    file=$(fuzz_column "$target" "$column")
    [[ $file == - ]] || expected+=("$file")
  done
done
status=0
for file in "${expected[@]}"; do
  [[ -s $OUT/$file ]] || { echo "MISSING: $OUT/$file"; status=1; }
done
for canary in "${canaries[@]}"; do
  [[ ! -e $OUT/$canary ]] || { echo "UNEXPECTED: the $canary canary is in \$OUT"; status=1; }
done

for target in "${targets[@]}"; do
  bin=$OUT/$target
  [[ -x $bin ]] || continue
  if ldd "$bin" | grep -Eq 'libfmt|libstdc\+\+.*not found|not found'; then
    echo "BAD LINK: $target needs a library the runner lacks:"; ldd "$bin" | grep -E 'libfmt|not found'; status=1
  fi
  seeds=$tmp/seeds/$target
  mkdir -p "$seeds"
  unzip -q -o "$OUT/${target}_seed_corpus.zip" -d "$seeds"
  options=()
  dict=$(fuzz_column "$target" dict)
  [[ $dict == - ]] || options+=("-dict=$OUT/$dict")
  if ! (cd "$OUT" && "$bin" -runs=100 -seed=1 "${options[@]}" "$seeds" >"$tmp/$target.log" 2>&1); then
    echo "FAILED: $target -runs=100"; tail -30 "$tmp/$target.log"; status=1
  else
    echo "ok: $target ($(grep -oE 'Done [0-9]+ runs' "$tmp/$target.log" || echo ran))"
  fi
done
((status == 0)) && echo "clusterfuzzlite-build-local: OK"
exit "$status"
