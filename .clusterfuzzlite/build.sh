#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build script. Honours the contract's variables: $CXX,
# $CXXFLAGS (sanitizers and -fsanitize=fuzzer-no-link come from there), $CFLAGS and
# $CC (unused: the project is C++ only), $LIB_FUZZING_ENGINE (replaces
# -fsanitize=fuzzer at link time), $SRC (the checkout is $SRC/shardcheck), $WORK (the
# build tree) and $OUT (binaries, seed corpora, dictionaries, options).
#
# The conversion_legacy canary is left out of $OUT on purpose: it is built to crash
# within a minute (its proof that it can fail) and would fail every fuzzing run; the
# nightly script and ctest exercise it instead.
#
# fmt is used header-only (FMT_HEADER_ONLY) and linked --as-needed, so the binaries
# depend on no Debian shared library: the runner image has none of them, and the
# header-only form also works with OSS-Fuzz's libc++.

repo=${SHARDCHECK_SRC:-$SRC/shardcheck}
build=$WORK/shardcheck-build
targets=(map_json conversion case_file)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

cmake "${generator[@]}" -S "$repo" -B "$build" \
  -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_CXX_FLAGS="$CXXFLAGS -DFMT_HEADER_ONLY=1" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--as-needed" \
  -DCMAKE_BUILD_TYPE=None \
  -DSHARDCHECK_FUZZ=ON -DSHARDCHECK_FUZZ_ENGINE="$LIB_FUZZING_ENGINE" \
  -DSHARDCHECK_SANITIZE=OFF -DSHARDCHECK_TESTS=OFF -DSHARDCHECK_BENCH=OFF -DSHARDCHECK_CUDA=OFF
cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]}"

seeds_of() {
  case $1 in
    case_file) echo "$repo/corpus/case_file $repo/corpus/regressions" ;;
    *) echo "$repo/corpus/$1" ;;
  esac
}

for target in "${targets[@]}"; do
  cp "$build/fuzz/$target" "$OUT/"
  read -r -a dirs <<<"$(seeds_of "$target")"
  rm -f "$OUT/${target}_seed_corpus.zip"
  find "${dirs[@]}" -type f -print0 | xargs -0 zip -q -j "$OUT/${target}_seed_corpus.zip"
  [[ -f $repo/fuzz/$target.options ]] && cp "$repo/fuzz/$target.options" "$OUT/"
  [[ -f $repo/fuzz/$target.dict ]] && cp "$repo/fuzz/$target.dict" "$OUT/"
done
