#!/usr/bin/env bash
# Unattended fuzzing campaign over every libFuzzer target of fuzz/targets.txt.
#
#   scripts/fuzz-nightly.sh [TOTAL_SECONDS]
#
# Builds the clang fuzz build (ASan + UBSan, libraries instrumented with
# -fsanitize=fuzzer-no-link, coverage feedback without fuzz/coverage-ignorelist.txt's
# JSON, fmt and standard library functions, as in the ClusterFuzzLite build) and the same
# without sanitizers (several times the executions a second: scripts/fuzz-speed.sh),
# splits the time budget evenly across the targets, runs each with -fork on every core,
# first on the plain build for its share of the time, then on the sanitizer build, both
# growing one corpus, merges and prunes the corpus, replays every crash (the plain
# build's too) on the sanitizer build to read its `SHARDCHECK-FINDING:` signature (or
# the sanitizer's summary), so that a plain crash is reported as ASan or UBSan see it, keeps the
# smallest input per signature, minimises it within a time bound, and turns it into a
# regression case file. Ends with a summary; exits 1 when any target other than a
# canary (the `canary` rows of fuzz/targets.txt: conversion_legacy, reshard_merge_bug) has
# findings, 3 when a canary found nothing although its share of the budget was at least
# 60 s (the harness would have lost its teeth).
#
# Environment (all optional):
#   FUZZ_BUDGET          total seconds when no argument is given (default 3600)
#   FUZZ_JOBS            parallel fuzzing processes per target (default: every core)
#   FUZZ_TARGETS         space-separated subset (default: every row of fuzz/targets.txt)
#   FUZZ_BUILD_DIR       fuzz build directory (default: <repo>/build-fuzz)
#   FUZZ_PLAIN_BUILD_DIR the build without sanitizers (default: FUZZ_BUILD_DIR-plain)
#   FUZZ_PLAIN_SHARE     percent of each target's fuzzing time on the plain build (default
#                        50; 0: the sanitizer build alone, and no plain build is made)
#   FUZZ_SKIP_BUILD=1    use the existing build as it is
#   FUZZ_STATE           persistent corpora, one directory per target (default: <repo>/out/fuzz-corpus)
#   FUZZ_WORK            this run's logs, artifacts and findings (default: <repo>/out/fuzz-nightly/<time>)
#   FUZZ_MINIMIZE_SECONDS  bound per crash minimisation (default: a quarter of a target's share, <= 60)
#   FUZZ_MAX_ARTIFACTS   crashes replayed per target, smallest first (default 50)
#   FUZZ_MAX_MINIMIZE    signatures minimised per target (default 8; the canary's never are)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/fuzz/targets.sh"
source "$repo/scripts/fuzz-builds.sh"
budget=${1:-${FUZZ_BUDGET:-3600}}
jobs=${FUZZ_JOBS:-$(nproc)}
read -r -a targets <<<"${FUZZ_TARGETS:-$(fuzz_targets | tr '\n' ' ')}"
for target in "${targets[@]}"; do
  fuzz_column "$target" role >/dev/null || exit 2
done
build=${FUZZ_BUILD_DIR:-$repo/build-fuzz}
plain_build=${FUZZ_PLAIN_BUILD_DIR:-$build-plain}
plain_share=${FUZZ_PLAIN_SHARE:-50}
[[ $plain_share =~ ^[0-9]+$ && $plain_share -le 100 ]] || { echo "FUZZ_PLAIN_SHARE must be 0 to 100" >&2; exit 2; }
state=${FUZZ_STATE:-$repo/out/fuzz-corpus}
work=${FUZZ_WORK:-$repo/out/fuzz-nightly/$(date +%Y%m%d-%H%M%S)}
max_artifacts=${FUZZ_MAX_ARTIFACTS:-50}
max_minimize=${FUZZ_MAX_MINIMIZE:-8}
is_canary() { [[ $(fuzz_column "$1" role) == canary ]]; }

