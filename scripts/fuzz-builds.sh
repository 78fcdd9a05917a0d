# Sourced by scripts/fuzz-nightly.sh and scripts/fuzz-speed.sh: the libFuzzer builds they
# share, configured once here.
#   fuzz_build_libfuzzer DIR MODE LOG TARGET...
#     MODE asan: ASan + UBSan, as ClusterFuzzLite and the nightly fuzz (every report
#                is a bug, every crash replays with a sanitizer's summary);
#     MODE plain: no sanitizer, optimised, for throughput: its crashes are replayed on
#                the asan build before anyone reports them.
#     Both instrument the libraries for coverage (-fsanitize=fuzzer-no-link) without
#     fuzz/coverage-ignorelist.txt's JSON, fmt and standard library functions.
#   fuzz_build_replay DIR LOG TARGET...
#     A gcc Release build of the targets' replay drivers (<target>_replay, fuzz/replay_main.cc):
#     the same target code with no engine and no sanitizer, the ceiling a fuzzer's
#     exec/s is measured against.
fuzz_build_libfuzzer() {
  local dir=$1 mode=$2 log=$3 repo
  shift 3
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  # Without an engine of its own a fuzz build is always a sanitizer build (CMakeLists.txt);
  # the plain one names libFuzzer as its engine, as OSS-Fuzz's $LIB_FUZZING_ENGINE does.
  local mode_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDCHECK_SANITIZE=ON -DSHARDCHECK_FUZZ_ENGINE=)
  [[ $mode == plain ]] &&
    mode_flags=(-DCMAKE_BUILD_TYPE=Release -DSHARDCHECK_SANITIZE=OFF -DSHARDCHECK_FUZZ_ENGINE=-fsanitize=fuzzer)
  [[ $mode == asan || $mode == plain ]] || { echo "fuzz_build_libfuzzer: mode asan or plain, got '$mode'" >&2; return 2; }
  CC=clang CXX=clang++ cmake -G Ninja -S "$repo" -B "$dir" -DSHARDCHECK_FUZZ=ON "${mode_flags[@]}" \
    -DSHARDCHECK_CUDA=OFF -DSHARDCHECK_TESTS=OFF -DSHARDCHECK_BENCH=OFF \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link -fsanitize-coverage-ignorelist=$repo/fuzz/coverage-ignorelist.txt" \
    >"$log" 2>&1 && ninja -C "$dir" "$@" >>"$log" 2>&1 || { tail -30 "$log" >&2; return 2; }
}

fuzz_build_replay() {
  local dir=$1 log=$2 repo
  shift 2
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  local replays=()
  for target in "$@"; do replays+=("${target}_replay"); done
  cmake -G Ninja -S "$repo" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DSHARDCHECK_CUDA=OFF -DSHARDCHECK_TESTS=OFF \
    -DSHARDCHECK_BENCH=OFF >"$log" 2>&1 && ninja -C "$dir" "${replays[@]}" >>"$log" 2>&1 ||
    { tail -30 "$log" >&2; return 2; }
}
