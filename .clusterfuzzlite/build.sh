#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build script. Honours the contract's variables: $CXX,
# $CXXFLAGS (sanitizers and -fsanitize=fuzzer-no-link come from there), $CFLAGS and
# $CC (unused: the project is C++ only), $LIB_FUZZING_ENGINE (replaces
# -fsanitize=fuzzer at link time), $SRC (the checkout is $SRC/shardcheck), $WORK (the
# build tree) and $OUT (binaries, seed corpora, dictionaries, options).
# $SANITIZER needs no case of its own: its flags arrive in $CXXFLAGS. With
# SANITIZER=coverage they are clang's source-based coverage flags
# (-fprofile-instr-generate -fcoverage-mapping) and no sanitizer, and nothing here adds
# one: SHARDCHECK_SANITIZE stays OFF, and a fuzz build with its own engine does not turn
# it on. scripts/clusterfuzzlite-build-local.sh checks both modes (SANITIZER=coverage).
#
# The targets, their seed folders, dictionaries and options come from fuzz/targets.txt.
# Only its `ships` rows go to $OUT: a canary (conversion_legacy, reshard_merge_bug) is
# built to crash within a minute (its proof that it can fail) and would fail every
# fuzzing run; the nightly script and ctest exercise it instead.
#
# fmt is used header-only (FMT_HEADER_ONLY) and linked --as-needed, so the binaries
# depend on no Debian shared library: the runner image has none of them, and the
# header-only form also works with OSS-Fuzz's libc++.

repo=${SHARDCHECK_SRC:-$SRC/shardcheck}
build=$WORK/shardcheck-build
source "$repo/fuzz/targets.sh"
mapfile -t targets < <(fuzz_targets ships)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

# Coverage feedback (sanitizer coverage: edges and trace-cmp hooks) leaves out the JSON,
# formatting and standard libraries, fuzz/coverage-ignorelist.txt: 1.5-1.7x the execs per
# second with the same coverage of the project's code in the same time. The sanitizers
# still instrument everything.
ignorelist="-fsanitize-coverage-ignorelist=$repo/fuzz/coverage-ignorelist.txt"

cmake "${generator[@]}" -S "$repo" -B "$build" \
  -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_CXX_FLAGS="$CXXFLAGS $ignorelist -DFMT_HEADER_ONLY=1" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--as-needed" \
  -DCMAKE_BUILD_TYPE=None \
  -DSHARDCHECK_FUZZ=ON -DSHARDCHECK_FUZZ_ENGINE="$LIB_FUZZING_ENGINE" \
  -DSHARDCHECK_SANITIZE=OFF -DSHARDCHECK_TESTS=OFF -DSHARDCHECK_BENCH=OFF -DSHARDCHECK_CUDA=OFF
cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]}"

for target in "${targets[@]}"; do
  cp "$build/fuzz/$target" "$OUT/"
  read -r -a dirs <<<"$(fuzz_seed_dirs "$target")"
  rm -f "$OUT/${target}_seed_corpus.zip"
  find "${dirs[@]}" -type f -print0 | xargs -0 zip -q -j "$OUT/${target}_seed_corpus.zip"
  for column in dict options; do
    file=$(fuzz_column "$target" "$column")
    [[ $file == - ]] || cp "$repo/fuzz/$file" "$OUT/"
  done
done