[[ $budget =~ ^[0-9]+$ && $budget -ge ${#targets[@]} ]] || { echo "budget must be >= 1 s per target" >&2; exit 2; }
mkdir -p "$work" "$state" "$work/regressions" "$work/canary"
echo "fuzz-nightly: ${#targets[@]} targets, ${budget}s total, $jobs jobs, work dir $work"

if [[ ${FUZZ_SKIP_BUILD:-0} != 1 ]]; then
  echo "fuzz-nightly: building $build"
  fuzz_build_libfuzzer "$build" asan "$work/build.log" "${targets[@]}" || exit 2
  if ((plain_share > 0)); then
    echo "fuzz-nightly: building $plain_build (no sanitizer)"
    fuzz_build_libfuzzer "$plain_build" plain "$work/build-plain.log" "${targets[@]}" || exit 2
  fi
fi

share=$((budget / ${#targets[@]}))
min_bound=${FUZZ_MINIMIZE_SECONDS:-$((share / 4 < 60 ? (share / 4 > 2 ? share / 4 : 2) : 60))}
# Merging and minimising come out of each target's share too.
fuzz_seconds=$((share - share / 5 > 1 ? share - share / 5 : 1))
fuzz_run_env abort_on_error=1:

slug() {  # a file name for a signature: readable prefix, hash for uniqueness
  local clean hash
  clean=$(printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '-' | cut -c1-80)
  hash=$(printf '%s' "$1" | sha1sum | cut -c1-8)
  echo "${clean}-${hash}"
}

# Replays one input and prints its signature: the target's own finding line, else
# what the sanitizer or libFuzzer said, else "unreproduced".
signature_of() {
  local bin=$1 target=$2 input=$3 log=$4 sig where
  "$bin" -timeout=10 -rss_limit_mb=2048 "$input" >"$log" 2>&1 || true
  sig=$(sed -n 's/^SHARDCHECK-FINDING: //p' "$log" | head -1)
  if [[ -z $sig ]]; then
    where=$(sed -n 's/^SUMMARY: \([A-Za-z]*\): \([^ ]*\) \([^ ]*\).*/\1:\2:\3/p' "$log" | head -1 |
      sed 's#[^:]*/##')  # keep file:line, drop the directory
    if [[ -n $where ]]; then sig="crash:$target:$where"
    elif grep -q 'ERROR: libFuzzer: timeout' "$log"; then sig="timeout:$target"
    elif grep -q 'ERROR: libFuzzer: out-of-memory' "$log"; then sig="oom:$target"
    elif grep -q 'ERROR: libFuzzer: deadly signal' "$log"; then sig="crash:$target:deadly-signal"
    else sig="unreproduced:$target"; fi
  fi
  echo "$sig"
}

# Writes the regression file for a finding: the case file the target printed, or,
# for a crash without one, the signature as the first line of a .txt next to the raw
# bytes (wrapped in a case file when the bytes are a map document).
save_finding() {
  local sig=$1 input=$2 log=$3 dir=$4 name
  name=$(slug "$sig")
  if grep -q '^SHARDCHECK-CASE-BEGIN$' "$log"; then
    sed -n '/^SHARDCHECK-CASE-BEGIN$/,/^SHARDCHECK-CASE-END$/p' "$log" | sed '1d;$d' >"$dir/$name.json"
  else
    { echo "# SHARDCHECK-FINDING: $sig"; cat "$input"; } >"$dir/$name.txt"
    cp "$input" "$dir/$name.input"
    if command -v python3 >/dev/null; then
      python3 - "$input" "$sig" "$dir/$name.json" <<'PY' || true
import json, sys
try:
    doc = json.load(open(sys.argv[1], encoding="utf-8"))
except Exception:
    sys.exit(0)
if isinstance(doc, dict) and "logical_shape" in doc:
    case = {"shardcheck_case": 1, "name": sys.argv[2], "signature": sys.argv[2], "map": doc}
    json.dump(case, open(sys.argv[3], "w"), indent=2)
PY
    fi
  fi
  echo "$dir/$name"
}

declare -A execs_per_s plain_execs_per_s corpus_before corpus_after found_count
declare -a finding_lines=()
strict_findings=0

for target in "${targets[@]}"; do
  bin="$build/fuzz/$target"
  [[ -x $bin ]] || { echo "fuzz-nightly: missing $bin" >&2; exit 2; }
  tdir="$work/$target"
  corpus="$state/$target"
  mkdir -p "$tdir/artifacts" "$corpus"
  corpus_before[$target]=$(find "$corpus" -type f | wc -l)
  mapfile -t extra < <(fuzz_flags "$target" "$repo/fuzz")  # its options file, as ClusterFuzzLite runs it
  read -r -a seeds <<<"$(fuzz_seed_dirs "$target")"
  plain_seconds=$((fuzz_seconds * plain_share / 100))
  sanitized_seconds=$((fuzz_seconds - plain_seconds > 0 ? fuzz_seconds - plain_seconds : 1))
  plain_execs_per_s[$target]=-
  if ((plain_seconds > 0)); then
    plain_bin="$plain_build/fuzz/$target"
    [[ -x $plain_bin ]] || { echo "fuzz-nightly: missing $plain_bin" >&2; exit 2; }
    echo "fuzz-nightly: $target for ${plain_seconds}s without sanitizers"
    # Its artifacts are replayed on the sanitizer build below, like the others.
    "$plain_bin" -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -max_total_time="$plain_seconds" \
      -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$tdir/artifacts/plain-" "${extra[@]}" \
      "$corpus" "${seeds[@]}" >"$tdir/fuzz-plain.log" 2>&1 || true
    plain_execs_per_s[$target]=$(grep -oE 'exec/s:? [0-9]+' "$tdir/fuzz-plain.log" | tail -1 | grep -oE '[0-9]+' || echo "?")
  fi
  echo "fuzz-nightly: $target for ${sanitized_seconds}s with ASan and UBSan"
  "$bin" -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -max_total_time="$sanitized_seconds" \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$tdir/artifacts/" "${extra[@]}" \
    "$corpus" "${seeds[@]}" >"$tdir/fuzz.log" 2>&1 || true
  execs_per_s[$target]=$(grep -oE 'exec/s:? [0-9]+' "$tdir/fuzz.log" | tail -1 | grep -oE '[0-9]+' || echo "?")

  # Merge into a fresh directory, then replace: drops inputs that add no coverage.
  fresh=$(mktemp -d "$state/.$target.merge.XXXXXX")
  if "$bin" -merge=1 -timeout=10 -rss_limit_mb=2048 "$fresh" "$corpus" >"$tdir/merge.log" 2>&1; then
    rm -rf "$corpus" && mv "$fresh" "$corpus"
  else
    echo "fuzz-nightly: merge of $target failed, corpus kept (see $tdir/merge.log)" >&2
    rm -rf "$fresh"
  fi
  corpus_after[$target]=$(find "$corpus" -type f | wc -l)

  # Findings: replay the smallest artifacts first, one kept per signature.
  declare -A kept=() occurrences=()
  while IFS= read -r artifact; do
    [[ -n $artifact ]] || continue
    sig=$(signature_of "$bin" "$target" "$artifact" "$tdir/replay.log")
    occurrences[$sig]=$((${occurrences[$sig]:-0} + 1))
    [[ -n ${kept[$sig]:-} ]] || kept[$sig]=$artifact
  done < <(find "$tdir/artifacts" -type f \( -name '*crash-*' -o -name '*leak-*' -o -name '*timeout-*' -o -name '*oom-*' \) \
             -printf '%s %p\n' | sort -n | head -n "$max_artifacts" | cut -d' ' -f2-)
  found_count[$target]=${#kept[@]}
  n=0
  for sig in "${!kept[@]}"; do
    n=$((n + 1))
    input=${kept[$sig]}
    # The canary's findings are expected and many; one input per signature is enough.
    if is_canary "$target" || ((n > max_minimize)); then sig_kind=keep; else sig_kind=$sig; fi
    case $sig_kind in
      keep | timeout:* | oom:* | unreproduced:*) ;;
      *)
        min="$tdir/minimized-$n"
        "$bin" -minimize_crash=1 -max_total_time="$min_bound" -timeout=10 -rss_limit_mb=2048 \
          -exact_artifact_path="$min" "$input" >"$tdir/minimize-$n.log" 2>&1 || true
        if [[ -s $min && $(signature_of "$bin" "$target" "$min" "$tdir/min-replay.log") == "$sig" ]]; then
          input=$min
        fi ;;
    esac
    signature_of "$bin" "$target" "$input" "$tdir/finding-$n.log" >/dev/null
    if is_canary "$target"; then
      file=$(save_finding "$sig" "$input" "$tdir/finding-$n.log" "$work/canary")
    else
      file=$(save_finding "$sig" "$input" "$tdir/finding-$n.log" "$work/regressions")
      strict_findings=$((strict_findings + 1))
    fi
    finding_lines+=("$target|$sig|${occurrences[$sig]}|$(stat -c %s "$input")|$file")
  done
  unset kept occurrences
done

echo
echo "== fuzz-nightly summary ($(date -u +%FT%TZ), ${budget}s budget, $jobs jobs) =="
printf '%-18s %8s %10s %12s %16s %9s\n' target seconds exec/s plain-exec/s corpus findings
for target in "${targets[@]}"; do
  printf '%-18s %8s %10s %12s %16s %9s\n' "$target" "$fuzz_seconds" "${execs_per_s[$target]}" \
    "${plain_execs_per_s[$target]}" "${corpus_before[$target]} -> ${corpus_after[$target]}" "${found_count[$target]}"
done
if ((${#finding_lines[@]})); then
  echo
  echo "findings by signature (target | signature | crashes | bytes | file):"
  printf '  %s\n' "${finding_lines[@]}"
fi
echo
echo "regression files: $work/regressions (copy into corpus/regressions/ once triaged)"
if ((strict_findings > 0)); then
  echo "fuzz-nightly: FAIL: $strict_findings finding signature(s)"
  exit 1
fi
silent_canaries=0
for target in "${targets[@]}"; do
  is_canary "$target" && ((found_count[$target] == 0)) || continue
  if ((fuzz_seconds >= 60)); then
    echo "fuzz-nightly: FAIL: the $target canary found no silently wrong conversion in ${fuzz_seconds}s"
    silent_canaries=$((silent_canaries + 1))
  else
    echo "fuzz-nightly: note: the $target canary found nothing in ${fuzz_seconds}s (too short to judge)"
  fi
done
((silent_canaries == 0)) || exit 3
echo "fuzz-nightly: OK"
