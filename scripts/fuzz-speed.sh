#!/usr/bin/env bash
# Fuzz throughput as ratios within one run (issue 29): each target's executions per second
# over one corpus under three builds of the same target code,
#   asan     the ASan + UBSan libFuzzer build that ClusterFuzzLite and the nightly run;
#   plain    the libFuzzer build without sanitizers that the nightly also runs;
#   release  a gcc Release replay driver (no engine, no sanitizer): the ceiling;
# and the ratios asan/release (issue 29: at least 1/3) and plain/asan (at least 5).
#
#   scripts/fuzz-speed.sh [TARGET...]      (default: conversion)
#
# The corpus: FUZZ_SPEED_CORPUS if set, else the nightly's persistent corpus of the target
# (out/fuzz-corpus/TARGET) when it has inputs, else one grown here: the seeds, fuzzed by
# the plain build for FUZZ_SPEED_GROW seconds (default 30), so that the inputs are the
# kind a fuzzer runs, not only its seeds. Every build runs every input of it, files given
# on the command line (libFuzzer then runs each once, as the replay driver does), in
# FUZZ_SPEED_ROUNDS rounds (default 3); the best round counts. One process per build
# and round, one core: the ratio, not the machine, is the result.
#
# Environment (optional): FUZZ_SKIP_BUILD=1 uses the builds as they are;
# FUZZ_SPEED_BUILD (default <repo>/build-fuzz, build-fuzz-plain, build-fuzz-release beside
# it); FUZZ_SPEED_MAX_INPUTS (default 2000, the smallest first); FUZZ_SPEED_OUT (default
# out/fuzz-speed/<time>): summary.json and the logs.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/fuzz/targets.sh"
source "$repo/scripts/fuzz-builds.sh"
targets=("$@")
((${#targets[@]})) || targets=(conversion)
for target in "${targets[@]}"; do
  fuzz_column "$target" role >/dev/null || exit 2
done
asan_dir=${FUZZ_SPEED_BUILD:-$repo/build-fuzz}
plain_dir=$asan_dir-plain
release_dir=$asan_dir-release
rounds=${FUZZ_SPEED_ROUNDS:-3}
grow=${FUZZ_SPEED_GROW:-30}
max_inputs=${FUZZ_SPEED_MAX_INPUTS:-2000}
out=${FUZZ_SPEED_OUT:-$repo/out/fuzz-speed/$(date +%Y%m%d-%H%M%S)}
[[ $rounds =~ ^[1-9][0-9]*$ && $grow =~ ^[0-9]+$ && $max_inputs =~ ^[1-9][0-9]*$ ]] ||
  { echo "fuzz-speed: FUZZ_SPEED_ROUNDS, FUZZ_SPEED_GROW and FUZZ_SPEED_MAX_INPUTS must be whole numbers" >&2; exit 2; }
mkdir -p "$out"

if [[ ${FUZZ_SKIP_BUILD:-0} != 1 ]]; then
  echo "fuzz-speed: building $asan_dir, $plain_dir and $release_dir (logs in $out)"
  fuzz_build_libfuzzer "$asan_dir" asan "$out/build-asan.log" "${targets[@]}"
  fuzz_build_libfuzzer "$plain_dir" plain "$out/build-plain.log" "${targets[@]}"
  fuzz_build_replay "$release_dir" "$out/build-release.log" "${targets[@]}"
fi
# The nightly's environment (scripts/fuzz-builds.sh), the same for all three builds.
fuzz_run_env

# Seconds one process takes to run every input once (the command and the input list).
seconds_for() {
  local log=$1 start end
  shift
  start=$(date +%s.%N)
  "$@" >"$log" 2>&1 || { echo "fuzz-speed: $1 failed on the corpus (see $log)" >&2; return 1; }
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN {printf "%.6f\n", b - a}'
}

summary="{"
printf '%-14s %7s %12s %12s %12s %14s %12s\n' target inputs asan/s plain/s release/s asan/release plain/asan
for target in "${targets[@]}"; do
  asan=$asan_dir/fuzz/$target
  plain=$plain_dir/fuzz/$target
  release=$release_dir/fuzz/${target}_replay
  for bin in "$asan" "$plain" "$release"; do
    [[ -x $bin ]] || { echo "fuzz-speed: missing $bin" >&2; exit 2; }
  done
  corpus=${FUZZ_SPEED_CORPUS:-$repo/out/fuzz-corpus/$target}
  if [[ -z ${FUZZ_SPEED_CORPUS:-} ]] && [[ ! -d $corpus || -z $(ls -A "$corpus" 2>/dev/null) ]]; then
    corpus=$out/$target-corpus
    mkdir -p "$corpus"
    read -r -a seeds <<<"$(fuzz_seed_dirs "$target")"
    mapfile -t extra < <(fuzz_flags "$target" "$repo/fuzz")
    echo "fuzz-speed: growing a corpus for $target: ${grow}s of the plain build from its seeds"
    "$plain" -max_total_time="$grow" -timeout=10 -rss_limit_mb=2048 "${extra[@]}" "$corpus" "${seeds[@]}" \
      >"$out/$target-grow.log" 2>&1 || true
    # The seeds too, in case the corpus directory kept none of them.
    for dir in "${seeds[@]}"; do find "$dir" -type f -exec cp -n {} "$corpus/" \; ; done
  fi
  mapfile -t inputs < <(find "$corpus" -type f -printf '%s %p\n' | sort -n | head -n "$max_inputs" | cut -d' ' -f2-)
  n=${#inputs[@]}
  ((n > 0)) || { echo "fuzz-speed: no input in $corpus" >&2; exit 2; }
  declare -A best=()
  for build in asan plain release; do
    case $build in
      asan) cmd=("$asan" -timeout=10 -rss_limit_mb=2048) ;;
      plain) cmd=("$plain" -timeout=10 -rss_limit_mb=2048) ;;
      release) cmd=("$release") ;;
    esac
    best[$build]=
    for ((round = 1; round <= rounds; round++)); do
      s=$(seconds_for "$out/$target-$build-$round.log" "${cmd[@]}" "${inputs[@]}") || exit 1
      if [[ -z ${best[$build]} ]] || awk -v s="$s" -v b="${best[$build]}" 'BEGIN {exit !(s < b)}'; then
        best[$build]=$s
      fi
    done
  done
  quotient() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.6f\n", a / b}'; }
  asan_rate=$(quotient "$n" "${best[asan]}") plain_rate=$(quotient "$n" "${best[plain]}")
  release_rate=$(quotient "$n" "${best[release]}")
  asan_ratio=$(quotient "$asan_rate" "$release_rate") plain_ratio=$(quotient "$plain_rate" "$asan_rate")
  printf '%-14s %7d %12.0f %12.0f %12.0f %14.3f %12.2f\n' "$target" "$n" "$asan_rate" "$plain_rate" "$release_rate" \
    "$asan_ratio" "$plain_ratio"
  [[ $summary == "{" ]] || summary+=","
  summary+=$(printf '"%s": {"inputs": %d, "corpus": "%s", "rounds": %d, "exec_per_s": {"asan": %.1f, "plain": %.1f, "release": %.1f}, "asan_vs_release": %.4f, "plain_vs_asan": %.3f}' \
    "$target" "$n" "$corpus" "$rounds" "$asan_rate" "$plain_rate" "$release_rate" "$asan_ratio" "$plain_ratio")
  unset best
done
echo "$summary}" >"$out/summary.json"
echo "fuzz-speed: issue 29 asks asan/release >= 0.333 and plain/asan >= 5; summary in $out/summary.json"
