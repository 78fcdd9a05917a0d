#!/usr/bin/env bash
# Runs .clusterfuzzlite/build.sh outside Docker with the OSS-Fuzz variables set to
# local values, then checks the contract: every binary, seed corpus zip, dictionary and
# options file that fuzz/targets.txt names for a `ships` target landed in $OUT, no
# canary did, no binary needs a shared library the runner image lacks, and each binary
# runs its seeds plus 100 fuzzing iterations.
# CI runs this so the ClusterFuzzLite build cannot rot unnoticed.
#
#   [SANITIZER=address|coverage] scripts/clusterfuzzlite-build-local.sh [OUT_DIR]
#                                                        (default: a temp dir, removed)
# KEEP_WORK=1 keeps $WORK (the build tree) for a faster rerun.
# SANITIZER=coverage builds as OSS-Fuzz's coverage mode does (source-based coverage flags
# in $CFLAGS/$CXXFLAGS, no sanitizer) and also checks that the runs leave a profile whose
# report covers the core library.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/fuzz/targets.sh"
mapfile -t targets < <(fuzz_targets ships)
mapfile -t canaries < <(fuzz_targets canary)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shardcheck-cfl.XXXXXX")
cleanup() { [[ ${KEEP_WORK:-0} == 1 ]] || rm -rf "$tmp"; }
trap cleanup EXIT

export CC=${CC:-clang} CXX=${CXX:-clang++}
export SANITIZER=${SANITIZER:-address}
case $SANITIZER in
  address)
    # OSS-Fuzz's own defaults (base-clang: -O1 -fno-omit-frame-pointer -gline-tables-only
    # -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) plus its address and undefined flags.
    export CFLAGS="-O1 -fno-omit-frame-pointer -gline-tables-only -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -fsanitize=address,undefined -fno-sanitize-recover=undefined -fsanitize=fuzzer-no-link" ;;
  coverage)
    # OSS-Fuzz's coverage flags (base-builder: SANITIZER_FLAGS_coverage).
    export CFLAGS="-O1 -fno-omit-frame-pointer -gline-tables-only -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -fprofile-instr-generate -fcoverage-mapping -pthread -Wl,--no-as-needed -Wl,-ldl -Wl,-lm -Wno-unused-command-line-argument -fsanitize=fuzzer-no-link" ;;
  *) echo "clusterfuzzlite-build-local: SANITIZER must be address or coverage, not $SANITIZER" >&2; exit 2 ;;
esac
export CXXFLAGS="$CFLAGS"
export LIB_FUZZING_ENGINE=-fsanitize=fuzzer
export OUT=${1:-$tmp/out} WORK=$tmp/work
# build.sh expects the checkout at $SRC/shardcheck; a link lets any checkout name work.
export SRC=$tmp/src
mkdir -p "$OUT" "$WORK" "$SRC" "$tmp/profiles"
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
  mapfile -t options < <(fuzz_flags "$target" "$OUT")
  if ! (cd "$OUT" && LLVM_PROFILE_FILE="$tmp/profiles/$target-%p.profraw" \
          "$bin" -runs=100 -seed=1 "${options[@]}" "$seeds" >"$tmp/$target.log" 2>&1); then
    echo "FAILED: $target -runs=100"; tail -30 "$tmp/$target.log"; status=1
  else
    echo "ok: $target ($(grep -oE 'Done [0-9]+ runs' "$tmp/$target.log" || echo ran))"
  fi
done

# A coverage build is only useful if its binaries write profiles that map back to the
# sources: merge them and ask llvm-cov for the core library's line coverage.
if [[ $SANITIZER == coverage ]]; then
  major=$("$CXX" -dumpversion | cut -d. -f1)
  profdata=$(command -v "llvm-profdata-$major" || command -v llvm-profdata || true)
  cov=$(command -v "llvm-cov-$major" || command -v llvm-cov || true)
  objects=()
  for target in "${targets[@]}"; do
    [[ -x $OUT/$target ]] && objects+=(${objects:+-object} "$OUT/$target")
  done
  if [[ -z $profdata || -z $cov ]]; then
    echo "NO TOOLS: llvm-profdata/llvm-cov for LLVM $major not found"; status=1
  elif ! "$profdata" merge -sparse "$tmp"/profiles/*.profraw -o "$tmp/all.profdata" 2>"$tmp/profdata.log"; then
    echo "NO PROFILE: the coverage binaries wrote no usable profile"; cat "$tmp/profdata.log"; status=1
  else
    "$cov" report -instr-profile="$tmp/all.profdata" "${objects[@]}" >"$tmp/coverage.txt" 2>&1 || true
    core_lines=$(awk '$1 ~ /core\/src\/checks\.cc$/ {print $(NF-3)}' "$tmp/coverage.txt")
    if [[ -z $core_lines || $core_lines == 0.00% || $core_lines == - ]]; then
      echo "NO COVERAGE: the report does not cover core/src/checks.cc"; tail -20 "$tmp/coverage.txt"; status=1
    else
      echo "ok: coverage report (core/src/checks.cc lines $core_lines; $(tail -1 "$tmp/coverage.txt" | awk '{print "total lines " $(NF-3)}'))"
    fi
  fi
fi
((status == 0)) && echo "clusterfuzzlite-build-local: OK"
exit "$status"
