#!/usr/bin/env bash
# CI's bounded fuzz run: each `ships` target of fuzz/targets.txt in OUT (as built by
# scripts/clusterfuzzlite-build-local.sh, i.e. through the OSS-Fuzz contract) fuzzes
# from its seed corpus for SECONDS. Any crash or finding fails the run and prints the
# reproducer: the SHARDCHECK-FINDING signature line and the case file, or the crash.
#   scripts/fuzz-ci.sh OUT [SECONDS]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/fuzz/targets.sh"
mapfile -t targets < <(fuzz_targets ships)
out=${1:?usage: scripts/fuzz-ci.sh OUT [SECONDS]}
seconds=${2:-60}
work=$(mktemp -d "${TMPDIR:-/tmp}/shardcheck-fuzz-ci.XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0
for target in "${targets[@]}"; do
  corpus=$work/$target
  mkdir -p "$corpus" "$work/artifacts"
  unzip -qo "$out/${target}_seed_corpus.zip" -d "$corpus"
  # The target's options file first, as ClusterFuzzLite runs it (dictionary, max_len, ...).
  mapfile -t options < <(fuzz_flags "$target" "$out")
  options+=(-max_total_time="$seconds" -seed=1 -print_final_stats=1 -artifact_prefix="$work/artifacts/$target-"
            -rss_limit_mb=2560 -timeout=25)
  if (cd "$out" && "./$target" "${options[@]}" "$corpus" >"$work/$target.log" 2>&1); then
    echo "fuzz $target: $(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$work/$target.log" | tail -1), no crash"
  else
    status=1
    echo "fuzz $target: FAILED"
    grep -m1 'SHARDCHECK-FINDING' "$work/$target.log" || true
    sed -n '/SHARDCHECK-CASE-BEGIN/,/SHARDCHECK-CASE-END/p' "$work/$target.log" | head -200
    grep -A30 -m1 -E 'ERROR: (AddressSanitizer|libFuzzer|UndefinedBehaviorSanitizer)|runtime error' "$work/$target.log" || tail -40 "$work/$target.log"
    for artifact in "$work"/artifacts/"$target"-*; do
      [[ -f $artifact ]] && { echo "reproducer ($artifact) as base64:"; base64 -w0 "$artifact"; echo; }
    done
  fi
done
exit "$status"
