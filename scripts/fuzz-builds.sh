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
#   fuzz_run_env [ASAN_PREFIX]
#     Exports the environment the fuzzers run in, each variable only where the caller has
#     not set it (ASAN_PREFIX goes in front of the ASan defaults, e.g. abort_on_error=1:).
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

# ASAN_OPTIONS: quarantine_size_mb=10 is OSS-Fuzz's and ClusterFuzz(Lite)'s value (their
# base-runner image) instead of ASan's 256. A conversion input allocates about 600 blocks,
# 117 KB, so 10 MB still holds every block freed during the input that touches it again
# (and those of the previous ~80 inputs); with 256 MB every block of a 2,000-input run came
# from fresh pages (112,000 page faults against 22,000), 12-21% of the ASan build's profile.
# OMP_WAIT_POLICY=passive: the backend differential runs the device code on a team of two
# OpenMP threads in every input, and an idle team member otherwise spins (libomp 200 ms,
# libgomp up to 300,000 rounds) on a core that another fuzzing job or the other half of the
# team needs; on the shared 2-core machine the Release replay of 2,000 inputs took 6-10 s
# spinning against 0.27 s passive. Neither changes what is checked: the same judges, the same
# two threads, every ASan and UBSan check.
fuzz_run_env() {
  export ASAN_OPTIONS=${ASAN_OPTIONS:-${1:-}detect_leaks=1:allocator_may_return_null=1:quarantine_size_mb=10}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
}
